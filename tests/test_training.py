"""What the three trainers share: a TRL-style reward function plugs into each (and sees what a
learned reward model needs), bad rewards and diverging runs stop with a clear message, and PPO's
minibatch shuffle leaves the sampling alone."""
import dataclasses
import math

import pytest
import torch

import minirl
from minirl.train.grpo import GRPOConfig, grpo_update, train_grpo
from minirl.train.pg import PGConfig, train_policy_gradient
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.world import rewards, tasks

TRAINERS = [
    (train_policy_gradient, PGConfig(steps=2, prompts_per_step=2, group_size=2)),
    (train_ppo, PPOConfig(steps=2, prompts_per_step=2, group_size=2, minibatches=2)),
    (train_grpo, GRPOConfig(steps=2, prompts_per_step=2, group_size=2)),
]


class Recorder:
    """A reward function with TRL's signature that keeps every call's arguments."""

    def __init__(self, score):
        self.score, self.calls = score, []
        self.__name__ = "recorder"

    def __call__(self, prompts, completions, **kwargs):
        self.calls.append({"prompts": prompts, "completions": completions, **kwargs})
        return self.score(prompts, completions)


@pytest.mark.parametrize("train, config", TRAINERS, ids=["pg", "ppo", "grpo"])
def test_a_reward_function_plugs_into_every_trainer(train, config):
    """The trainer calls reward_fn(prompts, completions, completion_ids=..., truncated=...) once
    per step, and what it returns is the reward the learner sees (here: 1 per character)."""
    enc = minirl.load_tokenizer()
    fn = Recorder(lambda prompts, completions: [float(len(c)) for c in completions])
    history = train(minirl.load_model("base"), tasks.arithmetic_task(), config, enc, reward_fn=fn)
    assert len(fn.calls) == config.steps
    for call, h in zip(fn.calls, history):
        B = config.prompts_per_step * config.group_size
        assert len(call["prompts"]) == len(call["completions"]) == len(call["completion_ids"]) == len(call["truncated"]) == B
        for text, ids, truncated in zip(call["completions"], call["completion_ids"], call["truncated"]):
            ended = ids[-1] == enc.eot_token
            assert ended != truncated  # a completion ends with EOS exactly when it was not cut at the limit
            assert enc.decode(ids[:-1] if ended else ids) == text
            assert enc.eot_token not in ids[:-1]  # ids stop at EOS: no padding
        assert h["reward"] == pytest.approx(sum(len(c) for c in call["completions"]) / B)  # the learner's reward
        assert "correct" in h  # the task still supplies the gold metric


def test_the_course_reward_functions_plug_in_unchanged():
    """arithmetic_reward trains GRPO exactly as the arithmetic task does: same rewards, same run."""
    config = GRPOConfig(steps=2, prompts_per_step=2, group_size=2)
    via_task = train_grpo(minirl.load_model("base"), tasks.arithmetic_task(), config)
    via_fn = train_grpo(minirl.load_model("base"), tasks.arithmetic_task(), config, reward_fn=rewards.arithmetic_reward)
    for a, b in zip(via_task, via_fn):
        assert a["reward"] == b["reward"] and a["loss_first"] == pytest.approx(b["loss_first"], abs=1e-7)


@pytest.mark.parametrize("train, config", TRAINERS, ids=["pg", "ppo", "grpo"])
def test_nan_rewards_from_a_task_stop_training_with_a_clear_message(train, config):
    task = dataclasses.replace(tasks.arithmetic_task(),
                               token_rewards=lambda rollout, enc: torch.full_like(rollout.logprobs, math.nan))
    with pytest.raises(ValueError, match="task 'arithmetic' gave non-finite rewards"):
        train(minirl.load_model("base"), task, config)


@pytest.mark.parametrize("train, config", TRAINERS, ids=["pg", "ppo", "grpo"])
def test_a_wrong_reward_function_is_named(train, config):
    def too_few(prompts, completions, **kwargs):
        return [0.0] * (len(completions) - 1)
    with pytest.raises(ValueError, match="reward function too_few returned 3 scores for 4 completions"):
        train(minirl.load_model("base"), tasks.arithmetic_task(), config, reward_fn=too_few)


@pytest.mark.parametrize("train, config, match", [
    (train_policy_gradient, PGConfig(steps=3, prompts_per_step=2, group_size=2, lr=1e6), "logits are not finite"),
    (train_ppo, PPOConfig(steps=2, prompts_per_step=2, group_size=2, minibatches=2, epochs=1, lr=1e6),
     "policy loss is nan at step 0: training diverged"),
    (train_grpo, GRPOConfig(steps=3, prompts_per_step=2, group_size=2, inner_steps=2, lr=1e6), "loss is nan at step"),
], ids=["pg", "ppo", "grpo"])
def test_a_diverging_run_stops_with_a_clear_message(train, config, match):
    """A huge learning rate turns the weights to NaN: the next loss, or the next sampling step, says so."""
    with pytest.raises(FloatingPointError, match=match):
        train(minirl.load_model("base"), tasks.arithmetic_task(), config)


def test_ppo_minibatch_shuffling_does_not_move_the_sampling():
    """With a learning rate too small to change the policy, PPO with 4 epochs of 4 minibatches and
    with 1 epoch of 1 sample exactly the same completions at every step: the shuffle has its own
    generator. (When it shared the sampler's, the second step's completions differed.)"""
    seen = {}
    for epochs, minibatches in ((4, 4), (1, 1)):
        fn = Recorder(rewards.arithmetic_reward)
        config = PPOConfig(steps=3, prompts_per_step=4, group_size=2, epochs=epochs, minibatches=minibatches, lr=1e-12,
                           critic_lr=1e-12)
        train_ppo(minirl.load_model("base"), tasks.arithmetic_task(), config, reward_fn=fn)
        seen[epochs] = [c["completions"] for c in fn.calls]
    assert seen[4] == seen[1]


def test_the_grpo_update_uses_old_log_probs_for_the_ratio_and_reference_ones_for_the_kl():
    """One inner step on a batch the policy itself sampled: the ratio is 1, so the loss is
    mean(-A) + beta * mean k3(pi_theta, pi_ref), and clipping never binds. Swapping the old and
    reference log-probs gives a ratio pi_theta / pi_ref != 1 and a KL of 0 instead."""
    policy = minirl.load_model("base").train()
    rollout = minirl.sample(policy, ["q: 12+30= a:", "q: 7+8= a:"], max_new_tokens=6, group_size=4,
                            generator=torch.Generator().manual_seed(0))
    ref_logprobs = (rollout.logprobs - 0.3 * torch.rand(rollout.logprobs.shape, generator=torch.Generator().manual_seed(1))
                    ) * rollout.mask
    rewards_ = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    config = GRPOConfig(group_size=4, beta=0.5, aggregation="token_mean", lr=1e-9)
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)
    got = grpo_update(policy, opt, rollout, rewards_, ref_logprobs, config, max_len=6)
    # expected, written plainly from the definitions
    adv = minirl.advantages.group_normalize(rewards_, 4)
    m = rollout.mask.bool()
    log_q_over_p = (ref_logprobs - rollout.logprobs)[m].double()  # pi_theta = the sampler's policy
    k3 = (log_q_over_p.exp() - 1 - log_q_over_p).mean().item()
    want = -adv[:, None].expand_as(rollout.mask)[m].mean().item() + 0.5 * k3
    assert got["loss_first"] == pytest.approx(want, abs=1e-5)
    assert got["kl"] == pytest.approx(k3, abs=1e-5) and got["clip_fraction"] == 0.0
