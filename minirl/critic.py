"""The critic: a scalar value head on a GPT trunk.

`values[:, t]` is V of the prefix *before* completion token t: the state in which token t is
chosen. The value head reads `sampling.completion_hidden`, the same hidden states whose logits
chose each token. An off-by-one here, reading the state *after* token t, silently turns V(s_t)
into something closer to Q(s_t, a_t): the classic PPO bug (tested against exact V on the micro
world).

The trunk can be the policy itself (a value head on the policy's trunk: cheap, but the value
loss also moves the policy's features) or a separate copy (twice the memory, no interference).
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from .model import GPT
from .sampling import Rollout, completion_hidden


class ValueHead(nn.Module):
    """hidden (..., n_embd) -> value (...). Initialised to output 0 everywhere."""

    def __init__(self, n_embd: int):
        super().__init__()
        self.v = nn.Linear(n_embd, 1)
        nn.init.zeros_(self.v.weight)
        nn.init.zeros_(self.v.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.v(hidden).squeeze(-1)


def completion_values(trunk: GPT, head: ValueHead, rollout: Rollout) -> torch.Tensor:
    """values (B, T): V of the state before each completion token of the rollout (0 on padding)."""
    return head(completion_hidden(trunk, rollout)) * rollout.mask


def make_critic(model: GPT) -> tuple[GPT, ValueHead]:
    """A critic on a separate trunk: a trainable copy of `model` and a fresh value head (outputs 0)."""
    return copy.deepcopy(model).train(), ValueHead(model.config.n_embd).to(next(model.parameters()).device)
