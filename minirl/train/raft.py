"""RAFT, reward-ranked fine-tuning (Dong et al., 2023; presented in Hao Sun's slides "Reinforcement
Learning in the Era of LLMs", Cambridge 2023): best-of-N, then SFT on the winners, iterated.

Each round:

    1. draw `prompts_per_round` training prompts and sample `n` completions of each from the
       current policy at temperature 1;
    2. score them with the reward (a TRL-style reward function, or the task's own rewards) and
       keep each prompt's best (`minirl.train.best_of_n.select_best`);
    3. fine-tune on the winners for `sft_steps` steps (`minirl.train.sft.fit`: the loss on response
       tokens only, the winners' sampled token ids as they are, EOS included when they ended).

Round by round the policy drifts from where it started, as best-of-N does in one go; unlike
best-of-N the result is a new model, so it costs one sample per answer at inference. Deviation
from the paper: each round's fine-tuning starts a fresh AdamW (the paper fine-tunes the previous
round's model too; its optimizer state is not specified).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch

from ..core import validate
from ..lm.model import GPT
from ..lm.sampling import sample
from ..lm.tokenizer import PAD, load_tokenizer
from ..world.tasks import RewardFn, Task, check_signature, training_rewards
from .best_of_n import select_best
from .sft import SFTConfig, fit
from .training import check_inputs

__all__ = ["RAFTConfig", "winner_tokens", "train_raft"]


@validate.known_options(elsewhere=validate.TASK_SETTINGS)
@dataclass
class RAFTConfig:
    """Settings of `train_raft`.

    rounds             rounds of sample, select, fine-tune
    prompts_per_round  training prompts drawn per round (at random, with replacement): the winners
                       per round
    n                  completions per prompt, the N of best-of-N
    sft_steps          fine-tuning steps per round (8 x 32 = 256: one pass over the winners)
    batch_size         winners per fine-tuning step
    lr                 the fine-tuning's AdamW learning rate (a fresh optimizer each round, no weight
                       decay, gradients clipped to norm 1 as `SFTConfig`'s default)
    seed               seeds the prompt draws and the sampler's generator; seed + round each
                       round's batch order
    """
    rounds: int = 6
    prompts_per_round: int = 256
    n: int = 8
    sft_steps: int = 8
    batch_size: int = 32
    lr: float = 1e-4
    seed: int = 0

    def __post_init__(self):
        for name in ("rounds", "prompts_per_round", "n", "sft_steps", "batch_size"):
            validate.integer(name, getattr(self, name))
        validate.number("lr", self.lr, 0.0, open_low=True)
        validate.integer("seed", self.seed, minimum=-2**63)


def winner_tokens(rollout, best: torch.Tensor) -> list[tuple[list[int], int]]:
    """The picked rows as SFT items (prompt ids without left padding + completion ids through EOS,
    prompt length)."""
    out = []
    for i in best.tolist():
        prompt = rollout.prompt_tokens[i][rollout.prompt_mask[i].bool()].tolist()
        n = int(rollout.mask[i].sum().item())
        out.append((prompt + rollout.tokens[i, :n].tolist(), len(prompt)))
    return out


def train_raft(policy: GPT, task: Task, config: RAFTConfig, tokenizer=None, reward_fn: RewardFn | None = None,
               callback: Callable[[dict, GPT], None] | None = None) -> list[dict]:
    """Train `policy` in place by RAFT on `task`'s training prompts; one dict per round: the mean
    reward of all draws and of the winners, the last SFT loss, the task's gold metrics of the draws.
    callback(metrics, policy) runs after each round, as in `train_ppo`."""
    check_inputs(policy, task, config, RAFTConfig)
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
        scores = training_rewards(task, rollout, enc, reward_fn).sum(dim=1).cpu().double()  # (B*n,)
        best = select_best(scores, config.n)
        sft = SFTConfig(steps=config.sft_steps, batch_size=config.batch_size, lr=config.lr, seed=config.seed + round_)
        losses = fit(policy, winner_tokens(rollout, best), sft, pad, desc=f"RAFT round {round_ + 1}")
        metrics = {"round": round_, "reward": scores.mean().item(), "best_reward": scores[best].mean().item(),
                   "sft_loss": losses[-1]["loss"], **task.gold(rollout)}
        if callback is not None:
            callback(metrics, policy)
        history.append(metrics)
    return history
