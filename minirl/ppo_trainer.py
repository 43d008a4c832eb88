"""PPO for language models, RLHF style (Ouyang et al., 2022; Huang et al., "The N+ implementation
details of RLHF with PPO", 2024): a policy, a frozen reference, a critic, and a score.

Each step:

    1. rollout: sample `group_size` completions of each of `prompts_per_step` prompts (T = 1); their
       log-probs are pi_old's, the policy that collected the batch
    2. rewards per token: r_t = -beta * KL_t, with KL_t = log pi_old(a_t|s_t) - log pi_ref(a_t|s_t)
       (k1 on the sampled token), and the task's score added at the last action token
    3. values V(s_t) from the critic at collection time; GAE(gamma, lambda) gives advantages and the
       critic's targets (returns); advantages whitened over the batch's tokens
    4. `epochs` passes over the batch in `minibatches` shuffled minibatches: the clipped surrogate
       against pi_old, and the value loss with value clipping against the collection-time values

Each implementation detail has a switch, so a lesson can turn one off at a time: `clip` (off: the
plain importance-weighted surrogate), `value_clip` (None: no value clipping), `whiten` (raw GAE
advantages), `epochs` (1: one pass, as in REINFORCE). The critic is a separate copy of the starting
model with a zero-initialised value head (initialising it from a reward model is lesson 07's).
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch

from . import advantages as adv
from .critic import completion_values
from .losses import ppo_clip_loss, value_loss
from .model import GPT
from .ops import entropy_from_logits, masked_mean, masked_var, masked_whiten, token_logprobs
from .pg_trainer import make_critic
from .sampling import Rollout, completion_logits, completion_logprobs
from .tasks import Task, training_batches
from .tokenizer import load_tokenizer


@dataclass
class PPOConfig:
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
    value_clip: float | None = 0.2
    whiten: bool = True
    max_grad_norm: float = 1.0
    seed: int = 0


def rlhf_rewards(score: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                 beta: float) -> torch.Tensor:
    """Per-token rewards (B, T): -beta * (log pi_old - log pi_ref) on every action token, plus the
    sequence score (B,) at each row's last action token. Summed, R_total = score - beta * KL."""
    r = -beta * (logprobs - ref_logprobs) * mask
    last = mask.sum(dim=1).long() - 1
    r[torch.arange(r.size(0)), last] += score
    return r


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over action tokens: 1 is a perfect critic, 0 no
    better than a constant, negative worse than one."""
    var = masked_var(returns, mask)
    return (1 - masked_var(returns - values, mask) / var).item() if var > 0 else float("nan")


def sequence_score(task: Task, rollout: Rollout, enc) -> torch.Tensor:
    """(B,) the task's reward of each completion (its per-token rewards summed)."""
    return task.token_rewards(rollout, enc).sum(dim=1)


class PPO:
    """The four models and the update; `train_ppo` is the loop around it."""

    def __init__(self, policy: GPT, config: PPOConfig):
        self.policy, self.config = policy, config
        self.reference = copy.deepcopy(policy).eval().requires_grad_(False)
        self.critic = make_critic(policy)  # (trunk, value head)
        self.critic_params = [p for m in self.critic for p in m.parameters()]
        self.opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
        self.critic_opt = torch.optim.AdamW(self.critic_params, lr=config.critic_lr, weight_decay=0.0)

    @torch.no_grad()
    def score_batch(self, rollout: Rollout, score: torch.Tensor) -> dict[str, torch.Tensor]:
        """Everything the update needs that is fixed at collection time."""
        c, mask = self.config, rollout.mask
        ref_logprobs = completion_logprobs(self.reference, rollout)
        rewards = rlhf_rewards(score, rollout.logprobs, ref_logprobs, mask, c.beta)
        values = completion_values(*self.critic, rollout)
        advantages, returns = adv.gae(rewards, values, mask, c.gamma, c.lam)
        if c.whiten:
            advantages = masked_whiten(advantages, mask)
        return {"rewards": rewards, "values": values, "advantages": advantages, "returns": returns,
                "kl": ((rollout.logprobs - ref_logprobs) * mask).sum(1)}

    def update(self, rollout: Rollout, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, float]:
        """`epochs` passes of `minibatches` shuffled minibatches; returns the mean diagnostics."""
        c = self.config
        B = rollout.tokens.size(0)
        stats = {"clip_fraction": [], "approx_kl": [], "value_loss": []}
        for _ in range(c.epochs):
            for rows in torch.randperm(B, generator=generator).chunk(c.minibatches):
                mb = rollout.select(rows)
                logprobs = token_logprobs(completion_logits(self.policy, mb), mb.tokens)
                loss, diag = ppo_clip_loss(logprobs, mb.logprobs, batch["advantages"][rows], mb.mask,
                                           clip_eps=c.clip_eps if c.clip else math.inf)
                if not math.isfinite(loss.item()):
                    raise FloatingPointError(f"policy loss is {loss.item()}: lower lr or check the rewards")
                self._step(self.opt, self.policy.parameters(), loss)
                values = completion_values(*self.critic, mb)
                v_loss = value_loss(values, batch["returns"][rows], mb.mask, old_values=batch["values"][rows],
                                    clip_range=c.value_clip)
                self._step(self.critic_opt, self.critic_params, v_loss)
                for k, v in (*diag.items(), ("value_loss", v_loss.item())):
                    stats[k].append(v)
        return {k: sum(v) / len(v) for k, v in stats.items()}

    def _step(self, opt: torch.optim.Optimizer, params, loss: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params), self.config.max_grad_norm)
        opt.step()


def train_ppo(policy: GPT, task: Task, config: PPOConfig, tokenizer=None) -> list[dict]:
    """Train `policy` in place on `task`; returns one dict of metrics per step."""
    enc = tokenizer or load_tokenizer()
    ppo = PPO(policy, config)
    generator = torch.Generator().manual_seed(config.seed)  # sampling and minibatch shuffling
    history = []
    last = time.perf_counter()
    for step, rollout in training_batches(policy, task, config, generator, enc, desc="PPO"):
        score = sequence_score(task, rollout, enc)
        batch = ppo.score_batch(rollout, score)
        mask = rollout.mask
        with torch.no_grad():
            entropy = masked_mean(entropy_from_logits(completion_logits(policy, rollout)), mask).item()
        metrics = {"step": step, "reward": score.mean().item(), "kl": batch["kl"].mean().item(),
                   "total_reward": batch["rewards"].sum(1).mean().item(), "entropy": entropy,
                   "length": mask.sum(1).mean().item(), "truncated": rollout.truncated.float().mean().item(),
                   "explained_variance": explained_variance(batch["values"], batch["returns"], mask), **task.gold(rollout)}
        metrics.update(ppo.update(rollout, batch, generator))
        now = time.perf_counter()
        metrics["step_time"], last = now - last, now  # sampling included
        history.append(metrics)
    policy.eval()
    return history
