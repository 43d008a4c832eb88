"""RL tasks on the tiny world: prompts, per-token rewards for training, gold metrics for judging.

A task turns a `Rollout` into a (B, T) tensor of per-token rewards (what the learner sees) and
into gold metrics (what we judge it by). Sequence-level rewards land on each row's last action
token (EOS, or the token that hit the length limit).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from . import datasets, grammar, rewards
from .notebook import progress
from .sampling import Rollout, sample


@dataclass
class Task:
    name: str
    train_prompts: list[str]
    test_prompts: list[str]
    max_new_tokens: int
    token_rewards: Callable[[Rollout, object], torch.Tensor]  # (rollout, tokenizer) -> (B, T)
    gold: Callable[[Rollout], dict[str, float]]  # rollout -> named gold metrics (batch means)


def training_batches(policy, task: Task, config, generator: torch.Generator, tokenizer,
                     desc: str) -> Iterator[tuple[int, Rollout]]:
    """The on-policy loop every trainer shares: for each of `config.steps` steps (with a progress
    bar), draw `config.prompts_per_step` training prompts (seeded by `config.seed`) and sample
    `config.group_size` completions of each from the current policy at temperature 1.
    Yields (step, rollout); `generator` drives the sampling (and may serve the caller too)."""
    rng = random.Random(config.seed)
    for step in progress(range(config.steps), desc=desc):
        prompts = [rng.choice(task.train_prompts) for _ in range(config.prompts_per_step)]
        yield step, sample(policy, prompts, max_new_tokens=task.max_new_tokens, group_size=config.group_size,
                           generator=generator, tokenizer=tokenizer)


def last_token_rewards(rollout: Rollout, scores: list[float]) -> torch.Tensor:
    """(B, T) zeros with each row's score at its last action token."""
    out = torch.zeros_like(rollout.logprobs)
    last = rollout.mask.sum(dim=1).long() - 1  # (B,) index of the last action token
    out[torch.arange(out.size(0)), last] = torch.tensor(scores, dtype=out.dtype, device=out.device)
    return out


def review_token_reward_tensor(rollout: Rollout, enc) -> torch.Tensor:
    rows = [rewards.review_token_rewards(enc, row) for row in rollout.tokens.tolist()]
    return torch.tensor(rows, dtype=rollout.logprobs.dtype, device=rollout.logprobs.device) * rollout.mask


def review_gold(rollout: Rollout) -> dict[str, float]:
    gold = rewards.review_gold_reward(rollout.prompts, rollout.texts)
    return {"gold": sum(gold) / len(gold), "gold_positive": sum(g > 0 for g in gold) / len(gold),
            "valid": sum(grammar.is_review(p + c) for p, c in zip(rollout.prompts, rollout.texts)) / len(gold)}


def reviews_task(start: str = "negative") -> Task:
    """Make the review positive, however it starts (seed 003). Proxy: the lexicon, per token."""
    def prompts(split):
        return [r["prompt"] for r in datasets.load_prompts("reviews", split) if r["start"] == start]
    return Task("reviews", prompts("train"), prompts("test"), grammar.MAX_NEW_TOKENS["reviews"],
                review_token_reward_tensor, review_gold)


def arithmetic_task() -> Task:
    """Verifiable reward: 1 for the right sum, 0 otherwise, at the last token."""
    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        return last_token_rewards(rollout, rewards.arithmetic_reward(rollout.prompts, rollout.texts))

    def gold(rollout: Rollout) -> dict[str, float]:
        correct = rewards.arithmetic_reward(rollout.prompts, rollout.texts)
        return {"correct": sum(correct) / len(correct)}

    def prompts(split):
        return [r["prompt"] for r in datasets.load_prompts("arithmetic", split)]
    return Task("arithmetic", prompts("train"), prompts("test"), grammar.MAX_NEW_TOKENS["arithmetic"], token_rewards, gold)
