"""PPO for language models, RLHF style (Ouyang et al., 2022; Huang et al., "The N+ implementation
details of RLHF with PPO", 2024): a policy, a frozen reference, a critic, and a score.

Each step:

    1. rollout: sample `group_size` completions of each of `prompts_per_step` prompts (T = 1); their
       log-probs are pi_old's, the policy that collected the batch
    2. rewards per token: r_t = -beta * KL_t, with KL_t = log pi_old(a_t|s_t) - log pi_ref(a_t|s_t)
       (k1 on the sampled token), and the task's score added at the last action token (with
       `dense`, each of the task's token rewards on its own token instead: a reward per step)
    3. values V(s_t) from the critic at collection time; GAE(gamma, lambda) gives advantages and the
       critic's targets (returns); advantages whitened over the batch's tokens
    4. `epochs` passes over the batch in `minibatches` shuffled minibatches: the clipped surrogate
       against pi_old, and the value loss with value clipping against the collection-time values

Each implementation detail has a switch, so a lesson can turn one off at a time: `clip` (off: the
plain importance-weighted surrogate), `target_kl` (on: early stopping of a batch's epochs),
`value_clip` (None: no value clipping), `whiten` (raw GAE
advantages), `epochs` (1: one pass over the batch, still in `minibatches` steps; with one
minibatch too, the single step sees ratio 1 and PPO reduces to a policy-gradient step). The
critic is a separate copy of the starting model with a zero-initialised value head, or, given
`critic_from=` a reward model, a copy of the reward model (`minirl.lm.critic.from_reward_model`).

On multi-turn episodes (a task with an environment) the environment's tokens are transitions, not
actions: the KL penalty, the clipped surrogate, the whitening and the entropy count the policy's
tokens only (`Rollout.policy_mask`), the score (the episode's rewards summed, the calls' costs
included) lands on the policy's last token, and the critic and GAE run over every token (the
environment's tokens are states too).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from ..core import advantages as adv
from ..core import validate
from ..core.kl import kl_k1
from ..core.losses import ppo_clip_loss, value_loss
from ..core.ops import entropy_from_logits, masked_mean, masked_sum, masked_var, masked_whiten, token_logprobs, zero_padding
from ..lm.critic import completion_values, from_reward_model, make_critic
from ..lm.model import GPT
from ..lm.reward_head import RewardModel
from ..lm.sampling import Rollout, completion_logits, completion_logprobs
from ..lm.tokenizer import load_tokenizer
from ..world.tasks import RewardFn, Task, training_rewards
from .training import check_config, check_finite, check_inputs, frozen_reference, optimizer_step, training_batches

__all__ = ["PPOConfig", "rlhf_rewards", "explained_variance", "PPO", "train_ppo"]


@validate.known_options(elsewhere=validate.TASK_SETTINGS)
@dataclass
class PPOConfig:
    """Settings of `train_ppo`. Each step samples prompts_per_step x group_size completions, then
    updates on them for `epochs` passes of `minibatches` minibatches.

    steps             training steps, each on a freshly sampled batch
    prompts_per_step  training prompts drawn per step (at random, with replacement)
    group_size        completions per prompt
    lr                the policy's AdamW learning rate (no weight decay)
    critic_lr         the critic's AdamW learning rate
    beta              KL coefficient: every token's reward is -beta * (log pi_old - log pi_ref), pi_ref
                      the frozen starting model, with the score added at the last token
    gamma             discount per token (1: none; every episode ends within the length limit)
    lam               GAE's lambda: 0 is the one-step TD error, 1 the return minus V
    epochs            passes over each batch (1 with minibatches=1: one policy-gradient step)
    minibatches       shuffled minibatches per pass; at most the batch's completions
    clip              clip the ratio (False: the plain importance-weighted surrogate)
    clip_eps          the ratio's clip range [1 - clip_eps, 1 + clip_eps] (the PPO paper's 0.2)
    target_kl         stop a batch's epochs once a minibatch's approximate KL(pi_old || pi) exceeds it
                      (None: never stop early)
    value_clip        PPO's value clipping: the value loss is the worse of the plain error and the
                      error of the value held within value_clip of its collection-time value
                      (None: off)
    whiten            whiten the advantages over the batch's tokens (mean 0, variance 1)
    max_grad_norm     the policy's and the critic's gradients are each clipped to this global norm
                      (inf: no clipping)
    seed              seeds the prompt draws and the sampler's generator; seed + 1 the minibatch
                      shuffles
    dense             keep the task's token rewards on their tokens (a process reward model's reward
                      per step: GAE credits a token with the rewards from its step on) instead of
                      summing them onto the last action token; the same for a task that rewards
                      only the last token
    """
    steps: int = 40
    prompts_per_step: int = 16
    group_size: int = 4
    lr: float = 3e-4
    critic_lr: float = 1e-3
    beta: float = 0.1
    gamma: float = 1.0
    lam: float = 0.95
    epochs: int = 4
    minibatches: int = 4
    clip: bool = True
    clip_eps: float = 0.2
    target_kl: float | None = None
    value_clip: float | None = 0.2
    whiten: bool = True
    max_grad_norm: float = 1.0
    seed: int = 0
    dense: bool = False  # last: a field added after the others keeps every positional call working

    def __post_init__(self):
        check_config(self)
        validate.number("critic_lr", self.critic_lr, 0.0, open_low=True)
        validate.number("gamma", self.gamma, 0.0, 1.0)
        validate.number("lam", self.lam, 0.0, 1.0)
        validate.integer("epochs", self.epochs)
        validate.integer("minibatches", self.minibatches)
        validate.number("clip_eps", self.clip_eps, 0.0)
        if self.target_kl is not None:
            validate.number("target_kl", self.target_kl, 0.0, open_low=True)
        if self.value_clip is not None:
            validate.number("value_clip", self.value_clip, 0.0)
        batch = self.prompts_per_step * self.group_size
        if self.minibatches > batch:
            raise ValueError(f"minibatches={self.minibatches} is more than the {batch} completions of a batch "
                             f"(prompts_per_step x group_size); use at most {batch}")


def rlhf_rewards(score: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                 beta: float) -> torch.Tensor:
    """Per-token rewards (B, T): -beta * (log pi_old - log pi_ref) on every action token (k1), plus
    the sequence score (B,) at each row's last action token. Summed, R_total = score - beta * KL.
    mask: 1 on the action tokens (in a multi-turn episode, the policy's: it may have holes)."""
    r = -beta * zero_padding(kl_k1(logprobs, ref_logprobs), mask)
    last = mask.size(1) - 1 - mask.flip(1).argmax(dim=1)  # (B,) the last 1 of each row
    r[torch.arange(r.size(0), device=r.device), last] += score
    return r


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over action tokens: 1 is a perfect critic, 0 no
    better than a constant, negative worse than one."""
    var = masked_var(returns, mask)
    return (1 - masked_var(returns - values, mask) / var).item() if var > 0 else float("nan")


class PPO:
    """The four models and the update; `train_ppo` is the loop around it. Minibatches are shuffled
    by a generator of their own (seed + 1, a stream apart from the sampler's seed), so switching an
    implementation detail off (fewer epochs or minibatches) changes nothing about which completions
    are sampled."""

    def __init__(self, policy: GPT, config: PPOConfig, critic_from=None):
        self.policy, self.config = policy, config
        self.reference = frozen_reference(policy)
        self.critic = make_critic(policy) if critic_from is None else from_reward_model(critic_from)  # (trunk, value head)
        self.critic_params = [p for m in self.critic for p in m.parameters()]
        self.opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
        self.critic_opt = torch.optim.AdamW(self.critic_params, lr=config.critic_lr, weight_decay=0.0)
        self.shuffle = torch.Generator().manual_seed(config.seed + 1)

    @torch.no_grad()
    def score_batch(self, rollout: Rollout, score: torch.Tensor) -> dict[str, torch.Tensor]:
        """Everything the update needs that is fixed at collection time. score: (B,) each
        completion's score, added at its last action token; or (B, T) token rewards, each added on
        its own token (what `train_ppo` passes with `dense`)."""
        c, mask, own = self.config, rollout.mask, rollout.policy_mask  # every token; the policy's
        ref_logprobs = completion_logprobs(self.reference, rollout)
        if score.dim() == 2:
            rewards = rlhf_rewards(score.new_zeros(score.size(0)), rollout.logprobs, ref_logprobs, own, c.beta)
            rewards = rewards + zero_padding(score, mask)
        else:
            rewards = rlhf_rewards(score, rollout.logprobs, ref_logprobs, own, c.beta)
        values = completion_values(*self.critic, rollout)
        advantages, returns = adv.gae(rewards, values, mask, c.gamma, c.lam)
        if c.whiten:
            advantages = masked_whiten(advantages, own)
        return {"rewards": rewards, "values": values, "advantages": advantages, "returns": returns,
                "kl": masked_sum(kl_k1(rollout.logprobs, ref_logprobs), own, dim=1)}

    def update(self, rollout: Rollout, batch: dict[str, torch.Tensor], step: int) -> dict[str, float]:
        """`epochs` passes of `minibatches` shuffled minibatches; returns the mean diagnostics and
        `updates`, the number of minibatch steps taken. With `target_kl`, the batch is dropped as
        soon as a minibatch's approximate KL(pi_old || pi_theta), measured before its step, exceeds
        it (early stopping). On a fresh batch the first minibatch steps for any target above
        rounding (its ratio is 1, its approximate KL about 1e-8); a batch updated before (lesson 05
        calls this epoch by epoch) may take no step, and then the diagnostics are NaN."""
        c = self.config
        B = rollout.tokens.size(0)
        stats = {"clip_fraction": [], "approx_kl": [], "value_loss": []}
        epochs = (torch.randperm(B, generator=self.shuffle).chunk(c.minibatches) for _ in range(c.epochs))
        for rows in itertools.chain.from_iterable(epochs):
            mb = rollout.select(rows)
            logprobs = token_logprobs(completion_logits(self.policy, mb), mb.tokens)
            loss, diag = ppo_clip_loss(logprobs, mb.logprobs, batch["advantages"][rows], mb.policy_mask,
                                       clip_eps=c.clip_eps if c.clip else math.inf)
            if c.target_kl is not None and diag["approx_kl"] > c.target_kl:
                break
            check_finite(loss, step, "policy loss")
            optimizer_step(self.opt, list(self.policy.parameters()), loss, c.max_grad_norm)
            values = completion_values(*self.critic, mb)
            v_loss = value_loss(values, batch["returns"][rows], mb.mask, old_values=batch["values"][rows],
                                clip_range=c.value_clip)
            check_finite(v_loss, step, "value loss")
            optimizer_step(self.critic_opt, self.critic_params, v_loss, c.max_grad_norm)
            for k, v in (*diag.items(), ("value_loss", v_loss.item())):
                stats[k].append(v)
        return {"updates": len(stats["value_loss"]), **{k: sum(v) / len(v) if v else math.nan for k, v in stats.items()}}


def train_ppo(policy: GPT, task: Task, config: PPOConfig, tokenizer=None, reward_fn: RewardFn | None = None,
              critic_from=None, callback: Callable[[dict, GPT], None] | None = None) -> list[dict]:
    """Train `policy` in place on `task` (its prompts and gold metrics); returns one dict of metrics
    per step. reward_fn: a TRL-style reward function to train on instead of the task's rewards.
    critic_from: a reward model to initialize the critic from (default: the policy, value 0).
    callback(metrics, policy): called after every step's update, e.g. to measure the policy every
    few steps; what it adds to `metrics` lands in the history."""
    check_inputs(policy, task, config, PPOConfig, multi_turn=True)
    if critic_from is not None and not isinstance(critic_from, RewardModel):
        raise TypeError(f"critic_from must be a minirl reward model (minirl.lm.reward_head.load_reward_model), got "
                        f"{type(critic_from).__name__}")
    enc = tokenizer or load_tokenizer()
    ppo = PPO(policy, config, critic_from)
    generator = torch.Generator().manual_seed(config.seed)  # sampling
    history = []
    last = time.perf_counter()
    for step, rollout in training_batches(policy, task, config, generator, enc, desc="PPO"):
        token_rewards = training_rewards(task, rollout, enc, reward_fn)  # (B, T)
        score = token_rewards.sum(dim=1)  # (B,) each completion's reward
        batch = ppo.score_batch(rollout, token_rewards if config.dense else score)
        mask = rollout.mask
        with torch.no_grad():
            entropy = masked_mean(entropy_from_logits(completion_logits(policy, rollout)), rollout.policy_mask).item()
        metrics = {"step": step, "reward": score.mean().item(), "kl": batch["kl"].mean().item(),
                   "kl_std": batch["kl"].std().item(),  # spread of the per-completion estimates behind "kl"
                   "total_reward": batch["rewards"].sum(1).mean().item(), "entropy": entropy,
                   "length": mask.sum(1).mean().item(), "truncated": rollout.truncated.float().mean().item(),
                   "explained_variance": explained_variance(batch["values"], batch["returns"], mask), **task.gold(rollout)}
        metrics.update(ppo.update(rollout, batch, step))
        now = time.perf_counter()
        metrics["step_time"], last = now - last, now  # sampling included
        if callback is not None:
            callback(metrics, policy)
            last = time.perf_counter()  # the callback's own time is not the step's
        history.append(metrics)
    policy.eval()
    return history
