"""Expert iteration with a verifier: sample, keep every completion the verifier accepts, fine-tune
on the kept ones, repeat. This is STaR (Zelikman et al., 2022) without its rationalization, RFT
(rejection-sampling fine-tuning, Yuan et al., 2023), and RAFT (`minirl.train.raft`) with a 0/1
verifier in place of best-of-N: RAFT keeps each prompt's best draw, this keeps all the right ones.

Each round:

    1. draw `prompts_per_round` training prompts (at random, with replacement) and sample `n`
       completions of each from the current policy at temperature 1;
    2. the verifier: the task's reward of each completion, summed over its tokens (or reward_fn's
       score), must be 0 or 1; a completion is kept when it is 1. Any other reward is refused;
    3. fine-tune on the kept completions with `minirl.train.sft.fit` (the loss on response tokens,
       the sampled ids as they are, EOS included when they ended): a fresh AdamW, `epochs` passes
       over the kept ones in batches of `batch_size`, so ceil(epochs * kept / batch_size) steps. A
       round with nothing kept takes no step and leaves the policy as it was.

`minirl.exact.expert_iteration` shows what a round does in expectation: REINFORCE on the 0/1
reward with no baseline, reweighted by prompt. The SFT loss here is one token mean over a batch
of kept completions from many prompts, its 'pooled' normalization (with each token weighted, not
each sequence). Deviations from STaR, which samples every training problem each round and
fine-tunes the base model afresh on what that round kept: each round here samples a random batch
of prompts and fine-tunes the current policy, so the rounds compound, as RAFT's do; and nothing
holds the policy near its start (no KL penalty), but the number of rounds and the learning rate.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

import torch

from ..core import validate
from ..lm.model import GPT
from ..lm.sampling import sample
from ..lm.tokenizer import PAD, load_tokenizer
from ..world.tasks import RewardFn, Task, check_signature, training_rewards
from .raft import winner_tokens
from .sft import SFTConfig, fit
from .training import check_inputs

__all__ = ["ExpertIterationConfig", "verdicts", "train_expert_iteration"]


@validate.known_options(elsewhere=validate.TASK_SETTINGS)
@dataclass
class ExpertIterationConfig:
    """Settings of `train_expert_iteration`. Each round samples prompts_per_round x n completions.

    rounds             rounds of sample, keep, fine-tune
    prompts_per_round  training prompts drawn per round (at random, with replacement)
    n                  completions sampled per prompt
    epochs             passes over a round's kept completions: ceil(epochs * kept / batch_size) steps
                       (a last, short batch is filled from a reshuffle, as `sft.fit` batches)
    batch_size         kept completions per fine-tuning step
    lr                 the fine-tuning's AdamW learning rate (a fresh optimizer each round, no weight
                       decay, gradients clipped to norm 1 as `SFTConfig`'s default)
    seed               seeds the prompt draws and the sampler's generator; seed + round each
                       round's batch order
    """
    rounds: int = 6
    prompts_per_round: int = 256
    n: int = 8
    epochs: int = 1
    batch_size: int = 32
    lr: float = 1e-4
    seed: int = 0

    def __post_init__(self):
        for name in ("rounds", "prompts_per_round", "n", "epochs", "batch_size"):
            validate.integer(name, getattr(self, name))
        validate.number("lr", self.lr, 0.0, open_low=True)
        validate.integer("seed", self.seed, minimum=-2**63)


def verdicts(rewards: torch.Tensor, task_name: str) -> torch.Tensor:
    """(B,) bool, True where a completion is accepted, from its (B, T) per-token rewards, whose sum
    must be 0 (rejected) or 1 (accepted)."""
    scores = rewards.sum(dim=1)
    bad = ~((scores == 0) | (scores == 1))
    if bool(bad.any()):
        raise ValueError(f"expert iteration needs a verifier: each completion's reward must be 0 or 1, but task "
                         f"{task_name!r} gave {scores[bad][0].item():g}; give a reward_fn that answers 0 or 1, or "
                         "train with train_raft, which keeps the best of each group by any reward")
    return scores == 1


def train_expert_iteration(policy: GPT, task: Task, config: ExpertIterationConfig, tokenizer=None,
                           reward_fn: RewardFn | None = None,
                           callback: Callable[[dict, GPT], None] | None = None) -> list[dict]:
    """Train `policy` in place by expert iteration on `task`'s training prompts; one dict per round:
    the completions sampled so far ('samples'), the mean reward of the round's draws, how many were
    kept, the SFT steps taken and the last one's loss (NaN when nothing was kept), and the task's gold
    metrics of the draws. callback(metrics, policy) runs after each round, as in `train_raft`."""
    check_inputs(policy, task, config, ExpertIterationConfig)
    if reward_fn is not None:  # checked here, not after a round of sampling
        check_signature(reward_fn, getattr(reward_fn, "__name__", type(reward_fn).__name__))
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function callback(metrics, policy), got {type(callback).__name__}")
    enc = tokenizer or load_tokenizer()
    pad = enc.encode_single_token(PAD)
    rng = random.Random(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    for round_ in range(config.rounds):
        prompts = [rng.choice(task.train_prompts) for _ in range(config.prompts_per_round)]
        with torch.no_grad():
            rollout = sample(policy, prompts, max_new_tokens=task.max_new_tokens, group_size=config.n,
                             generator=generator, tokenizer=enc)
        accepted = verdicts(training_rewards(task, rollout, enc, reward_fn), task.name).cpu()  # (B*n,)
        kept = winner_tokens(rollout, accepted.nonzero().flatten())
        steps = math.ceil(config.epochs * len(kept) / config.batch_size)
        losses = []
        if kept:
            sft = SFTConfig(steps=steps, batch_size=config.batch_size, lr=config.lr, seed=config.seed + round_)
            losses = fit(policy, kept, sft, pad, desc=f"expert iteration round {round_ + 1}")
        metrics = {"round": round_, "samples": (round_ + 1) * len(rollout.texts),
                   "reward": accepted.double().mean().item(), "kept": len(kept), "sft_steps": steps,
                   "sft_loss": losses[-1]["loss"] if losses else math.nan, **task.gold(rollout)}
        if callback is not None:
            callback(metrics, policy)
        history.append(metrics)
    return history
