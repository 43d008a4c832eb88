"""Returns, advantages and baselines over completion tokens.

Conventions (docs/conventions.md): tensors are (B, T) over generated positions; `mask` is 1 on generated
tokens up to and including EOS, 0 on the padding after it. `rewards[:, t]` is the reward for
choosing token t; `values[:, t]` is V of the prefix *before* token t (the state in which token t
is chosen). An episode ends at its last action token, whether that is EOS or the token that hit
the length limit K: K is part of the MDP, so nothing is bootstrapped past it. (Bootstrapping
would be needed if the limit were a time limit outside the MDP, or if a rollout were cut into
chunks: then the return at the cut continues with V of the next state.)
"""
from __future__ import annotations

import torch

from . import validate
from .ops import check_float, check_mask, zero_padding

__all__ = ["reward_to_go", "turn_returns", "gae", "prompt_mean_baseline", "group_normalize", "leave_one_out",
           "process_advantages"]


def _check(rewards: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float = 1.0) -> torch.Tensor:
    """The mask as rewards' dtype, after checking rewards (B, T), the mask (0/1, 1s then 0s, no
    empty row) and the discounts."""
    check_float("rewards", rewards)
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (B, T), got shape {tuple(rewards.shape)}")
    m = check_mask(rewards, mask)
    validate.number("gamma", gamma, 0.0, 1.0)
    validate.number("lam", lam, 0.0, 1.0)
    if bool((m.sum(dim=1) == 0).any()):
        raise ValueError("a row of mask is all zeros: every completion needs at least one token (EOS counts)")
    if bool((m[:, 1:] > m[:, :-1]).any()):
        raise ValueError("each row of mask must be 1s then 0s (the completion, then padding); a 0 followed by a 1 "
                         "would make returns skip a hole")
    return m


def reward_to_go(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """G_t = sum_{t' >= t} gamma^(t'-t) r_t' over each row's own tokens: (B, T) -> (B, T), 0 on padding."""
    m = _check(rewards, mask, gamma)
    r = zero_padding(rewards, m)
    out = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in reversed(range(r.size(1))):  # padding contributes 0, so a row ends where its mask ends
        running = r[:, t] + gamma * running
        out[:, t] = running
    return out * m


def turn_returns(rewards: torch.Tensor, turns: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """The return from each turn of multi-turn episodes: (B, T) per-token rewards and (B, T) the
    turn of each token (`minirl.lm.multiturn.turns`: 0, 1, ..., -1 after EOS) -> (B, K), K the most
    turns of a row. A turn's reward R_k is the sum of its tokens' rewards; G_k = sum_{j >= k}
    gamma^(j-k) R_j, discounted per turn, not per token; 0 past a row's last turn."""
    check_float("rewards", rewards)
    if turns.shape != rewards.shape or turns.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"turns must be an integer tensor of rewards' shape {tuple(rewards.shape)}, the turn of each "
                         f"token (minirl.lm.multiturn.turns); got {turns.dtype} {tuple(turns.shape)}")
    if bool((turns < -1).any()) or bool((turns.max(dim=1).values < 0).any()):
        raise ValueError("turns must be >= 0 on each row's tokens and -1 on its padding, with at least one token a row")
    K = int(turns.max()) + 1
    real = turns >= 0  # (B, T)
    per_turn = torch.zeros(rewards.size(0), K, dtype=rewards.dtype, device=rewards.device)
    per_turn.scatter_add_(1, turns.clamp(min=0), torch.where(real, rewards, torch.zeros_like(rewards)))  # (B, K) R_k
    turn_mask = (torch.arange(K, device=rewards.device) <= turns.max(dim=1, keepdim=True).values).to(rewards.dtype)
    return reward_to_go(per_turn, turn_mask, gamma)


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95):
    """Generalized advantage estimation (Schulman et al., 2016): returns (advantages, returns), each (B, T).

        delta_t = r_t + gamma * V_{t+1} - V_t        with V_{t+1} = 0 after the last action token
        A_t     = delta_t + gamma * lam * A_{t+1}    (TD(lambda) on the advantage)
        returns = A + V                              (the critic's regression target)

    lam = 1 gives the Monte Carlo advantage G_t - V_t; lam = 0 the one-step TD error. Entries on
    padding are 0 in both outputs.
    """
    m = _check(rewards, mask, gamma, lam)
    if check_float("values", values).shape != rewards.shape:
        raise ValueError(f"values shape {tuple(values.shape)} does not match rewards shape {tuple(rewards.shape)}")
    rewards, values = zero_padding(rewards, m), zero_padding(values, m)
    next_v = torch.zeros_like(values)
    next_v[:, :-1] = values[:, 1:]  # V of the next state: 0 (padding) after each row's last action token
    delta = zero_padding(rewards + gamma * next_v - values, m)
    adv = torch.zeros_like(delta)
    running = torch.zeros_like(delta[:, 0])
    for t in reversed(range(delta.size(1))):  # padding has delta 0, so each row starts at its own end
        running = delta[:, t] + gamma * lam * running
        adv[:, t] = running
    adv = adv * m
    return adv, (adv + values) * m


def prompt_mean_baseline(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """The per-prompt mean baseline: each completion's baseline is the mean return of its group
    (B,) -> (B,). Groups are consecutive blocks of `group_size` rows, as `minirl.sample` orders them.

    The baseline includes the completion's own return, so it is not independent of the sample:
    the expected gradient is scaled by (G-1)/G (its direction is unchanged); the leave-one-out
    baseline of lesson 06 removes that.
    """
    check_float("returns", returns)
    validate.integer("group_size", group_size, minimum=2)  # a group of one is its own baseline: advantage 0
    if returns.dim() != 1:
        raise ValueError(f"returns must be (B,), got shape {tuple(returns.shape)}")
    if returns.numel() % group_size:
        raise ValueError(f"group_size {group_size} does not divide the batch size {returns.numel()}")
    return returns.view(-1, group_size).mean(dim=1).repeat_interleave(group_size)


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B,) -> (B // G, G), checking the grouping makes sense."""
    if not isinstance(rewards, torch.Tensor):
        raise TypeError(f"rewards must be a torch.Tensor of shape (B,), got {type(rewards).__name__}: pass "
                        "torch.tensor(rewards, dtype=torch.float32), each group's group_size rewards one after "
                        "another (from a list of groups, one list per prompt: add .flatten())")
    check_float("rewards", rewards)
    validate.integer("group_size", group_size)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be (B,), got shape {tuple(rewards.shape)}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards hold NaN or inf; a group's advantages would all turn NaN")
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2 to compare completions within a group, got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"group_size {group_size} does not divide the batch size {rewards.numel()}")
    return rewards.view(-1, group_size)


def group_normalize(rewards: torch.Tensor, group_size: int, eps: float = 1e-4, scale: bool = True) -> torch.Tensor:
    """GRPO's advantages: (r - group mean) / (group std + eps), groups being consecutive blocks of
    `group_size` rows; the std is the sample (N-1) std, as TRL and the GRPO papers' code use.

    scale=False gives r - group mean only (Dr. GRPO; REINFORCE with a group baseline). A group whose
    rewards are all equal gets advantage 0 (never NaN): it carries no learning signal.
    """
    g = _groups(rewards, group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale:
        validate.number("eps", eps, 0.0, open_low=True)  # > 0: a group of equal rewards gives 0 / eps = 0
        centred = centred / (g.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def leave_one_out(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO's advantages: r_i minus the mean of the *other* G-1 rewards of its group.

    The baseline no longer contains r_i, so the gradient estimate is unbiased (compare
    `prompt_mean_baseline`); it equals G/(G-1) * (r_i - group mean).
    """
    g = _groups(rewards, group_size)
    others = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - others).reshape(-1)


def process_advantages(rewards: torch.Tensor, ends: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """GRPO with process supervision (Shao et al., 2024, section 4.1.3): rewards (B, T) hold each
    step's reward on the step's last token, where ends (B, T) is True. Each step reward is
    normalized by the mean and (sample) std of every step reward in its group (the group_size
    completions of a prompt, consecutive rows); a token's advantage is the sum of the normalized
    rewards of its completion's steps that end at or after it. (B, T) -> (B, T); 0 after a row's
    last step, and on every token of a group with fewer than two steps or all step rewards equal.
    """
    check_float("rewards", rewards)
    if rewards.dim() != 2 or ends.shape != rewards.shape or ends.dtype != torch.bool:
        raise ValueError(f"rewards must be (B, T) and ends a bool tensor of the same shape, got {tuple(rewards.shape)} "
                         f"and {tuple(ends.shape)} {ends.dtype}")
    validate.number("eps", eps, 0.0, open_low=True)
    _groups(rewards[:, 0], group_size)  # checks the grouping
    if not bool(torch.isfinite(rewards[ends]).all()):
        raise ValueError("a step reward is NaN or inf; its group's advantages would all turn NaN")
    B, T = rewards.shape
    r, e = rewards.reshape(-1, group_size * T), ends.reshape(-1, group_size * T).to(rewards.dtype)  # (B/G, G*T)
    n = e.sum(dim=1, keepdim=True)  # steps per group
    mean = (r * e).sum(dim=1, keepdim=True) / n.clamp(min=1)
    std = (((r - mean) * e) ** 2).sum(dim=1, keepdim=True).div((n - 1).clamp(min=1)).sqrt()
    normalized = torch.where(n > 1, (r - mean) / (std + eps), torch.zeros_like(r)) * e  # (B/G, G*T)
    return normalized.reshape(B, T).flip(1).cumsum(1).flip(1)  # the steps at or after each token
