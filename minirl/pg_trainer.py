"""Thin policy-gradient trainers on the tiny GPT: REINFORCE and actor-critic.

One loop, on-policy, one gradient step per batch:

    1. sample `group_size` completions for each of `prompts_per_step` prompts (temperature 1)
    2. per-token rewards from the task; optionally r_t - kl_coef * KL_t, with KL_t = log pi(a_t|s_t)
       - log pi_ref(a_t|s_t) to the frozen starting model (the k1 estimate, on the sampled token)
    3. advantages by one of ESTIMATORS
    4. one step on the surrogate -(1/B) sum_i sum_t A_it log pi(a_it|s_it); with a critic, one step
       on its value loss

    total_return   A_t = R(tau) on every token                       (REINFORCE as first derived)
    reward_to_go   A_t = G_t = sum_{t'>=t} gamma^(t'-t) r_t'          (credit assignment)
    group_mean     A_t = R(tau) - mean R over the prompt's group     (a per-prompt baseline)
    gae            A_t = GAE(gamma, lam) with a learned critic         (actor-critic)

The critic is a separate copy of the starting model with a value head (lesson 04 discusses a
head on the policy's own trunk instead). Fixed steps, seeded, a progress bar in Jupyter; returns
the metrics of every step.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from . import advantages as adv
from .critic import ValueHead, completion_values
from .losses import policy_gradient_loss, value_loss
from .model import GPT
from .ops import entropy_from_logits, masked_mean, token_logprobs
from .sampling import completion_logits, completion_logprobs
from .tasks import Task, training_batches
from .tokenizer import load_tokenizer

ESTIMATORS = ("total_return", "reward_to_go", "group_mean", "gae")


@dataclass
class PGConfig:
    steps: int = 40
    prompts_per_step: int = 16
    group_size: int = 4
    lr: float = 3e-4
    estimator: str = "reward_to_go"
    gamma: float = 1.0
    lam: float = 0.95
    kl_coef: float = 0.0
    critic_lr: float = 1e-3
    max_grad_norm: float = 1.0
    seed: int = 0


def make_critic(model: GPT) -> tuple[GPT, ValueHead]:
    """A separate trunk (a copy of `model`) with a fresh value head."""
    return copy.deepcopy(model).train(), ValueHead(model.config.n_embd).to(next(model.parameters()).device)


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


def train_policy_gradient(policy: GPT, task: Task, config: PGConfig, tokenizer=None) -> list[dict]:
    """Train `policy` in place on `task`; returns one dict of metrics per step."""
    enc = tokenizer or load_tokenizer()
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    critic = make_critic(policy) if config.estimator == "gae" else None
    if critic is not None:
        critic_opt = torch.optim.AdamW([*critic[0].parameters(), *critic[1].parameters()], lr=config.critic_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    for step, rollout in training_batches(policy, task, config, generator, enc, desc=config.estimator):
        mask = rollout.mask
        task_rewards = task.token_rewards(rollout, enc)  # (B, T)
        logits = completion_logits(policy, rollout)  # (B, T, V), with gradient
        logprobs = token_logprobs(logits, rollout.tokens) * mask
        with torch.no_grad():
            kl = (logprobs.detach() - completion_logprobs(reference, rollout)) * mask  # k1 per token
        rewards = task_rewards - config.kl_coef * kl
        metrics = {"step": step, "reward": task_rewards.sum(1).mean().item(), "kl": kl.sum(1).mean().item(),
                   "entropy": masked_mean(entropy_from_logits(logits.detach()), mask).item(),
                   "length": mask.sum(1).mean().item(), "truncated": rollout.truncated.float().mean().item(),
                   **task.gold(rollout)}
        values = None
        if critic is not None:
            values = completion_values(*critic, rollout)  # (B, T), with gradient for the critic
            returns = adv.reward_to_go(rewards, mask, config.gamma)
            v_loss = value_loss(values, returns, mask)
            critic_opt.zero_grad(set_to_none=True)
            v_loss.backward()
            critic_opt.step()
            metrics["value_loss"] = v_loss.item()
            values = values.detach()
        advantages = estimate_advantages(rewards, mask, config, values)
        loss = policy_gradient_loss(logprobs, advantages, mask)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss is {loss.item()} at step {step}: lower lr or check the rewards")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        opt.step()
        a = advantages[mask.bool()]
        metrics.update(adv_mean=a.mean().item(), adv_std=a.std().item())
        history.append(metrics)
    policy.eval()
    return history
