"""The critic: a scalar value head on a GPT trunk.

`values[:, t]` is V of the prefix *before* completion token t: the state in which token t is
chosen. In a left-padded sequence of prompt length P, that state ends at position P - 1 + t, so
the value head reads the hidden state there (the same position whose logits chose token t). An
off-by-one here, reading position P + t, silently turns V(s_t) into something closer to
Q(s_t, a_t): the classic PPO bug (tested against exact V on the micro world).

The trunk can be the policy itself (a value head on the policy's trunk: cheap, but the value
loss also moves the policy's features) or a separate copy (twice the memory, no interference).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .model import GPT
from .sampling import Rollout


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
    ids, key_mask, positions = rollout.sequences()
    P = rollout.prompt_tokens.size(1)
    hidden = trunk.hidden_states(ids[:, :-1], positions=positions[:, :-1], key_mask=key_mask[:, :-1])  # (B, P+T-1, C)
    values = head(hidden[:, P - 1 :])  # position P-1+t holds the prefix before token t
    return values * rollout.mask
