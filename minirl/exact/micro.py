"""The micro world: a language small enough to enumerate every completion.

Two prompts, three tokens plus EOS, horizon K = 3. A completion ends at EOS or when it reaches K
tokens (truncation is part of the MDP, so a truncated completion is scored like any other).
Rewards arrive both per step and at the end:

    r_t = STEP_REWARD[prompt][token]                       (each token, EOS scores 0)
    R_K = GOAL_REWARD if the completion ended by EOS and contains the prompt's goal token

Every completion's return is the sum of its step rewards plus the terminal reward, so
J(theta), exact values and the exact policy gradient are finite sums (`minirl.exact.mdp`).
"""
from __future__ import annotations

import itertools

__all__ = ["TOKENS", "EOS", "ACTIONS", "HORIZON", "PROMPTS", "STEP_REWARD", "GOAL", "GOAL_REWARD", "completions",
           "step_rewards", "terminal_reward", "total_reward"]

TOKENS = ("a", "b", "c")
EOS = "<eos>"
ACTIONS = TOKENS + (EOS,)
HORIZON = 3
PROMPTS = ("x", "y")
STEP_REWARD = {
    "x": {"a": 0.3, "b": 0.0, "c": -0.2, EOS: 0.0},
    "y": {"a": -0.2, "b": 0.0, "c": 0.3, EOS: 0.0},
}
GOAL = {"x": "b", "y": "a"}
GOAL_REWARD = 1.0


def completions(horizon: int = HORIZON) -> list[tuple[str, ...]]:
    """Every completion: token strings ending in EOS (length <= horizon), or `horizon` tokens without EOS."""
    ended = [seq + (EOS,) for n in range(horizon) for seq in itertools.product(TOKENS, repeat=n)]
    truncated = list(itertools.product(TOKENS, repeat=horizon))
    return ended + truncated


def step_rewards(prompt: str, completion: tuple[str, ...]) -> list[float]:
    """Per-step rewards, with the terminal reward added at the last action."""
    rewards = [STEP_REWARD[prompt][a] for a in completion]
    rewards[-1] += terminal_reward(prompt, completion)
    return rewards


def terminal_reward(prompt: str, completion: tuple[str, ...]) -> float:
    ended = completion[-1] == EOS
    return GOAL_REWARD if ended and GOAL[prompt] in completion else 0.0


def total_reward(prompt: str, completion: tuple[str, ...]) -> float:
    """The return (undiscounted) of one completion."""
    return sum(step_rewards(prompt, completion))
