"""Bad input to imitation, IRL, GAIL, best-of-N, RAFT and the over-optimization curves: each gets an
error from minirl itself, of a stated type, whose message names what was wrong. And legal degenerate
input (best-of-1, ties everywhere, a single demonstration) keeps working.

Each case is (id, call, exception type, a regex the message must match), as in tests/test_bad_input.py.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

from bad_input import assert_refused_by_minirl

import minirl
from minirl.exact import imitation as im, irl, micro_gail
from minirl.exact.mdp import MicroMDP
from minirl.train import best_of_n, gail, overoptimization
from minirl.train.grpo import GRPOConfig
from minirl.train.ppo import PPOConfig
from minirl.train.raft import RAFTConfig, train_raft
from minirl.world import datasets, generate, tasks


@functools.cache
def model():
    return minirl.load_model("base")


@functools.cache
def world():
    """(mdp, phi (26, 4, 10), expert (80,), theta (10,) zeros)."""
    mdp = MicroMDP()
    phi = irl.micro_features(mdp)
    return mdp, phi, irl.expert_distribution(mdp), torch.zeros(phi.size(-1), dtype=torch.float64)


@functools.cache
def plans():
    return generate.expert_plan_distribution()


def with_entry(x: torch.Tensor, i: int, value: float) -> torch.Tensor:
    x = x.clone()
    x[i] = value
    return x


def negative_within_a_prompt(p: torch.Tensor) -> torch.Tensor:
    """p with its first entry made -0.1 and its second raised to keep each prompt's sum at 1."""
    q = p.clone()
    moved = q[0] + 0.1
    q[0] -= moved
    q[1] += moved
    return q


def iwg(expert_counts=None, sample_counts=None, logq=None, theta=None):
    mdp, phi, expert, theta0 = world()
    counts = irl.episode_features(mdp, phi)
    e = irl.per_prompt_mean(mdp, expert, counts)[None] if expert_counts is None else expert_counts
    s = counts[:5] if sample_counts is None else sample_counts
    q = torch.full((5,), math.log(0.1), dtype=torch.float64) if logq is None else logq
    return irl.importance_weighted_gradient(e, s, q, theta0 if theta is None else theta)


def reward_fn_returning(value):
    def constant_reward(prompts, completions, **kwargs):
        return value(len(completions)) if callable(value) else value
    return constant_reward


def disc(demos, config=None, **kwargs):
    return gail.Discriminator(demos, config or gail.GAILConfig(discriminator="gail"), base=model(), **kwargs)


def demos(k=8):
    return datasets.load_demos()[:k]


N, F = 80, 10  # the micro world's episodes and features
P = torch.ones(3, dtype=torch.float64) / 3  # a distribution over three outputs

CASES = [
    # ------------------------------------------------------------ MaxEnt IRL on the micro world
    ("micro_features: a horizon for the mdp", lambda: irl.micro_features(3), TypeError, "mdp must be a MicroMDP"),
    ("episode_features: phi 2-D", lambda: irl.episode_features(world()[0], world()[1][..., 0]), ValueError,
     r"phi must have shape \(26, 4, F\)"),
    ("episode_features: phi of a longer horizon", lambda: irl.episode_features(world()[0], irl.micro_features(MicroMDP(
        horizon=4))), ValueError, r"phi must have shape \(26, 4, F\).*got \(80, 4, 10\)"),
    ("episode_features: phi with inf", lambda: irl.episode_features(world()[0], world()[1].clone().fill_(math.inf)),
     ValueError, "phi.*finite"),
    ("episode_features: integer phi", lambda: irl.episode_features(world()[0], world()[1].long()), TypeError,
     "phi must be a floating-point"),
    ("model_distribution: theta too long", lambda: irl.model_distribution(*world()[:2], torch.zeros(F + 1, dtype=torch.float64)),
     ValueError, r"theta must have shape \(10,\).*\(11,\)"),
    ("model_distribution: theta (F, 1)", lambda: irl.model_distribution(*world()[:2], torch.zeros(F, 1, dtype=torch.float64)),
     ValueError, r"theta must have shape \(10,\)"),
    ("maxent_gradient: theta with NaN", lambda: irl.maxent_gradient(*world()[:2], with_entry(world()[3], 0, math.nan),
                                                                    world()[2]), ValueError, "theta.*finite"),
    ("log_likelihood: expert of 79 episodes", lambda: irl.log_likelihood(*world()[:2], world()[3], world()[2][:79]),
     ValueError, r"expert must have shape \(80,\)"),
    ("log_likelihood: counts for the expert", lambda: irl.log_likelihood(*world()[:2], world()[3], world()[2] * 10),
     ValueError, "expert.*sum to 1 over each prompt"),
    ("maxent_gradient: NaN in the expert", lambda: irl.maxent_gradient(*world()[:2], world()[3], with_entry(world()[2], 3, math.nan)),
     ValueError, "expert.*finite"),
    ("maxent_gradient: a negative expert probability", lambda: irl.maxent_gradient(
        *world()[:2], world()[3], negative_within_a_prompt(world()[2])), ValueError, "expert.*negative"),
    ("maxent_gradient: expert 2-D", lambda: irl.maxent_gradient(*world()[:2], world()[3], world()[2][:, None]), ValueError,
     r"expert must have shape \(80,\)"),
    ("per_prompt_mean: weights too short", lambda: irl.per_prompt_mean(world()[0], world()[2][:40], torch.ones(N, 2)),
     ValueError, r"weights must have shape \(80,\)"),
    ("per_prompt_mean: values 1-D", lambda: irl.per_prompt_mean(world()[0], world()[2], torch.ones(N)), ValueError,
     r"values must have shape \(80, F\)"),
    ("importance_weighted_gradient: expert counts 1-D", lambda: iwg(expert_counts=torch.ones(F, dtype=torch.float64)),
     ValueError, r"expert_counts must have shape \(n, F\)"),
    ("importance_weighted_gradient: sample counts of 9 features", lambda: iwg(sample_counts=torch.ones(5, 9, dtype=torch.float64)),
     ValueError, r"sample_counts must have shape \(m, 10\)"),
    ("importance_weighted_gradient: log q too short", lambda: iwg(logq=torch.zeros(4, dtype=torch.float64)), ValueError,
     r"sample_logq must have shape \(5,\)"),
    ("importance_weighted_gradient: log q = -inf", lambda: iwg(logq=torch.full((5,), -math.inf, dtype=torch.float64)),
     ValueError, "sample_logq.*finite"),
    ("importance_weighted_gradient: no samples", lambda: iwg(sample_counts=torch.ones(0, F, dtype=torch.float64),
                                                             logq=torch.zeros(0, dtype=torch.float64)),
     ValueError, "at least one sample"),
    ("importance_weighted_gradient: no demonstrations", lambda: iwg(expert_counts=torch.ones(0, F, dtype=torch.float64)),
     ValueError, "at least one demonstration"),
    ("importance_weighted_gradient: theta too short", lambda: iwg(theta=torch.zeros(F - 1, dtype=torch.float64)),
     ValueError, r"theta must have shape \(10,\)"),
    # ------------------------------------------------------------ MaxEnt IRL over the plans
    ("plan_features: a plan as a string", lambda: irl.plan_features(["run nap cook read"]), ValueError,
     "plans\\[0\\].*tuple of activities"),
    ("plan_features: an unknown activity", lambda: irl.plan_features([("run", "fly", "nap", "cook")]), ValueError,
     "plans\\[0\\].*'fly'"),
    ("empirical_distribution: no demonstrations", lambda: irl.empirical_distribution(plans()[0], []), ValueError,
     "demos.*at least one"),
    ("empirical_distribution: a demonstration not among the plans", lambda: irl.empirical_distribution(
        plans()[0][:10], [plans()[0][20]]), ValueError, "demos\\[0\\].*not one of plans"),
    ("empirical_distribution: records for plans", lambda: irl.empirical_distribution(plans()[0], demos(2)), ValueError,
     "demos\\[0\\].*tuple"),
    ("fit_maxent: features 1-D", lambda: irl.fit_maxent(torch.ones(3, dtype=torch.float64), P), ValueError,
     r"features must have shape \(n, F\)"),
    ("fit_maxent: counts for the expert", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), torch.tensor(
        [2.0, 1.0, 0.0], dtype=torch.float64)), ValueError, "expert.*sum to 1.*3"),
    ("fit_maxent: expert of the wrong length", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), torch.ones(
        4, dtype=torch.float64) / 4), ValueError, r"expert must have shape \(3,\)"),
    ("fit_maxent: NaN in the expert", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), with_entry(P, 0, math.nan)),
     ValueError, "expert.*finite"),
    ("fit_maxent: a negative expert probability", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), torch.tensor(
        [1.5, -0.5, 0.0], dtype=torch.float64)), ValueError, "expert.*negative"),
    ("fit_maxent: NaN in the features", lambda: irl.fit_maxent(with_entry(torch.eye(3, dtype=torch.float64), 0, math.nan), P),
     ValueError, "features.*finite"),
    ("fit_maxent: float32 expert on float64 features", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), P.float()),
     TypeError, "expert is torch.float32 but features torch.float64"),
    ("fit_maxent: lr 0", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), P, lr=0.0), ValueError, "lr must be"),
    ("fit_maxent: negative l2", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), P, l2=-1e-3), ValueError,
     "l2 must be"),
    ("fit_maxent: fractional steps", lambda: irl.fit_maxent(torch.eye(3, dtype=torch.float64), P, steps=2.5), TypeError,
     "steps must be an integer"),
    # ------------------------------------------------------------ GAIL on the micro world
    ("discriminator_loss: psi too short", lambda: micro_gail.discriminator_loss(world()[0], torch.zeros(79, dtype=torch.float64),
                                                                                world()[2], world()[2]), ValueError,
     r"psi must have shape \(80,\)"),
    ("discriminator_loss: counts for the policy", lambda: micro_gail.discriminator_loss(
        world()[0], torch.zeros(N, dtype=torch.float64), world()[2], world()[2] * 3), ValueError,
     "policy.*sum to 1 over each prompt"),
    ("discriminator_loss: NaN in the expert", lambda: micro_gail.discriminator_loss(
        world()[0], torch.zeros(N, dtype=torch.float64), with_entry(world()[2], 0, math.nan), world()[2]), ValueError,
     "expert.*finite"),
    ("optimal_logits: shapes differ", lambda: micro_gail.optimal_logits(world()[2], world()[2][:40]), ValueError,
     "expert and policy.*one shape"),
    ("optimal_logits: a negative probability", lambda: micro_gail.optimal_logits(negative_within_a_prompt(world()[2]),
                                                                                 world()[2]), ValueError,
     "expert.*negative"),
    ("kl: shapes differ", lambda: micro_gail.kl(world()[2], world()[2][:40], world()[0]), ValueError,
     r"q must have shape \(80,\)"),
    ("kl: counts for p", lambda: micro_gail.kl(world()[2] * 2, world()[2], world()[0]), ValueError, "p.*sum to 1"),
    ("kl: the mdp first", lambda: micro_gail.kl(world()[0], world()[2], world()[2]), TypeError, "mdp must be a MicroMDP"),
    ("train: expert of 40 episodes", lambda: micro_gail.train(world()[0], world()[2][:40], torch.zeros(26, 4), 1),
     ValueError, r"expert must have shape \(80,\)"),
    ("train: logits of the wrong shape", lambda: micro_gail.train(world()[0], world()[2], torch.zeros(4, 26), 1),
     ValueError, "a tabular policy's logits"),
    ("train: policy_lr 0", lambda: micro_gail.train(world()[0], world()[2], torch.zeros(26, 4), 1, policy_lr=0.0),
     ValueError, "policy_lr must be"),
    ("train: NaN disc_lr", lambda: micro_gail.train(world()[0], world()[2], torch.zeros(26, 4), 1, disc_lr=math.nan),
     ValueError, "disc_lr must be"),
    ("generator_step: logits 1-D", lambda: micro_gail.generator_step(world()[0], torch.zeros(4, dtype=torch.float64),
                                                                     torch.zeros(26, 4, dtype=torch.float64)),
     ValueError, "a tabular policy's logits"),
    ("generator_step: rewards of the wrong shape", lambda: micro_gail.generator_step(
        world()[0], torch.zeros(26, 4), torch.zeros(26, dtype=torch.float64)), ValueError, "reward table"),
    ("prefix_logits: expert logits of the wrong shape", lambda: micro_gail.prefix_logits(world()[0], torch.zeros(4),
                                                                                         torch.zeros(26, 4)),
     ValueError, "a tabular policy's logits"),
    # ------------------------------------------------------------ behaviour cloning and DAgger
    ("reward_table: no mdp", lambda: im.reward_table(None), TypeError, "mdp must be a MicroMDP"),
    ("behaviour_cloning: negative counts", lambda: im.behaviour_cloning(-torch.ones(26, 4, dtype=torch.float64)),
     ValueError, "counts.*negative"),
    ("behaviour_cloning: NaN counts", lambda: im.behaviour_cloning(torch.full((26, 4), math.nan, dtype=torch.float64)),
     ValueError, "counts.*finite"),
    ("behaviour_cloning: counts 1-D", lambda: im.behaviour_cloning(torch.ones(4, dtype=torch.float64)), ValueError,
     r"counts must have shape \(n_states, n_actions\)"),
    ("action_counts: one episode, not a list", lambda: im.action_counts(world()[0], ("x", ("a", "<eos>"))), ValueError,
     "episodes must be a list of \\(prompt, completion\\)"),
    ("action_counts: records for episodes", lambda: im.action_counts(world()[0], [{"prompt": "x", "completion": ("a",)}]),
     ValueError, "episodes\\[0\\].*\\(prompt, completion\\)"),
    ("state_visitation: NaN logits", lambda: im.state_visitation(world()[0], torch.full((26, 4), math.nan)), ValueError,
     "logits.*NaN"),
    ("state_visitation: a state with every action at -inf", lambda: im.state_visitation(
        world()[0], with_entry(torch.zeros(26, 4), 3, -math.inf)), ValueError, "logits.*-inf.*state 3"),
    ("total_variation: shapes differ", lambda: im.total_variation(torch.zeros(26, 4), torch.zeros(4)), ValueError,
     "logits and other.*one shape"),
    ("per_step_error: states_of of the wrong shape", lambda: im.per_step_error(world()[0], torch.zeros(26, 4), torch.zeros(26, 4),
                                                                               torch.zeros(4)), ValueError,
     "a tabular policy's logits"),
    ("dagger: expert of the wrong shape", lambda: im.dagger(world()[0], torch.zeros(4), [], 1, 2, torch.Generator()),
     ValueError, "a tabular policy's logits"),
    ("dagger: one episode, not a list", lambda: im.dagger(world()[0], torch.zeros(26, 4), ("x", ("a", "<eos>")), 1, 2,
                                                          torch.Generator()), ValueError, "episodes must be a list"),
    ("dagger: negative episodes", lambda: im.dagger(world()[0], torch.zeros(26, 4), [], 1, -2, torch.Generator()),
     ValueError, "episodes must be >= 0"),
    # ------------------------------------------------------------ GAIL on the plans
    ("train_gail: no demonstrations", lambda: gail.train_gail(model(), []), ValueError, "demos must be a non-empty list"),
    ("Discriminator: one record, not a list", lambda: disc(demos(1)[0]), ValueError, "demos must be a non-empty list"),
    ("Discriminator: pairs for demonstrations", lambda: disc([{"prompt": "plan:", "chosen": " run .", "rejected": " nap ."}]),
     ValueError, "demos\\[0\\] has no 'completion'"),
    ("Discriminator: bare completions", lambda: disc([" run nap cook read ."]), TypeError,
     "demos\\[0\\] must be a dict, got str.*'prompt'.*'completion'"),
    ("Discriminator: demonstrations of another prompt", lambda: disc(demos(2) + [{"prompt": "order:", "completion": " tea ."}]),
     ValueError, "demos\\[2\\] has prompt 'order:'.*'plan:'"),
    ("GAILConfig: disc_steps -1", lambda: gail.GAILConfig(disc_steps=-1), ValueError, "disc_steps must be >= 0"),
    ("GAILConfig: expert_batch 0", lambda: gail.GAILConfig(expert_batch=0), ValueError, "expert_batch must be >= 1"),
    ("GAILConfig: unknown reward form", lambda: gail.GAILConfig(reward_form="prob"), ValueError, "unknown reward_form 'prob'"),
    ("GAILConfig: disc_lr 0", lambda: gail.GAILConfig(disc_lr=0.0), ValueError, "disc_lr must be"),
    ("GAILConfig: TRL's learning_rate", lambda: gail.GAILConfig(learning_rate=1e-3), TypeError, "GAILConfig has no option"),
    ("GAILConfig: disc_layers 2.0", lambda: gail.GAILConfig(disc_layers=2.0), TypeError, "disc_layers must be an integer"),
    ("train_gail: no policy", lambda: gail.train_gail(None, demos()), TypeError, "policy must be a minirl GPT"),
    ("train_gail: a GRPOConfig for config", lambda: gail.train_gail(model(), demos(), GRPOConfig()), TypeError,
     "config must be a GAILConfig"),
    ("train_gail: a PPOConfig for grpo", lambda: gail.train_gail(model(), demos(), gail.GAILConfig(), PPOConfig()), TypeError,
     "grpo must be a GRPOConfig"),
    ("train_gail: pretrain_steps -1", lambda: gail.train_gail(model(), demos(), pretrain_steps=-1), ValueError,
     "pretrain_steps must be >= 0"),
    ("train_gail: callback not a function", lambda: gail.train_gail(
        minirl.load_model("base"), demos(), grpo=GRPOConfig(steps=1, prompts_per_step=1, group_size=2),
        callback="print"), TypeError, "callback must be a function"),
    ("pretrain: batch 0", lambda: gail.pretrain(disc(demos()), model(), 1, 0, torch.Generator()), ValueError,
     "batch must be >= 1"),
    ("expected_true_reward: plan_distribution's pair", lambda: gail.expected_true_reward(plans()), TypeError,
     "probs must be a torch.Tensor"),
    ("expected_true_reward: probabilities of 10 plans", lambda: gail.expected_true_reward(torch.ones(10, dtype=torch.float64) / 10),
     ValueError, r"probs must have shape \(1296,\)"),
    # ------------------------------------------------------------ best-of-N
    ("kl_bound: n 2.0", lambda: best_of_n.kl_bound(2.0), TypeError, "n must be an integer"),
    ("select_best: n 0", lambda: best_of_n.select_best(torch.zeros(4), 0), ValueError, "n must be >= 1"),
    ("select_best: NaN scores", lambda: best_of_n.select_best(with_entry(torch.zeros(4), 1, math.nan), 2), ValueError,
     "scores.*finite.*1"),
    ("select_best: a list of scores", lambda: best_of_n.select_best([0.1, 0.2], 2), TypeError,
     "scores must be a torch.Tensor"),
    ("exact_distribution: counts for probs", lambda: best_of_n.exact_distribution(torch.tensor([3.0, 1.0]), torch.zeros(2), 2),
     ValueError, "summing to 1"),
    ("exact_distribution: NaN in probs", lambda: best_of_n.exact_distribution(with_entry(P, 0, math.nan), torch.arange(3.0), 2),
     ValueError, "probs.*finite"),
    ("exact_distribution: NaN scores", lambda: best_of_n.exact_distribution(P, with_entry(torch.arange(3.0), 2, math.nan), 2),
     ValueError, "scores.*finite"),
    ("exact_distribution: a negative probability", lambda: best_of_n.exact_distribution(
        torch.tensor([1.5, -0.5]), torch.zeros(2), 2), ValueError, ">= 0"),
    ("exact_distribution: n 0", lambda: best_of_n.exact_distribution(P, torch.arange(3.0), 0), ValueError, "n must be >= 1"),
    ("exact_distribution: n 1.5", lambda: best_of_n.exact_distribution(P, torch.arange(3.0), 1.5), TypeError,
     "n must be an integer"),
    ("exact_distribution: lists", lambda: best_of_n.exact_distribution([0.5, 0.5], [0.0, 1.0], 2), TypeError,
     "probs must be a torch.Tensor"),
    ("kl_divergence: shapes differ", lambda: best_of_n.kl_divergence(P, torch.ones(4) / 4), ValueError, "p and q.*one shape"),
    ("kl_divergence: NaN in p", lambda: best_of_n.kl_divergence(with_entry(P, 1, math.nan), P), ValueError, "p must be finite"),
    ("kl_divergence: a negative q", lambda: best_of_n.kl_divergence(P, torch.tensor([1.5, -0.25, -0.25])), ValueError,
     "q.*negative"),
    ("kl_plugin_estimate: no reference draws", lambda: best_of_n.kl_plugin_estimate(torch.ones(4), torch.ones(0), 4),
     ValueError, "reference_scores.*at least one"),
    ("kl_plugin_estimate: no picks", lambda: best_of_n.kl_plugin_estimate(torch.ones(0), torch.ones(4), 4), ValueError,
     "best_scores.*at least one"),
    ("kl_plugin_estimate: NaN in a score", lambda: best_of_n.kl_plugin_estimate(torch.ones(4), with_entry(torch.ones(4), 0, math.nan),
                                                                               4), ValueError, "reference_scores.*finite"),
    ("kl_plugin_estimate: n 0", lambda: best_of_n.kl_plugin_estimate(torch.ones(4), torch.ones(4), 0), ValueError, "n must be"),
    ("best_of_n: n 0", lambda: best_of_n.best_of_n(model(), ["plan:"], 0, reward_fn_returning(lambda k: [0.0] * k), 4),
     ValueError, "n must be >= 1"),
    ("best_of_n: n 2.0", lambda: best_of_n.best_of_n(model(), ["plan:"], 2.0, reward_fn_returning(lambda k: [0.0] * k), 4),
     TypeError, "n must be an integer"),
    ("best_of_n: reward_fn gives one score too few", lambda: best_of_n.best_of_n(
        model(), ["plan:"], 3, reward_fn_returning(lambda k: [0.0] * (k - 1)), 4, torch.Generator().manual_seed(0)),
     ValueError, "returned 2 scores for 3 completions"),
    ("best_of_n: reward_fn gives NaN", lambda: best_of_n.best_of_n(
        model(), ["plan:"], 3, reward_fn_returning(lambda k: [math.nan] * k), 4, torch.Generator().manual_seed(0)),
     ValueError, "non-finite scores"),
    ("best_of_n: reward_fn a string", lambda: best_of_n.best_of_n(model(), ["plan:"], 2, "rm_all", 4), TypeError,
     "reward_fn must be a function"),
    ("best_of_n: no prompts", lambda: best_of_n.best_of_n(model(), [], 3, reward_fn_returning(lambda k: [0.0] * k), 4),
     ValueError, "no prompts given"),
    # ------------------------------------------------------------ RAFT
    ("RAFTConfig: n 0", lambda: RAFTConfig(n=0), ValueError, "n must be >= 1"),
    ("RAFTConfig: NaN lr", lambda: RAFTConfig(lr=math.nan), ValueError, "lr must be"),
    ("RAFTConfig: batch_size 2.5", lambda: RAFTConfig(batch_size=2.5), TypeError, "batch_size must be an integer"),
    ("RAFTConfig: rounds 0", lambda: RAFTConfig(rounds=0), ValueError, "rounds must be >= 1"),
    ("RAFTConfig: n True", lambda: RAFTConfig(n=True), TypeError, "n must be an integer"),
    ("RAFTConfig: TRL's learning_rate", lambda: RAFTConfig(learning_rate=1e-4), TypeError, "did you mean 'lr'"),
    ("train_raft: a GRPOConfig", lambda: train_raft(model(), tasks.orders_task(), GRPOConfig()), TypeError,
     "config must be a RAFTConfig"),
    ("train_raft: no task", lambda: train_raft(model(), None, RAFTConfig()), TypeError, "task must be"),
    ("train_raft: reward_fn gives one score too few", lambda: train_raft(
        model(), tasks.orders_task(), RAFTConfig(rounds=1, prompts_per_round=1, n=2, sft_steps=1, batch_size=1),
        reward_fn=reward_fn_returning(lambda k: [0.0] * (k - 1))), ValueError, "returned 1 scores for 2 completions"),
    ("train_raft: reward_fn a string", lambda: train_raft(
        model(), tasks.orders_task(), RAFTConfig(rounds=1, prompts_per_round=1, n=2, sft_steps=1, batch_size=1),
        reward_fn="rm_all"), TypeError, "reward_fn must be a function"),
    ("train_raft: callback not a function", lambda: train_raft(
        minirl.load_model("base"), tasks.orders_task(), RAFTConfig(rounds=1, prompts_per_round=1, n=2, sft_steps=1,
                                                                   batch_size=1), callback="print"),
     TypeError, "callback must be a function"),
    # ------------------------------------------------------------ over-optimization
    ("fit_gao: lengths differ", lambda: overoptimization.fit_gao([0.5, 1.0, 2.0], [0.1, 0.2], "rl"), ValueError,
     "one shape"),
    ("fit_gao: NaN gain", lambda: overoptimization.fit_gao([0.5, 1.0], [0.1, math.nan], "rl"), ValueError, "finite"),
    ("fit_gao: strings", lambda: overoptimization.fit_gao(["0.5", "1.0"], [0.1, 0.2], "rl"), TypeError,
     "kl and gain must be numbers"),
    ("support_curve: lengths differ", lambda: overoptimization.support_curve(P, torch.zeros(4), torch.zeros(3), ns=[2]),
     ValueError, "same outputs"),
    ("support_curve: NaN in ref_probs", lambda: overoptimization.support_curve(with_entry(P, 0, math.nan), torch.arange(3.0),
                                                                              torch.zeros(3), betas=[1.0]),
     ValueError, "ref_probs.*finite"),
    ("support_curve: a negative ref_prob", lambda: overoptimization.support_curve(torch.tensor([1.5, -0.25, -0.25]),
                                                                                torch.arange(3.0), torch.zeros(3),
                                                                                betas=[1.0]),
     ValueError, "ref_probs.*negative"),
    ("support_curve: NaN proxy", lambda: overoptimization.support_curve(P, with_entry(torch.arange(3.0), 0, math.nan),
                                                                       torch.zeros(3), betas=[1.0]),
     ValueError, "proxy.*finite"),
    ("support_curve: NaN gold", lambda: overoptimization.support_curve(P, torch.arange(3.0), with_entry(torch.zeros(3), 0, math.nan),
                                                                      betas=[1.0]), ValueError, "gold.*finite"),
    ("support_curve: lists", lambda: overoptimization.support_curve([0.5, 0.5], [0.0, 1.0], [0.0, 1.0], ns=[2]), TypeError,
     "ref_probs must be a torch.Tensor"),
    ("support_curve: n 0", lambda: overoptimization.support_curve(P, torch.arange(3.0), torch.zeros(3), ns=[0]), ValueError,
     "n must be >= 1"),
    ("tilted: shapes differ", lambda: overoptimization.tilted(P, torch.zeros(3, 1), 1.0), ValueError,
     "ref_probs and reward.*one shape"),
    ("tilted: a negative ref_prob", lambda: overoptimization.tilted(torch.tensor([1.5, -0.5]), torch.zeros(2), 1.0),
     ValueError, "ref_probs.*negative"),
    ("tilted: NaN reward", lambda: overoptimization.tilted(P, with_entry(torch.zeros(3), 0, math.nan), 1.0), ValueError,
     "reward.*finite"),
]


@pytest.mark.parametrize("label, call, error, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(label, call, error, match):
    assert_refused_by_minirl(call, error, match)


# ---------------------------------------------------------------- legal degenerate input keeps working
def test_best_of_one_is_the_reference():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    scores = torch.tensor([0.3, -1.0, 2.0, 0.3])
    assert torch.allclose(best_of_n.exact_distribution(probs, scores, 1), probs, atol=1e-15, rtol=0)
    assert best_of_n.kl_bound(1) == 0.0
    assert torch.equal(best_of_n.select_best(scores, 1), torch.arange(4))
    assert best_of_n.kl_plugin_estimate(scores, scores, 1) == 0.0
    row = overoptimization.support_curve(probs, scores.double(), scores.double(), ns=[1])[0]
    assert row["kl"] == 0.0 and row["proxy"] == pytest.approx((probs * scores.double()).sum().item(), abs=1e-15)


def test_ties_everywhere():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    for n in (1, 2, 16):
        assert torch.allclose(best_of_n.exact_distribution(probs, torch.zeros(4), n), probs, atol=1e-15, rtol=0)
    assert best_of_n.select_best(torch.zeros(6), 3).tolist() == [0, 3]  # the first of the tied draws
    assert best_of_n.kl_plugin_estimate(torch.zeros(5), torch.zeros(7), 4) == 0.0
    assert overoptimization.tilted(probs, torch.zeros(4), 0.1).allclose(probs, atol=1e-15)


def test_best_of_n_builds_its_tensors_where_its_input_lives():
    """exact_distribution makes its new tensors on probs' device (a CUDA input stays on the GPU, no
    GPU here); on the CPU the numbers are as they were, whatever the inputs' dtypes."""
    probs = torch.tensor([0.5, 0.25, 0.25])
    want = torch.tensor([0.75 ** 2 * 2 / 3, 0.75 ** 2 / 3, 1 - 0.75 ** 2], dtype=torch.float64)  # levels {0, 1}: F^2 - F-^2
    outs = [best_of_n.exact_distribution(p, scores, 2) for p in (probs, probs.double())
            for scores in (torch.tensor([0, 0, 1]), torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, 1.0]).double())]
    assert all(out.dtype == torch.float64 and out.device == probs.device for out in outs)
    assert all(torch.allclose(out, want, atol=1e-15, rtol=0) for out in outs)
    assert best_of_n.select_best(torch.tensor([1, 3, 3, 0]), 2).tolist() == [1, 2]  # integer scores, ties to the first


def test_kl_divergence_takes_what_is_not_a_distribution():
    """Lesson 09 measures the 'KL' of a buggy best-of-n whose probabilities do not sum to 1: kl_divergence
    refuses NaN and negative entries only."""
    assert best_of_n.kl_divergence(3 * P, P) == pytest.approx(3 * math.log(3))


def test_one_sample_one_demonstration():
    mdp, phi, expert, theta = world()
    counts = irl.episode_features(mdp, phi)
    g = irl.importance_weighted_gradient(counts[:1], counts[3:4], torch.zeros(1, dtype=torch.float64), theta)
    assert torch.equal(g, counts[0] - counts[3])  # one sample gets all the weight
    plan_list = plans()[0]
    single = irl.empirical_distribution(plan_list, [plan_list[5]])
    assert single.sum() == 1 and single[5] == 1
    theta_plans = irl.fit_maxent(irl.plan_features(plan_list), single, steps=5, lr=0.5, l2=1e-3)
    assert torch.isfinite(theta_plans).all()
    assert torch.equal(irl.fit_maxent(irl.plan_features(plan_list), single, steps=0), torch.zeros(42, dtype=torch.float64))
    episode = mdp.sample(im.greedy_expert(mdp), 1, torch.Generator().manual_seed(0))
    assert im.action_counts(mdp, episode).sum() == len(episode[0][1])
    assert im.action_counts(mdp, []).sum() == 0
    learners = im.dagger(mdp, im.greedy_expert(mdp), episode, rounds=1, episodes=1, generator=torch.Generator().manual_seed(0))
    assert len(learners) == 2 and all(torch.isfinite(x).all() for x in learners)
    assert micro_gail.kl(expert, expert, mdp) == 0.0 and micro_gail.optimal_logits(expert, expert).eq(0).all()
    assert micro_gail.train(mdp, expert, torch.zeros(mdp.shape, dtype=torch.float64), steps=0) == []
    assert im.state_visitation(mdp, im.greedy_expert(mdp)).sum() > 0  # -inf logits off the greedy action are fine


def test_a_single_demonstration_trains_the_discriminator():
    d = disc(demos(1), gail.GAILConfig(discriminator="gail", expert_batch=256))
    stats = d.update([minirl.load_tokenizer().encode("plan: run run run run .")])
    assert math.isfinite(stats["disc_loss"])


def test_the_discriminator_follows_the_policy_device():
    """Built without a base model it loads the shipped base on the policy's device (the CPU here:
    what it builds there is the same as before)."""
    policy = model()
    d = gail.Discriminator(demos(4), gail.GAILConfig(), policy=policy)
    device = next(policy.parameters()).device
    assert next(d.reference.parameters()).device == device and d.model.score.weight.device == device
    assert all(torch.equal(p, q) for p, q in zip(d.reference.parameters(), minirl.load_model("base").parameters()))
    plain = gail.Discriminator(demos(4), gail.GAILConfig(discriminator="gail"))  # no policy: the CPU, as before
    assert next(plain.reference.parameters()).device.type == "cpu"


def test_raft_best_of_one_runs():
    """Best-of-1 is legal: every draw is a winner (SFT on the policy's own samples)."""
    history = train_raft(minirl.load_model("base"), tasks.orders_task(),
                         RAFTConfig(rounds=1, prompts_per_round=2, n=1, sft_steps=1, batch_size=2))
    assert len(history) == 1 and history[0]["reward"] == history[0]["best_reward"]
