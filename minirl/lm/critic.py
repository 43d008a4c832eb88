"""The critic: a scalar value head on a GPT trunk.

`values[:, t]` is V of the prefix *before* completion token t: the state in which token t is
chosen. The value head reads `sampling.completion_hidden`, the same hidden states whose logits
chose each token. An off-by-one here, reading the state *after* token t, silently turns V(s_t)
into something closer to Q(s_t, a_t): the classic PPO bug (tested against exact V on the micro
world).

The trunk can be the policy itself (a value head on the policy's trunk: cheap, but the value
loss also moves the policy's features) or a separate copy (twice the memory, no interference).
A separate critic can start from the policy (`make_critic`, value 0 everywhere) or from the
reward model (`from_reward_model`: InstructGPT's choice, and "use reward model to init the critic"
in Hao Sun's slides "Reinforcement Learning in the Era of LLMs", Cambridge 2023): then it starts
out predicting the reward model's score of each prefix, as if the completion ended there.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from .model import GPT
from .sampling import Rollout, completion_hidden

__all__ = ["ValueHead", "completion_values", "make_critic", "from_reward_model"]


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


@torch.no_grad()
def from_reward_model(rm) -> tuple[GPT, ValueHead]:
    """A critic initialized from a reward model (`minirl.lm.reward_head.RewardModel`): a trainable copy
    of its trunk, and a value head computing its *normalized* score, (w . h - mean) / std, the
    units the policy is trained in. At the state before token t it reads the prefix's last token,
    where the reward model reads a finished completion's EOS: so V(s_t) starts as the reward
    model's opinion of the text so far."""
    trunk = copy.deepcopy(rm.transformer).train().requires_grad_(True)
    head = ValueHead(trunk.config.n_embd).to(rm.score.weight.device)
    std, mean = rm.reward_std.to(head.v.weight.dtype), rm.reward_mean.to(head.v.weight.dtype)
    head.v.weight.copy_(rm.score.weight / std)
    head.v.bias.copy_(-mean / std)
    return trunk, head
