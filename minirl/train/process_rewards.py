"""A process or outcome reward model as the reward of RL on the steps task (`minirl.world.steps`).

    prm_task(prm, terms)   each step's probability from the PRM, on the step's last token: a dense
                           reward, for PPO's GAE over steps (`PPOConfig(dense=True)`) or GRPO's
                           'process' advantage
    orm_task(orm, terms)   the outcome model's probability of a right answer, on the last token

Both keep the steps task's prompts and gold metrics (the share right, well formed, step accuracy),
so the world's truth watches a policy that learns to please the model instead of being right: a
PRM paid per step pays for an extra step too, unless it scores that step low.

A step's last token: the completion's words (its steps, `process_head.completion_steps`) found in
its decoded text, each ending on the token that holds its last character.
"""
from __future__ import annotations

import dataclasses
import re

import torch

from ..lm.process_head import ProcessRewardModel, completion_steps, step_probabilities
from ..lm.sampling import Rollout
from ..world import steps as steps_world
from ..world.tasks import Task, last_token_rewards

__all__ = ["step_end_tokens", "prm_task", "orm_task"]


def step_end_tokens(enc, tokens: list[int]) -> list[int]:
    """The index of each step's last token in a completion's tokens (EOS and what follows it ignored)."""
    if enc.eot_token in tokens:
        tokens = tokens[:tokens.index(enc.eot_token)]
    pieces = [enc.decode([t]) for t in tokens]
    token_of_char = [i for i, piece in enumerate(pieces) for _ in piece]  # the token each character came from
    return [token_of_char[m.end() - 1] for m in re.finditer(r"\S+", "".join(pieces))]


def _check_model(model, name: str) -> None:
    if not isinstance(model, ProcessRewardModel):
        raise TypeError(f"{name} must be a minirl ProcessRewardModel (minirl.train.prm.train_prm), got {type(model).__name__}")


def prm_task(prm: ProcessRewardModel, terms: int = 3) -> Task:
    """The steps task with the PRM's probability of each step on the step's last token."""
    _check_model(prm, "prm")
    base = steps_world.steps_task(terms)

    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        probs = step_probabilities(prm, rollout.prompts, [completion_steps(t) for t in rollout.texts], enc)
        out = torch.zeros_like(rollout.logprobs)
        for i, (row, p) in enumerate(zip(rollout.tokens.tolist(), probs)):
            ends = step_end_tokens(enc, row)
            if len(ends) != len(p):
                raise RuntimeError(f"completion {i} ({rollout.texts[i]!r}) has {len(ends)} step ends for {len(p)} steps")
            out[i, ends] = torch.tensor(p, dtype=out.dtype, device=out.device)
        return out
    return dataclasses.replace(base, name=f"{base.name}_prm", token_rewards=token_rewards)


def orm_task(orm: ProcessRewardModel, terms: int = 3) -> Task:
    """The steps task with the outcome model's probability of a right answer on the last token."""
    _check_model(orm, "orm")
    base = steps_world.steps_task(terms)

    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        probs = step_probabilities(orm, rollout.prompts, [[t] for t in rollout.texts], enc)
        return last_token_rewards(rollout, [p[0] for p in probs])
    return dataclasses.replace(base, name=f"{base.name}_orm", token_rewards=token_rewards)
