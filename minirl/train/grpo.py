"""GRPO (Shao et al., 2024): policy optimization without a critic, the baseline being the group.

One loop, fixed steps:

    1. pick `prompts_per_step` prompts; sample `group_size` completions of each from one prefill
       per prompt (minirl.sample copies the prompt's KV cache to its G rows: GRPO branches only at
       the prompt)
    2. one reward per completion (the task's per-token rewards summed: for arithmetic, 1 if right)
    3. advantages within each group: (r - mean) / (std + eps) ('group'), r - mean ('group_mean',
       Dr. GRPO), or r - mean of the others ('leave_one_out', RLOO); every token of a completion
       gets its completion's advantage. With 'process', each step's reward is normalized over the
       group's steps instead, and a token's advantage sums those of its step and the later ones
    4. `inner_steps` gradient steps on the same batch with minirl.losses.grpo_loss: the clipped
       ratio (against the policy that sampled the batch, by default), plus beta * k3 KL to the
       frozen reference

With a task that has an environment (`tasks.tool_task`), each completion is an episode in which
the environment answers the policy's calls (`minirl.lm.multiturn`); the loss and the KL count the
policy's tokens only, and each call's reward joins the completion's.

With `stale_steps` = k, batch j is sampled by the policy of update max(0, j - k) and trained on at
update j, as in an asynchronous pipeline whose sampler runs ahead of the learner; `correction`
says what the loss does about it (`CORRECTIONS`).

The log-probs returned by the sampler are the old policy's (temperature 1), so no extra forward
pass is needed for pi_old; the reference costs one forward pass without gradients per step. Both
forward passes run each prompt once for its group (`sampling.completion_hidden`).
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ..core import advantages as adv
from ..core import corrections, validate
from ..core.kl import kl_k3
from ..core.losses import AGGREGATIONS, grpo_loss
from ..core.ops import entropy_from_logits, masked_mean, token_logprobs
from ..lm.model import GPT
from ..lm.sampling import Rollout, completion_logits, completion_logprobs
from ..lm.tokenizer import load_tokenizer
from ..world.tasks import RewardFn, Task, training_rewards
from .training import check_config, check_finite, check_inputs, frozen_reference, optimizer_step, training_batches

__all__ = ["ADVANTAGES", "LR_SCHEDULES", "CORRECTIONS", "GRPOConfig", "group_advantages", "zero_advantage_fraction",
           "old_logprobs_and_weights", "grpo_update", "lr_factor", "stale_batches", "train_grpo"]

ADVANTAGES = ("group", "group_mean", "leave_one_out", "process")
LR_SCHEDULES = ("constant", "linear")
CORRECTIONS = ("ppo_clip", "none") + corrections.CORRECTIONS


@validate.known_options(elsewhere=validate.TASK_SETTINGS)
@dataclass
class GRPOConfig:
    """Settings of `train_grpo`. Each step samples prompts_per_step x group_size completions.

    steps             training steps, each on a freshly sampled batch
    prompts_per_step  training prompts drawn per step (at random, with replacement)
    group_size        completions per prompt, G: the group whose rewards are each other's baseline
                      (at least 2)
    lr                AdamW's learning rate (no weight decay)
    beta              weight of the per-token k3 KL to the frozen starting model (0.04: the GRPO
                      paper's; 0 turns the penalty off)
    clip_eps          the ratio's clip range [1 - clip_eps, 1 + clip_eps] (PPO's 0.2); on fresh
                      rollouts it binds only when inner_steps > 1
    clip_eps_high     the upper end 1 + clip_eps_high instead (DAPO's clip-higher, 0.28 there);
                      None: clip_eps
    inner_steps       gradient steps on each sampled batch, the paper's mu; 1 (its and TRL's default)
                      leaves the ratio at 1, so the clip never binds
    advantage         'group' (r - mean) / (std + eps), 'group_mean' r - mean (Dr. GRPO),
                      'leave_one_out' r - the mean of the others (RLOO), or 'process' (GRPO with
                      process supervision: each nonzero token reward is a step's reward, normalized
                      over the group's steps, a token's advantage the sum from its step on,
                      `minirl.core.advantages.process_advantages`; for a task whose step rewards are
                      never 0, such as a process reward model's probabilities); see `ADVANTAGES`
    aggregation       how per-token losses become one number, one of `minirl.losses.AGGREGATIONS`;
                      'sequence_mean' (per-completion token mean, then the mean) is the paper's
    max_grad_norm     gradients are clipped to this global norm (inf: no clipping)
    lr_schedule       'constant', or 'linear': from lr down to 0 at the last step (Hugging Face
                      Trainer's default)
    warmup_steps      the rate first rises linearly to lr over this many steps (`lr_factor`);
                      fewer than steps
    stale_steps       k: batch j is sampled by the policy of update max(0, j - k) and trained on at
                      update j (`stale_batches`; the first k + 1 batches by the starting policy);
                      0 is on-policy
    correction        what the loss does about tokens the current policy did not sample:
                      'ppo_clip' (the paper's): the ratio against the sampler's log-probs, clipped;
                      'none': the ratio against the current policy (staleness ignored); or one of
                      `minirl.core.corrections.CORRECTIONS`: the ratio against the current policy, each
                      token's policy term weighted by the bounded pi/mu (`old_logprobs_and_weights`)
    correction_cap    C of those weights, at least 1 (TRL's vllm_importance_sampling_clip_max: 3)
    seed              seeds the prompt draws and the sampler's generator
    """
    steps: int = 120
    prompts_per_step: int = 16
    group_size: int = 8
    lr: float = 5e-4
    beta: float = 0.04
    clip_eps: float = 0.2
    inner_steps: int = 1
    advantage: str = "group"
    aggregation: str = "sequence_mean"
    max_grad_norm: float = 1.0
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    clip_eps_high: float | None = None
    stale_steps: int = 0
    correction: str = "ppo_clip"
    correction_cap: float = 2.0
    seed: int = 0

    def __post_init__(self):
        check_config(self)
        validate.number("clip_eps", self.clip_eps, 0.0)
        if self.clip_eps_high is not None:
            validate.number("clip_eps_high", self.clip_eps_high, 0.0)
        validate.integer("stale_steps", self.stale_steps, minimum=0)
        if self.stale_steps >= self.steps:
            raise ValueError(f"stale_steps ({self.stale_steps}) must be fewer than steps ({self.steps})")
        validate.choice("correction", self.correction, CORRECTIONS)
        validate.number("correction_cap", self.correction_cap, 1.0, finite=False)
        validate.choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        validate.integer("warmup_steps", self.warmup_steps, minimum=0)
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be fewer than steps ({self.steps})")
        validate.integer("inner_steps", self.inner_steps)
        validate.choice("advantage", self.advantage, ADVANTAGES)
        validate.choice("aggregation", self.aggregation, AGGREGATIONS)
        if self.group_size < 2:
            raise ValueError(f"GRPO compares the completions of a prompt with each other: group_size must be >= 2, "
                             f"got {self.group_size}")


def group_advantages(rewards: torch.Tensor, config: GRPOConfig) -> torch.Tensor:
    """(B,) rewards -> (B,) advantages by `config.advantage`; with 'process', (B, T) token rewards ->
    (B, T) advantages."""
    if config.advantage == "process":
        return adv.process_advantages(rewards, rewards != 0, config.group_size)
    if config.advantage == "group":
        return adv.group_normalize(rewards, config.group_size)
    if config.advantage == "group_mean":
        return adv.group_normalize(rewards, config.group_size, scale=False)
    if config.advantage == "leave_one_out":
        return adv.leave_one_out(rewards, config.group_size)
    raise ValueError(f"unknown advantage {config.advantage!r}; choose one of {ADVANTAGES}")


def zero_advantage_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Share of groups whose rewards are all equal: their advantages are 0 and they teach nothing."""
    g = rewards.view(-1, group_size)
    return (g == g[:, :1]).all(dim=1).float().mean().item()


def old_logprobs_and_weights(logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                             config: GRPOConfig) -> tuple[torch.Tensor, torch.Tensor | None]:
    """pi_old for the clipped ratio, and the per-token importance weights (or None), by
    `config.correction`. logprobs: the current policy's, before this batch's first update;
    sampler_logprobs: those the sampler recorded (mu). 'ppo_clip' clips pi/mu itself; the others
    take the current policy as pi_old (ratio 1 at the first inner step) and 'none' weighs nothing."""
    if config.correction == "ppo_clip":
        return sampler_logprobs, None
    current = logprobs.detach()
    if config.correction == "none":
        return current, None
    return current, corrections.importance_weights(current, sampler_logprobs, mask, config.correction,
                                                   config.correction_cap)


def grpo_update(policy: GPT, opt: torch.optim.Optimizer, rollout: Rollout, rewards: torch.Tensor,
                ref_logprobs: torch.Tensor, config: GRPOConfig, max_len: int, step: int = 0) -> dict[str, float]:
    """Steps 3-4 on one sampled batch: group advantages, then `inner_steps` steps on grpo_loss.
    step: the training step, named if the loss turns NaN.
    rewards (B,), or (B, T) token rewards with advantage 'process'; ref_logprobs (B, T) of the
    rollout's tokens under the reference."""
    advantages = group_advantages(rewards, config)
    totals = rewards.sum(dim=1) if rewards.dim() == 2 else rewards  # (B,) one per completion
    mask = rollout.policy_mask  # the policy's tokens: an environment's are transitions, not actions
    metrics = {}
    for inner in range(config.inner_steps):
        logits = completion_logits(policy, rollout)  # (B, T, V)
        logprobs = token_logprobs(logits, rollout.tokens)
        if inner == 0:
            old_logprobs, weights = old_logprobs_and_weights(logprobs, rollout.logprobs, mask, config)
        loss, diag = grpo_loss(logprobs, old_logprobs, ref_logprobs, advantages, mask, clip_eps=config.clip_eps,
                               beta=config.beta, aggregation=config.aggregation, max_len=max_len,
                               clip_eps_high=config.clip_eps_high, is_weights=weights)
        check_finite(loss, step)
        optimizer_step(opt, list(policy.parameters()), loss, config.max_grad_norm)
        if inner == 0:  # the batch as the learner first sees it
            sampler_kl = masked_mean(kl_k3(rollout.logprobs, logprobs.detach()), mask).item()  # KL(mu || pi): 0 if fresh
            metrics.update(loss_first=loss.item(), kl=diag["kl"], sampler_kl=sampler_kl,
                           entropy=masked_mean(entropy_from_logits(logits.detach()), mask).item())
    metrics.update(loss_last=loss.item(), clip_fraction=diag["clip_fraction"],
                   zero_adv_groups=zero_advantage_fraction(totals, config.group_size))
    return metrics


def lr_factor(step: int, config: GRPOConfig) -> float:
    """The multiple of config.lr used at `step` (0-based): (step + 1) / (warmup + 1) while warming up,
    then 1 ('constant') or a straight line from 1 down to 0 after the last step ('linear'). Adam's
    first updates move every parameter by about lr whatever its gradient's size; the warm-up keeps
    those small. Deviation: Hugging Face's warm-up starts at 0, wasting the first step."""
    warmup = config.warmup_steps
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return 1.0 if config.lr_schedule == "constant" else (config.steps - step) / (config.steps - warmup)


def stale_batches(batches: Iterator[tuple[int, Rollout]], stale_steps: int) -> Iterator[tuple[int, Rollout]]:
    """The batches of `batches` (a lazy sampler that samples when asked), handed out so that batch
    j, trained on at update j, was sampled by the policy of update max(0, j - k), k = stale_steps:
    k are sampled up front, then each step samples one more with the current policy and hands out
    the oldest (so the first k + 1 all come from the starting policy)."""
    validate.integer("stale_steps", stale_steps, minimum=0)
    queue = deque(rollout for _, rollout in itertools.islice(batches, stale_steps))
    step = 0
    for _, rollout in batches:
        queue.append(rollout)
        yield step, queue.popleft()
        step += 1
    while queue:
        yield step, queue.popleft()
        step += 1


def train_grpo(policy: GPT, task: Task, config: GRPOConfig, tokenizer=None, reward_fn: RewardFn | None = None,
               callback: Callable[[dict, GPT], None] | None = None) -> list[dict]:
    """Train `policy` in place on `task` (its prompts and gold metrics); returns one dict of metrics
    per step (with stale_steps = k, a step's reward and gold metrics describe the batch it trained
    on, sampled k updates earlier). reward_fn: a TRL-style reward function to train on instead of
    the task's rewards.
    callback(metrics, policy): called after every step's update, as in `train_ppo`; what it adds to
    `metrics` lands in the history."""
    check_inputs(policy, task, config, GRPOConfig, multi_turn=True)
    enc = tokenizer or load_tokenizer()
    reference = frozen_reference(policy)
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, config))
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    last = time.perf_counter()
    batches = training_batches(policy, task, config, generator, enc, desc="GRPO")
    for step, rollout in stale_batches(batches, config.stale_steps):
        token_rewards = training_rewards(task, rollout, enc, reward_fn)  # (B, T)
        rewards = token_rewards if config.advantage == "process" else token_rewards.sum(dim=1)  # (B,) one per completion
        with torch.no_grad():
            ref_logprobs = completion_logprobs(reference, rollout)
        metrics = {"step": step, "reward": token_rewards.sum(dim=1).mean().item(), "length": rollout.mask.sum(1).mean().item(),
                   **task.gold(rollout)}
        metrics.update(grpo_update(policy, opt, rollout, rewards, ref_logprobs, config, task.max_new_tokens, step))
        schedule.step()
        now = time.perf_counter()
        metrics["step_time"], last = now - last, now  # sampling included
        if callback is not None:
            callback(metrics, policy)
            last = time.perf_counter()  # the callback's own time is not the step's
        history.append(metrics)
    policy.eval()
    return history
