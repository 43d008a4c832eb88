"""Thin policy-gradient trainers on the tiny GPT: REINFORCE and actor-critic.

One loop, on-policy, one gradient step per batch:

    1. sample `group_size` completions for each of `prompts_per_step` prompts (temperature 1)
    2. per-token rewards from the task (or a reward function's score at the last token); optionally
       r_t - beta * KL_t, with KL_t = log pi(a_t|s_t) - log pi_ref(a_t|s_t) to the frozen starting
       model (k1, `minirl.kl.kl_k1`, on the sampled token)
    3. advantages by one of ESTIMATORS
    4. one step on the surrogate -(1/B) sum_i sum_t A_it log pi(a_it|s_it); with a critic, one step
       on its value loss

    total_return   A_t = R(tau) on every token                       (REINFORCE as first derived)
    reward_to_go   A_t = G_t = sum_{t'>=t} gamma^(t'-t) r_t'          (credit assignment)
    group_mean     A_t = R(tau) - mean R over the prompt's group     (a per-prompt baseline)
    gae            A_t = GAE(gamma, lam) with a learned critic         (actor-critic)

The critic is a separate copy of the starting model with a value head (lesson 04 discusses a
head on the policy's own trunk instead); only the policy's gradients are clipped.

On multi-turn episodes (a task with an environment) the tokens the environment wrote are
transitions, not actions: returns and the critic run over every token, while the surrogate, the
KL and the entropy count the policy's tokens only (`Rollout.policy_mask`). Fixed steps,
seeded, a progress bar in Jupyter; returns the metrics of every step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..core import advantages as adv
from ..core import validate
from ..core.kl import kl_k1
from ..core.losses import policy_gradient_loss, value_loss
from ..core.ops import entropy_from_logits, masked_mean, token_logprobs
from ..lm.critic import completion_values, make_critic
from ..lm.model import GPT
from ..lm.sampling import completion_logits, completion_logprobs
from ..lm.tokenizer import load_tokenizer
from ..world.tasks import RewardFn, Task, training_rewards
from .training import check_config, check_finite, check_inputs, frozen_reference, optimizer_step, training_batches

__all__ = ["ESTIMATORS", "PGConfig", "estimate_advantages", "train_policy_gradient"]

ESTIMATORS = ("total_return", "reward_to_go", "group_mean", "gae")


@validate.known_options(elsewhere=validate.TASK_SETTINGS)
@dataclass
class PGConfig:
    """Settings of `train_policy_gradient`. Each step samples prompts_per_step x group_size
    completions and takes one gradient step on them.

    steps             training steps, each on a freshly sampled batch
    prompts_per_step  training prompts drawn per step (at random, with replacement)
    group_size        completions per prompt (at least 2 for estimator 'group_mean')
    lr                the policy's AdamW learning rate (no weight decay)
    estimator         the advantage, one of `ESTIMATORS`: 'total_return', 'reward_to_go',
                      'group_mean' or 'gae' (an actor-critic; the module docstring has each formula)
    gamma             discount per token (1: none; every episode ends within the length limit)
    lam               GAE's lambda, for 'gae' only: 0 is the one-step TD error, 1 the return minus V
    beta              KL coefficient: each token's reward becomes r_t - beta * (log pi - log pi_ref),
                      pi_ref the frozen starting model (0: no penalty)
    critic_lr         the critic's AdamW learning rate, for 'gae' only
    max_grad_norm     the policy's gradients are clipped to this global norm (inf: no clipping);
                      the critic's are not clipped
    seed              seeds the prompt draws and the sampler's generator
    """
    steps: int = 40
    prompts_per_step: int = 16
    group_size: int = 4
    lr: float = 3e-4
    estimator: str = "reward_to_go"
    gamma: float = 1.0
    lam: float = 0.95
    beta: float = 0.0
    critic_lr: float = 1e-3
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self):
        check_config(self)
        validate.choice("estimator", self.estimator, ESTIMATORS)
        validate.number("gamma", self.gamma, 0.0, 1.0)
        validate.number("lam", self.lam, 0.0, 1.0)
        validate.number("critic_lr", self.critic_lr, 0.0, open_low=True)
        if self.estimator == "group_mean" and self.group_size < 2:
            raise ValueError("estimator 'group_mean' compares completions of a prompt: it needs group_size >= 2 "
                             f"(got {self.group_size}; with one completion every advantage would be 0)")


def estimate_advantages(rewards, mask, config: PGConfig, values=None) -> torch.Tensor:
    """(B, T) advantages by `config.estimator` (see the module docstring)."""
    if config.estimator == "total_return":
        ret = adv.reward_to_go(rewards, mask, config.gamma)[:, :1]  # (B, 1) the return from the start
        return ret * mask
    if config.estimator == "reward_to_go":
        return adv.reward_to_go(rewards, mask, config.gamma)
    if config.estimator == "group_mean":
        ret = adv.reward_to_go(rewards, mask, config.gamma)[:, 0]  # (B,)
        return (ret - adv.prompt_mean_baseline(ret, config.group_size))[:, None] * mask
    if config.estimator == "gae":
        return adv.gae(rewards, values, mask, config.gamma, config.lam)[0]
    raise ValueError(f"unknown estimator {config.estimator!r}; choose one of {ESTIMATORS}")


def train_policy_gradient(policy: GPT, task: Task, config: PGConfig, tokenizer=None,
                          reward_fn: RewardFn | None = None,
                          callback: Callable[[dict, GPT], None] | None = None) -> list[dict]:
    """Train `policy` in place on `task` (its prompts and gold metrics); returns one dict of metrics
    per step. reward_fn: a TRL-style reward function to train on instead of the task's rewards.
    callback(metrics, policy): called after every step's update, as in `train_grpo`; what it adds to
    `metrics` lands in the history."""
    check_inputs(policy, task, config, PGConfig, multi_turn=True)
    enc = tokenizer or load_tokenizer()
    reference = frozen_reference(policy)
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    critic = make_critic(policy) if config.estimator == "gae" else None
    if critic is not None:
        critic_params = [*critic[0].parameters(), *critic[1].parameters()]
        critic_opt = torch.optim.AdamW(critic_params, lr=config.critic_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    for step, rollout in training_batches(policy, task, config, generator, enc, desc=config.estimator):
        mask, own = rollout.mask, rollout.policy_mask  # (B, T) every token; the policy's (not an environment's)
        task_rewards = training_rewards(task, rollout, enc, reward_fn)  # (B, T)
        logits = completion_logits(policy, rollout)  # (B, T, V), with gradient
        logprobs = token_logprobs(logits, rollout.tokens) * own
        with torch.no_grad():
            kl = kl_k1(logprobs.detach(), completion_logprobs(reference, rollout)) * own
        rewards = task_rewards - config.beta * kl
        metrics = {"step": step, "reward": task_rewards.sum(1).mean().item(), "kl": kl.sum(1).mean().item(),
                   "kl_std": kl.sum(1).std().item(),  # spread of the per-completion estimates behind "kl"
                   "entropy": masked_mean(entropy_from_logits(logits.detach()), own).item(),
                   "length": mask.sum(1).mean().item(), "truncated": rollout.truncated.float().mean().item(),
                   **task.gold(rollout)}
        values = None
        if critic is not None:
            values = completion_values(*critic, rollout)  # (B, T), with gradient for the critic
            v_loss = value_loss(values, adv.reward_to_go(rewards, mask, config.gamma), mask)
            check_finite(v_loss, step, "value loss")
            optimizer_step(critic_opt, critic_params, v_loss, max_grad_norm=None)  # the critic's step is not clipped
            metrics["value_loss"] = v_loss.item()
            values = values.detach()
        advantages = estimate_advantages(rewards, mask, config, values)
        loss = policy_gradient_loss(logprobs, advantages, own)
        check_finite(loss, step)
        optimizer_step(opt, list(policy.parameters()), loss, config.max_grad_norm)
        a = advantages[own.bool()]
        metrics.update(adv_mean=a.mean().item(), adv_std=a.std().item())
        if callback is not None:
            callback(metrics, policy)
        history.append(metrics)
    policy.eval()
    return history
