"""Bad input a student can plausibly give the public API: each gets an error from minirl itself,
of a stated type, whose message names what was wrong. And legal degenerate input keeps working.

Each case is (id, call, exception type, a regex the message must match). The calls are cheap: no
trainer runs a step (configs are checked when built, rewards before any gradient).
"""
from __future__ import annotations

import functools
import json
import math
import types

import pytest
import torch

from bad_input import PACKAGE, assert_refused_by_minirl

import minirl
from minirl import advantages, check, kl, losses, ops
from minirl.core import paths
from minirl.lm import memory
from minirl.lm.model import GPTConfig
from minirl.lm.sampling import sample_tokens
from minirl.train import best_of_n, overoptimization, rlhf, sft
from minirl.train.grpo import GRPOConfig
from minirl.train.pg import PGConfig
from minirl.train.ppo import PPOConfig
from minirl.train.raft import RAFTConfig
from minirl.world import evaluate, tasks


@functools.cache
def model():
    return minirl.load_model("base")


@functools.cache
def rollout():
    return minirl.sample(model(), ["q: 1+2= a:", "q: 3+4= a:"], max_new_tokens=6, group_size=2,
                         generator=torch.Generator().manual_seed(0))


def rt(B=3, T=4):
    """rewards (B, T), a ragged 0/1 mask and values, as float tensors."""
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1.0] * T, [1.0] * (T - 1) + [0.0], [1.0] + [0.0] * (T - 1)])[:B]
    return torch.randn(B, T, generator=g), mask, torch.randn(B, T, generator=g)


def reward_fn_returning(value):
    def constant_reward(prompts, completions, **kwargs):
        return value(len(completions)) if callable(value) else value
    return constant_reward


def train_one_step(train, config, **kwargs):
    return train(minirl.load_model("base"), tasks.arithmetic_task(), config, **kwargs)


def ppo_loss_with_logratio_as_ratio():
    x, m, _ = rt()
    return losses.clipped_objective(x, torch.ones_like(x), 0.2)  # x holds log-ratios of both signs


CASES = [
    # ------------------------------------------------------------ load_model and devices
    ("load_model: unknown name", lambda: minirl.load_model("gpt2"), ValueError, "unknown model .gpt2.; choose one of .base."),
    ("load_model: device 'gpu'", lambda: minirl.load_model("base", device="gpu"), ValueError, "unknown device 'gpu'.*'cpu', 'cuda'"),
    ("load_model: device 3.5", lambda: minirl.load_model("base", device=3.5), ValueError, "unknown device 3.5"),
    ("load_model: device 'cuda:x'", lambda: minirl.load_model("base", device="cuda:x"), ValueError, "unknown device 'cuda:x'"),
    pytest.param("load_model: cuda without CUDA", lambda: minirl.load_model("base", device="cuda"), ValueError,
                 "CUDA is not available.*device='cpu'",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    pytest.param("load_model: mps without MPS", lambda: minirl.load_model("base", device="mps"), ValueError,
                 "MPS.*not available.*device='cpu'",
                 marks=pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")),
    ("load_model: device 'xla'", lambda: minirl.load_model("base", device="xla"), ValueError, "runs on 'cpu', 'cuda' and 'mps'"),
    ("GPTConfig: n_embd not divisible by n_head", lambda: GPTConfig(n_embd=100, n_head=3), ValueError, "divisible by n_head"),
    ("GPTConfig: zero layers", lambda: GPTConfig(n_layer=0), ValueError, "n_layer must be >= 1"),
    ("GPTConfig: float width", lambda: GPTConfig(n_embd=128.0), TypeError, "n_embd must be an integer"),
    # ------------------------------------------------------------ sample
    ("sample: one string", lambda: minirl.sample(model(), "q: 1+2= a:", max_new_tokens=4), TypeError, "list of strings"),
    ("sample: list of ints", lambda: minirl.sample(model(), [1, 2], max_new_tokens=4), TypeError, "list of strings.*sample_tokens"),
    ("sample: empty list", lambda: minirl.sample(model(), [], max_new_tokens=4), ValueError, "no prompts given"),
    ("sample: empty prompt", lambda: minirl.sample(model(), [""], max_new_tokens=4), ValueError, "at least one token"),
    ("sample: NaN temperature", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, temperature=math.nan),
     ValueError, "temperature must be a finite number"),
    ("sample: negative temperature", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, temperature=-1.0),
     ValueError, "temperature must be a finite number >= 0, got -1.0"),
    ("sample: infinite temperature", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, temperature=math.inf),
     ValueError, "temperature"),
    ("sample: string temperature", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, temperature="1"),
     TypeError, "temperature must be a number"),
    ("sample: top_k 0", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, top_k=0), ValueError, "top_k must be >= 1"),
    ("sample: top_k -3", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, top_k=-3), ValueError, "top_k must be >= 1"),
    ("sample: top_k 2.5", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, top_k=2.5), TypeError, "top_k must be an integer"),
    ("sample: max_new_tokens 0", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=0), ValueError, "max_new_tokens must be >= 1"),
    ("sample: max_new_tokens 8.0", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=8.0), TypeError,
     "max_new_tokens must be an integer"),
    ("sample: group_size 0", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, group_size=0), ValueError,
     "group_size must be >= 1"),
    ("sample: generator is a seed", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, generator=0), TypeError,
     "generator must be a torch.Generator"),
    ("sample: prompt longer than the context", lambda: minirl.sample(model(), ["plan: " + "run " * 70], max_new_tokens=4),
     ValueError, "exceeds the context window"),
    ("sample_tokens: token id outside the vocabulary",
     lambda: sample_tokens(model(), [[1, 2, 9999]], max_new_tokens=2, eos_token_id=None), ValueError,
     "token ids must lie in \\[0, 506\\)"),
    ("sample_tokens: negative token id", lambda: sample_tokens(model(), [[-1]], max_new_tokens=2, eos_token_id=None),
     ValueError, "token ids must lie in"),
    ("sample: not a model", lambda: minirl.sample(None, ["plan:"], max_new_tokens=4), TypeError, "model must be a minirl GPT"),
    ("sample: tokenizer given by name", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4, tokenizer="minirl"),
     TypeError, "tokenizer must be a tiktoken.Encoding"),
    ("sample: a tokenizer of another vocabulary", lambda: minirl.sample(model(), ["plan:"], max_new_tokens=4,
                                                                         tokenizer=small_tokenizer()), ValueError,
     "the tokenizer has 258 tokens but the model's vocabulary has 506"),
    ("sample_tokens: a flat list of ids", lambda: sample_tokens(model(), [1, 2, 3], max_new_tokens=2, eos_token_id=None),
     TypeError, "list of token-id lists"),
    ("sample_tokens: EOS outside the vocabulary", lambda: sample_tokens(model(), [[1, 2]], max_new_tokens=2, eos_token_id=9999),
     ValueError, "eos_token_id and pad_token_id must lie in \\[0, 506\\).*from 0 to 9999"),
    ("GPT: one sequence without a batch dimension", lambda: model()(torch.tensor([1, 2, 3])), TypeError, "\\(B, T\\) integer tensor"),
    ("GPT: GPT-2 token ids", lambda: model()(torch.tensor([[50256]])), ValueError, "token ids must lie in \\[0, 506\\)"),
    ("GPT: key_mask of the wrong length", lambda: model()(torch.tensor([[1, 2, 3]]), key_mask=torch.ones(1, 5)), ValueError,
     "key_mask has shape \\(1, 5\\)"),
    ("sample: a model whose weights are NaN", lambda: minirl.sample(nan_model(), ["plan:"], max_new_tokens=4),
     FloatingPointError, "logits are not finite"),
    # ------------------------------------------------------------ Rollout
    ("Rollout.select: float indices", lambda: rollout().select(torch.tensor([0.0, 1.0])), TypeError, "integer indices or a boolean mask"),
    ("Rollout.select: a uint8 0/1 mask", lambda: rollout().select(torch.tensor([1, 0, 1, 0], dtype=torch.uint8)), TypeError,
     "for a 0/1 mask use .bool\\(\\)"),
    ("Rollout.select: index past the end", lambda: rollout().select([5]), IndexError, "row indices must lie in \\[-4, 4\\)"),
    ("Rollout.select: wrong-length boolean mask", lambda: rollout().select(torch.tensor([True, False])), ValueError,
     "boolean row mask needs shape \\(4,\\)"),
    # ------------------------------------------------------------ trainer configs
    ("PGConfig: zero steps", lambda: PGConfig(steps=0), ValueError, "steps must be >= 1"),
    ("PGConfig: zero prompts per step", lambda: PGConfig(prompts_per_step=0), ValueError, "prompts_per_step must be >= 1"),
    ("PGConfig: unknown estimator", lambda: PGConfig(estimator="vtrace"), ValueError, "unknown estimator 'vtrace'.*'gae'"),
    ("PGConfig: group_mean with a group of one", lambda: PGConfig(estimator="group_mean", group_size=1), ValueError,
     "group_mean.*group_size >= 2"),
    ("PGConfig: gamma 1.5", lambda: PGConfig(gamma=1.5), ValueError, "gamma must be a finite number in \\[0, 1\\]"),
    ("PGConfig: negative lr", lambda: PGConfig(lr=-1e-3), ValueError, "lr must be a finite number > 0, got -0.001"),
    ("PGConfig: negative beta", lambda: PGConfig(beta=-0.1), ValueError, "beta must be"),
    ("PPOConfig: zero minibatches", lambda: PPOConfig(minibatches=0), ValueError, "minibatches must be >= 1"),
    ("PPOConfig: more minibatches than completions", lambda: PPOConfig(prompts_per_step=2, group_size=2, minibatches=8),
     ValueError, "minibatches=8 is more than the 4 completions"),
    ("PPOConfig: zero epochs", lambda: PPOConfig(epochs=0), ValueError, "epochs must be >= 1"),
    ("PPOConfig: negative clip", lambda: PPOConfig(clip_eps=-0.2), ValueError, "clip_eps must be"),
    ("PPOConfig: negative value clip", lambda: PPOConfig(value_clip=-1.0), ValueError, "value_clip must be"),
    ("PPOConfig: lam NaN", lambda: PPOConfig(lam=math.nan), ValueError, "lam must be a finite number"),
    ("PPOConfig: zero max_grad_norm", lambda: PPOConfig(max_grad_norm=0.0), ValueError, "max_grad_norm must be"),
    ("PPOConfig: float steps", lambda: PPOConfig(steps=2.5), TypeError, "steps must be an integer"),
    ("GRPOConfig: group of one", lambda: GRPOConfig(group_size=1), ValueError, "group_size must be >= 2"),
    ("GRPOConfig: negative clip", lambda: GRPOConfig(clip_eps=-0.1), ValueError, "clip_eps must be"),
    ("GRPOConfig: unknown advantage", lambda: GRPOConfig(advantage="ppo"), ValueError, "unknown advantage 'ppo'"),
    ("GRPOConfig: unknown aggregation", lambda: GRPOConfig(aggregation="mean"), ValueError, "unknown aggregation 'mean'"),
    ("GRPOConfig: zero inner steps", lambda: GRPOConfig(inner_steps=0), ValueError, "inner_steps must be >= 1"),
    ("GRPOConfig: a fractional seed", lambda: GRPOConfig(seed=0.5), TypeError, "seed must be an integer"),
    ("GRPOConfig: TRL's name for the learning rate", lambda: GRPOConfig(learning_rate=1e-3), TypeError,
     "GRPOConfig has no option 'learning_rate'; did you mean 'lr'"),
    ("PPOConfig: a misspelt option", lambda: PPOConfig(minibatch=4), TypeError, "did you mean 'minibatches'"),
    ("trainer: task=None", lambda: minirl.train.grpo.train_grpo(model(), None, GRPOConfig()), TypeError,
     "task must be a minirl.world.tasks.Task"),
    ("trainer: another trainer's config", lambda: minirl.train.ppo.train_ppo(model(), tasks.arithmetic_task(), GRPOConfig()),
     TypeError, "config must be a PPOConfig, got GRPOConfig"),
    ("reviews_task: unknown prompt set", lambda: tasks.reviews_task("neutral"), ValueError,
     "unknown prompt set \\(start\\) 'neutral'.*'negative', 'positive'"),
    # ------------------------------------------------------------ reward functions
    ("reward_fn: too few scores", lambda: tasks.reward_scores(reward_fn_returning([1.0]), rollout()), ValueError,
     "constant_reward returned 1 scores for 4 completions"),
    ("reward_fn: a NaN score", lambda: tasks.reward_scores(reward_fn_returning(lambda n: [0.0] * (n - 1) + [math.nan]),
                                                              rollout()), ValueError,
     "constant_reward returned non-finite scores for 1 of 4 completions"),
    ("reward_fn: an inf score", lambda: tasks.reward_scores(reward_fn_returning(lambda n: [math.inf] * n), rollout()),
     ValueError, "non-finite scores for 4 of 4"),
    ("reward_fn: a single float", lambda: tasks.reward_scores(reward_fn_returning(1.0), rollout()), TypeError,
     "constant_reward returned a single score.*list of 4 floats"),
    ("reward_fn: a 0-d tensor", lambda: tasks.reward_scores(reward_fn_returning(torch.tensor(2.0)), rollout()),
     TypeError, "single score"),
    ("reward_fn: a (B, 1) tensor", lambda: tasks.reward_scores(reward_fn_returning(lambda n: torch.zeros(n, 1)),
                                                                  rollout()), ValueError, "shape \\(4, 1\\) for 4 completions"),
    ("reward_fn: None among the scores", lambda: tasks.reward_scores(reward_fn_returning(lambda n: [1.0] * (n - 1) + [None]),
                                                                        rollout()), TypeError, "other than numbers"),
    ("reward_fn: no **kwargs", lambda: tasks.reward_scores(lambda prompts, completions: [0.0] * 4, rollout()), TypeError,
     "must accept the keyword arguments minirl passes"),
    ("reward_fn: strings", lambda: tasks.reward_scores(reward_fn_returning(lambda n: ["good"] * n), rollout()),
     TypeError, "other than numbers"),
    ("trainer: reward_fn too short, in a run", lambda: train_one_step(minirl.train.grpo.train_grpo,
                                                                      GRPOConfig(steps=1, prompts_per_step=1, group_size=2),
                                                                      reward_fn=reward_fn_returning([1.0])),
     ValueError, "constant_reward returned 1 scores for 2"),
    ("task: NaN rewards", lambda: tasks.training_rewards(nan_task(), rollout(), minirl.load_tokenizer()), ValueError,
     "task 'arithmetic' gave non-finite rewards"),
    # ------------------------------------------------------------ advantages
    ("reward_to_go: integer rewards", lambda: advantages.reward_to_go(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3)),
     TypeError, "rewards must be a floating-point tensor, got torch.int64.*rewards.float\\(\\)"),
    ("gae: integer rewards", lambda: advantages.gae(torch.ones(2, 3, dtype=torch.int32), torch.zeros(2, 3), torch.ones(2, 3)),
     TypeError, "rewards must be a floating-point tensor"),
    ("gae: integer values", lambda: advantages.gae(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3)),
     TypeError, "values must be a floating-point tensor"),
    ("group_normalize: integer rewards", lambda: advantages.group_normalize(torch.tensor([1, 0, 1, 1]), 2), TypeError,
     "rewards must be a floating-point tensor"),
    ("leave_one_out: integer rewards", lambda: advantages.leave_one_out(torch.tensor([1, 0, 1, 1]), 2), TypeError,
     "floating-point"),
    ("reward_to_go: a list", lambda: advantages.reward_to_go([[1.0, 2.0]], torch.ones(1, 2)), TypeError, "must be a torch.Tensor"),
    ("reward_to_go: gamma 1.5", lambda: advantages.reward_to_go(*rt()[:2], gamma=1.5), ValueError, "gamma must be a finite number in \\[0, 1\\]"),
    ("reward_to_go: mask of 0/1/2", lambda: advantages.reward_to_go(torch.ones(1, 3), torch.tensor([[1.0, 2.0, 0.0]])),
     ValueError, "only 0 and 1"),
    ("reward_to_go: all-padding row", lambda: advantages.reward_to_go(torch.ones(2, 3), torch.tensor([[1.0, 1, 1], [0, 0, 0]])),
     ValueError, "all zeros"),
    ("reward_to_go: a mask with a hole", lambda: advantages.reward_to_go(torch.ones(1, 3), torch.tensor([[1.0, 0.0, 1.0]])),
     ValueError, "1s then 0s"),
    ("reward_to_go: gamma as a string", lambda: advantages.reward_to_go(*rt()[:2], gamma="0.9"), TypeError, "gamma must be a number"),
    ("gae: values None", lambda: advantages.gae(torch.ones(2, 3), None, torch.ones(2, 3)), TypeError, "values must be a torch.Tensor"),
    ("group_normalize: a NaN reward", lambda: advantages.group_normalize(torch.tensor([1.0, math.nan, 0.0, 1.0]), 2), ValueError,
     "NaN or inf"),
    ("group_normalize: eps 0", lambda: advantages.group_normalize(torch.ones(4), 2, eps=0.0), ValueError, "eps must be"),
    ("group_normalize: group_size 2.0", lambda: advantages.group_normalize(torch.ones(4), 2.0), TypeError,
     "group_size must be an integer"),
    ("prompt_mean_baseline: group of one", lambda: advantages.prompt_mean_baseline(torch.ones(4), 1), ValueError,
     "group_size must be >= 2"),
    ("reward_to_go: (B,) rewards", lambda: advantages.reward_to_go(torch.ones(3), torch.ones(3)), ValueError, "must be \\(B, T\\)"),
    ("gae: values shape", lambda: advantages.gae(torch.ones(2, 3), torch.ones(2, 2), torch.ones(2, 3)), ValueError, "values shape"),
    ("group_normalize: group of one", lambda: advantages.group_normalize(torch.ones(4), 1), ValueError, "at least 2"),
    ("group_normalize: group not dividing", lambda: advantages.group_normalize(torch.ones(5), 2), ValueError, "does not divide"),
    ("group_normalize: (B, T) rewards", lambda: advantages.group_normalize(torch.ones(4, 2), 2), ValueError, "must be \\(B,\\)"),
    # ------------------------------------------------------------ ops, kl, losses
    ("masked_mean: mask shape", lambda: ops.masked_mean(torch.ones(2, 3), torch.ones(2, 2)), ValueError, "mask shape"),
    ("masked_mean: mask holds 0.5", lambda: ops.masked_mean(torch.ones(2), torch.tensor([0.5, 1.0])), ValueError, "only 0 and 1"),
    ("masked_whiten: one entry", lambda: ops.masked_whiten(torch.ones(3), torch.tensor([1.0, 0, 0])), ValueError, "at least two"),
    ("token_logprobs: shapes", lambda: ops.token_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long)),
     ValueError, "need shape tokens.shape"),
    ("token_logprobs: id outside the vocabulary", lambda: ops.token_logprobs(torch.zeros(2, 5), torch.tensor([1, 5])),
     ValueError, "tokens must lie in \\[0, 5\\), the vocabulary; got ids from 1 to 5"),
    ("token_logprobs: float token ids", lambda: ops.token_logprobs(torch.zeros(2, 5), torch.tensor([1.0, 2.0])), TypeError,
     "tokens must be integer token ids, got torch.float32"),
    ("kl_k3: lists", lambda: kl.kl_k3([-1.0], [-2.0]), TypeError, "logp must be a torch.Tensor"),
    ("masked_mean: lists", lambda: ops.masked_mean([1.0, 2.0], [1, 0]), TypeError, "x and mask must be torch.Tensors"),
    ("token_logprobs: -100 on padding (Hugging Face's habit)",
     lambda: ops.token_logprobs(torch.zeros(2, 5), torch.tensor([1, -100])), ValueError, "not with -100"),
    ("aggregate: max_len shorter than the batch", lambda: losses.aggregate(torch.ones(2, 6), torch.ones(2, 6), "constant", 4),
     ValueError, "max_len=4 is shorter"),
    ("kl_k3: shapes", lambda: kl.kl_k3(torch.zeros(2, 3), torch.zeros(3, 2)), ValueError, "does not match"),
    ("policy_gradient_loss: advantages shape", lambda: losses.policy_gradient_loss(torch.zeros(3, 4), torch.zeros(3, 2),
                                                                                   torch.ones(3, 4)), ValueError,
     "advantages shape \\(3, 2\\) does not match logprobs"),
    ("policy_gradient_loss: integer log-probs", lambda: losses.policy_gradient_loss(torch.zeros(3, 4, dtype=torch.long),
                                                                                    torch.zeros(3), torch.ones(3, 4)),
     TypeError, "logprobs must be a floating-point tensor"),
    ("policy_gradient_loss: all-padding row", lambda: losses.policy_gradient_loss(torch.zeros(2, 2), torch.zeros(2),
                                                                                  torch.tensor([[1.0, 1], [0, 0]])),
     ValueError, "all zeros"),
    ("policy_gradient_loss: unknown aggregation", lambda: losses.policy_gradient_loss(*rt()[:2], rt()[1], aggregation="mean"),
     ValueError, "unknown aggregation 'mean'"),
    ("clipped_objective: log-ratios passed as ratios", ppo_loss_with_logratio_as_ratio, ValueError,
     "ratio must be positive.*log_ratio.exp\\(\\)"),
    ("clipped_objective: negative eps", lambda: losses.clipped_objective(torch.ones(2), torch.ones(2), -0.2), ValueError,
     "clip_eps must be a number >= 0, got -0.2"),
    ("ppo_clip_loss: old log-probs shape", lambda: losses.ppo_clip_loss(torch.zeros(3, 4), torch.zeros(3, 3), torch.zeros(3),
                                                                        torch.ones(3, 4)), ValueError, "old_logprobs shape"),
    ("grpo_loss: negative beta", lambda: losses.grpo_loss(*[torch.zeros(3, 4)] * 3, torch.zeros(3), torch.ones(3, 4), beta=-1.0),
     ValueError, "beta must be a finite number >= 0, got -1.0"),
    ("value_loss: clipping without old values", lambda: losses.value_loss(torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2),
                                                                          clip_range=0.2), ValueError, "old_values"),
    ("value_loss: negative clip range", lambda: losses.value_loss(*[torch.zeros(2, 2)] * 2, torch.ones(2, 2),
                                                                  old_values=torch.zeros(2, 2), clip_range=-0.2),
     ValueError, "clip_range must be a number >= 0, got -0.2"),
    # ------------------------------------------------------------ data
    ("datasets: unknown family", lambda: minirl.world.datasets.load_corpus("poems"), ValueError, "unknown family 'poems'"),
    ("datasets: family None", lambda: minirl.world.datasets.load_corpus(None), ValueError, "unknown family None"),
    ("datasets: split None", lambda: minirl.world.datasets.load_preferences(None), ValueError, "unknown split None"),
    ("datasets: unknown split", lambda: minirl.world.datasets.load_prompts("reviews", "validation"), ValueError, "unknown split"),
    ("checkpoint_card: unknown name", lambda: minirl.lm.model.checkpoint_card("dpo"), ValueError, "unknown model 'dpo'"),
    # ------------------------------------------------------------ rewards and the micro world
    ("reward function: strings, not lists", lambda: minirl.world.rewards.review_proxy_reward("review:", " great ."), TypeError,
     "prompts must be a list of strings"),
    ("reward function: one prompt for two completions", lambda: minirl.world.rewards.arithmetic_reward(["q: 1+1= a:"], [" 2", " 3"]),
     ValueError, "1 prompts for 2 completions"),
    ("plan_reward: an unknown activity", lambda: minirl.world.rewards.plan_reward(("read", "fly")), ValueError, "a plan is a tuple"),
    ("review_token_rewards: text instead of ids", lambda: minirl.world.rewards.review_token_rewards(minirl.load_tokenizer(), "great"),
     TypeError, "list of token ids"),
    ("MicroMDP: logits of the wrong shape", lambda: minirl.exact.mdp.MicroMDP().objective(torch.zeros(3, 4)), ValueError,
     "logits have shape \\(26, 4\\)"),
    ("MicroMDP: a completion as a string", lambda: minirl.exact.mdp.MicroMDP().discounted_return("x", "ab"), ValueError,
     "is not a completion of the micro world"),
    ("MicroMDP: EOS in the middle", lambda: minirl.exact.mdp.MicroMDP().log_prob(torch.zeros(26, 4), "x", ("a", "<eos>", "b")),
     ValueError, "ends with EOS \\(only there\\)"),
    ("MicroMDP: unknown prompt", lambda: minirl.exact.mdp.MicroMDP().discounted_return("z", ("a", "<eos>")), ValueError,
     "unknown prompt 'z'"),
    ("MicroMDP: beta 0", lambda: minirl.exact.mdp.MicroMDP().optimal_logits(torch.zeros(26, 4), 0.0), ValueError, "beta must be"),
    ("MicroMDP: a seed for the generator", lambda: minirl.exact.mdp.MicroMDP().sample(torch.zeros(26, 4), 3, 123), TypeError,
     "generator must be a torch.Generator"),
    ("bias_and_variance: probabilities summing to 2", lambda: minirl.exact.mdp.bias_and_variance(torch.ones(2, 3), torch.ones(2),
                                                                                           torch.ones(3)),
     ValueError, "sum to 2"),
    # ------------------------------------------------------------ memory, pass@k
    ("memory: negative size", lambda: memory.training_memory("ppo", -8e9), ValueError, "n_params must be a finite number >= 0"),
    ("memory: size as a string", lambda: memory.training_memory("ppo", "8e9"), TypeError, "n_params must be a number"),
    ("memory: a size key for the shape", lambda: memory.training_memory("ppo", 8e9, batch=8, seq_len=128, shape=8), TypeError,
     "shape must be a minirl.lm.memory.Shape"),
    ("memory: batch without seq_len", lambda: memory.training_memory("ppo", 8e9, batch=8, shape=memory.SHAPES[8]), ValueError,
     "give batch and seq_len together"),
    ("memory: unknown algorithm", lambda: memory.training_memory("a2c", 1e9), ValueError, "unknown algorithm 'a2c'.*'dpo'"),
    ("memory: unknown preset", lambda: memory.training_memory("ppo", 1e9, preset="fp8"), ValueError, "unknown preset 'fp8'"),
    ("memory: negative batch", lambda: memory.training_memory("ppo", 1e9, batch=-8, seq_len=128, shape=memory.SHAPES[8]),
     ValueError, "batch must be >= 0"),
    ("memory: batch without a shape", lambda: memory.training_memory("ppo", 1e9, batch=8, seq_len=128), ValueError, "shape"),
    ("memory: negative KV cache length", lambda: memory.kv_cache_bytes(memory.SHAPES[8], 4, -1), ValueError, "seq_len must be >= 0"),
    ("pass_at_k: c > n", lambda: evaluate.pass_at_k(4, 5, 1), ValueError, "0 <= c <= n"),
    ("pass_at_k: a fractional count", lambda: evaluate.pass_at_k(10, 2.5, 8), TypeError, "c must be an integer"),
    ("arithmetic_pass_at_k: no prompts", lambda: evaluate.arithmetic_pass_at_k(model(), minirl.load_tokenizer(), [], 4, (1,),
                                                                              None), ValueError, "no prompts given"),
    ("pass_at_k: k > n", lambda: evaluate.pass_at_k(4, 1, 8), ValueError, "1 <= k <= n"),
    # ------------------------------------------------------------ lessons 09-10: SFT, best-of-N, RAFT, over-optimization
    ("SFTConfig: zero steps", lambda: sft.SFTConfig(steps=0), ValueError, "steps must be"),
    ("SFTConfig: negative learning rate", lambda: sft.SFTConfig(lr=-1e-4), ValueError, "lr must be"),
    ("train_sft: no demonstrations", lambda: sft.train_sft(model(), []), ValueError, "non-empty list"),
    ("train_sft: a pair where a demonstration goes", lambda: sft.train_sft(model(), [{"prompt": "order:", "chosen": " x"}]),
     ValueError, "'prompt' and 'completion'"),
    ("train_sft: one record, not a list", lambda: sft.train_sft(model(), {"prompt": "order:", "completion": " x"}), ValueError,
     "non-empty list"),
    ("train_sft: a config of another trainer", lambda: sft.train_sft(model(), [{"prompt": "order:", "completion": " x"}],
                                                                     PPOConfig()), TypeError, "SFTConfig"),
    ("RAFTConfig: n = 0", lambda: RAFTConfig(n=0), ValueError, "n must be"),
    ("best_of_n: n = 0", lambda: best_of_n.kl_bound(0), ValueError, "n must be"),
    ("select_best: groups that do not divide", lambda: best_of_n.select_best(torch.zeros(7), 2), ValueError,
     "multiple of n=2"),
    ("exact_distribution: shapes differ", lambda: best_of_n.exact_distribution(torch.ones(3) / 3, torch.zeros(4), 2),
     ValueError, "one shape"),
    ("fit_gao: one point", lambda: overoptimization.fit_gao([1.0], [0.5], "rl"), ValueError, "at least two"),
    ("fit_gao: every point at one KL", lambda: overoptimization.fit_gao([1.0, 1.0], [0.5, 0.5], "bon"), ValueError,
     "two or more different KLs"),
    ("exact_distribution: probabilities summing to 2", lambda: best_of_n.exact_distribution(torch.ones(2), torch.zeros(2), 2),
     ValueError, "summing to 1"),
    ("fit_gao: negative KL", lambda: overoptimization.fit_gao([-1.0, 1.0], [0.0, 0.5], "rl"), ValueError, ">= 0"),
    ("fit_gao: unknown form", lambda: overoptimization.fit_gao([0.5, 1.0], [0.0, 0.5], "ppo"), ValueError,
     "unknown form 'ppo'"),
    ("support_curve: probabilities not summing to 1", lambda: overoptimization.support_curve(
        torch.ones(3), torch.zeros(3), torch.zeros(3), betas=[1.0]), ValueError, "sum to 1"),
    ("tilted: beta 0", lambda: overoptimization.tilted(torch.ones(2) / 2, torch.zeros(2), 0.0), ValueError, "beta must be"),
    ("win_rate: an empty side", lambda: rlhf.win_rate([], [1.0]), ValueError, "non-empty"),
    ("gold_pairs: nothing to compare", lambda: rlhf.gold_pairs([" one tea ."] * 3, 5, 0), ValueError, "two different"),
    ("train_ppo: a critic from a string", lambda: minirl.train.ppo.train_ppo(model(), tasks.orders_task(), PPOConfig(),
                                                                               critic_from="rm_all"), TypeError,
     "critic_from must be a minirl reward model"),
    # ------------------------------------------------------------ earlier waves' leftovers
    ("kl_k3: probabilities where log-probs go", lambda: kl.kl_k3(torch.tensor([0.2, 0.5]), torch.tensor([0.3, 0.4])),
     ValueError, r"logp holds values in \[0, 1\], as probabilities do.*pass logp.log\(\)"),
    ("kl_k1: reference probabilities", lambda: kl.kl_k1(torch.tensor([-1.0, -2.0]), torch.tensor([0.3, 0.4])),
     ValueError, r"ref_logp holds values in \[0, 1\]"),
    ("value_loss: one return per completion", lambda: losses.value_loss(torch.zeros(4, 5), torch.zeros(4), torch.ones(4, 5)),
     ValueError, r"returns must have the shape of values, \(4, 5\): one target per token.*got \(4,\)"),
    ("value_loss: old values per completion", lambda: losses.value_loss(torch.zeros(4, 5), torch.zeros(4, 5), torch.ones(4, 5),
                                                                         old_values=torch.zeros(4), clip_range=0.2),
     ValueError, r"old_values must have the shape of values"),
    ("sft_loss: logits one position longer", lambda: losses.sft_loss(torch.zeros(2, 4, 7), torch.zeros(2, 3, dtype=torch.long),
                                                                      torch.ones(2, 3)),
     ValueError, r"logits \(B, T, V\) predicting tokens \(B, T\).*\(2, 4, 7\) and tokens \(2, 3\): shift them"),
    ("sft_loss: logits without a vocabulary axis", lambda: losses.sft_loss(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long),
                                                                            torch.ones(2, 3)),
     ValueError, r"logits \(B, T, V\)"),
    ("gspo_loss: a NaN advantage", lambda: losses.gspo_loss(-torch.ones(2, 3), -torch.ones(2, 3), torch.tensor([1.0, math.nan]),
                                                            torch.ones(2, 3)), ValueError, "advantages must be finite"),
    ("activation_bytes: an int for a shape", lambda: memory.activation_bytes(8, 4, 128), TypeError,
     r"shape must be a minirl.lm.memory.Shape, e.g. memory.SHAPES\[8\]"),
    ("activation_bytes: half a byte per value", lambda: memory.activation_bytes(memory.SHAPES[1], 4, 128, bytes_per_value=0.5),
     TypeError, "bytes_per_value"),
    ("fit_bradley_terry: item names", lambda: minirl.core.preferences.fit_bradley_terry(["tea", "coffee"], ["coffee", "tea"], 2),
     TypeError, r"winners must be item ids.*number them first"),
    ("fit_bradley_terry: fractional ids", lambda: minirl.core.preferences.fit_bradley_terry(torch.tensor([0.0, 1.0]), [1, 0], 2),
     TypeError, r"winners must be item ids"),
    ("to_hf_gpt2: a reward model", lambda: minirl.lm.export.to_hf_gpt2(minirl.lm.reward_head.load_reward_model("rm_all")), TypeError,
     r"to_hf_gpt2 exports the course's GPT, got RewardModel \(a reward model exports with to_hf_reward_model\)"),
]


def small_tokenizer():
    from minirl.lm.tokenizer import build_encoding
    return build_encoding({bytes([i]): i for i in range(256)})


def nan_model():
    m = minirl.load_model("base")
    with torch.no_grad():
        m.h[0].mlp.c_fc.weight.fill_(math.nan)
    return m


def nan_task():
    task = tasks.arithmetic_task()
    task.token_rewards = lambda rollout, enc: torch.full_like(rollout.logprobs, math.nan)
    return task


@pytest.mark.parametrize("label, call, error, match", CASES, ids=[getattr(c, "values", c)[0] for c in CASES])
def test_bad_input_gets_a_clear_error(label, call, error, match):
    assert_refused_by_minirl(call, error, match)


# ---------------------------------------------------------------- data files
@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A private copy of data/ (checkpoints included) that MINIRL_DATA points at."""
    import shutil

    copy = tmp_path / "data"
    shutil.copytree(paths.data_dir(), copy)
    monkeypatch.setenv("MINIRL_DATA", str(copy))
    monkeypatch.setattr(paths, "_verified", {})
    return copy


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"tokenizer.json": 7}'])
def test_a_corrupt_manifest_names_itself_and_its_rebuild(data_copy, content):
    (data_copy / paths.MANIFEST).write_text(content)
    with pytest.raises(paths.DataError, match="MANIFEST.json is corrupted.*python -m minirl.world"):
        minirl.load_tokenizer()


def test_a_tokenizer_checkpoint_vocabulary_mismatch_is_caught_at_load(data_copy):
    tok = json.loads((data_copy / "tokenizer.json").read_text())
    tok["ranks"] = tok["ranks"][:-10]  # as if the world were rebuilt with another corpus
    (data_copy / "tokenizer.json").write_text(json.dumps(tok))
    paths.write_manifest(data_copy)
    with pytest.raises(paths.DataError, match="vocabulary of 506 tokens but data/tokenizer.json has 496.*minirl.train.pretrain"):
        minirl.load_model("base")


def test_the_tokenizer_cache_follows_the_data_folder(data_copy, monkeypatch):
    tok = json.loads((data_copy / "tokenizer.json").read_text())
    tok["ranks"] = tok["ranks"][:300]
    (data_copy / "tokenizer.json").write_text(json.dumps(tok))
    paths.write_manifest(data_copy)
    assert minirl.load_tokenizer().n_vocab == 302  # the copy's: 300 ranks and the two special tokens
    monkeypatch.delenv("MINIRL_DATA")
    assert minirl.load_tokenizer().n_vocab == 506  # the course's again


def test_world_writes_where_minirl_data_points(tmp_path, monkeypatch):
    from minirl.world import generate

    out = tmp_path / "fresh"
    monkeypatch.setenv("MINIRL_DATA", str(out))
    monkeypatch.setattr(paths, "_verified", {})
    generate.main()
    committed = paths.read_manifest(PACKAGE.parent / "data")
    written = paths.read_manifest(out)
    assert {k: v for k, v in committed.items() if not k.startswith("checkpoints/")} == written
    assert minirl.world.datasets.load_corpus("plans")[0].startswith("plan:")  # read back through MINIRL_DATA


# ---------------------------------------------------------------- legal degenerate input keeps working
def test_legal_degenerate_input_keeps_working():
    assert advantages.group_normalize(torch.full((4,), 3.0), 4).eq(0).all()  # equal rewards: zero, not NaN
    assert advantages.leave_one_out(torch.full((4,), 3.0), 4).eq(0).all()
    r, m, v = rt()
    assert torch.isfinite(advantages.reward_to_go(r, m)).all() and advantages.reward_to_go(r, m)[2, 1:].eq(0).all()
    assert torch.isfinite(losses.policy_gradient_loss(r, v, m))  # an all-padding tail on rows 1 and 2
    greedy = minirl.sample(model(), ["q: 1+2= a:"], max_new_tokens=6, temperature=0)
    assert greedy.logprobs.eq(0).all() and greedy.texts == minirl.sample(model(), ["q: 1+2= a:"], max_new_tokens=6,
                                                                         temperature=0).texts
    assert math.isnan(ops.masked_mean(torch.ones(3), torch.zeros(3)))  # an empty mean is NaN, as documented
    assert rollout().select(torch.zeros(4, dtype=torch.bool)).texts == []  # selecting no rows
    assert minirl.exact.mdp.MicroMDP().sample(torch.zeros(26, 4), 0) == []  # no episodes
    assert losses.policy_gradient_loss(r, torch.tensor([1, -1, 0]), m) == losses.policy_gradient_loss(r, torch.tensor(
        [1.0, -1.0, 0.0]), m)  # integer advantages: exact, nothing to truncate
    logits = torch.tensor([[0.5, -math.inf, 1.0, -math.inf]], requires_grad=True)  # top-k masked logits
    ops.entropy_from_logits(logits).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 1] == 0
    junk = torch.randn(2, 3, 5).index_put_((torch.tensor([1]), torch.tensor([2])), torch.tensor(math.nan))
    junk.requires_grad_(True)
    losses.sft_loss(junk, torch.zeros(2, 3, dtype=torch.long), torch.tensor([[1.0, 1, 1], [1, 1, 0]])).backward()
    assert torch.isfinite(junk.grad).all()  # NaN logits on a padding position reach no gradient


def test_a_boolean_row_mask_keeps_texts_and_tensors_aligned():
    r = rollout()
    keep = torch.tensor([False, True, False, True])
    sub = r.select(keep)
    assert sub.texts == [r.texts[1], r.texts[3]] and sub.prompts == [r.prompts[1], r.prompts[3]]
    assert torch.equal(sub.tokens, r.tokens[keep]) and torch.equal(sub.logprobs, r.logprobs[keep])
    assert r.select([3, 0]).texts == [r.texts[3], r.texts[0]]  # a plain list of indices too


def test_checkers_give_the_student_function_copies(capsys):
    def zeroes_its_input(rewards, mask, gamma):  # returns zeros and zeroes the rewards: passed before
        rewards.zero_()
        return rewards

    check.reward_to_go(zeroes_its_input)
    assert capsys.readouterr().out.startswith("FAIL reward_to_go")

    own_reward_to_go = types.FunctionType(advantages.reward_to_go.__code__,  # minirl's code, as if the student's
                                          {**advantages.reward_to_go.__globals__, "__name__": "__main__"})

    def right_but_in_place(rewards, mask, gamma):  # correct values, computed by overwriting its input
        return rewards.copy_(own_reward_to_go(rewards, mask, gamma))

    check.reward_to_go(right_but_in_place)
    assert capsys.readouterr().out.startswith("PASS reward_to_go: 4 cases")
