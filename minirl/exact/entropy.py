"""How a policy-gradient step changes each state's entropy, exactly on the micro world.

For a softmax policy pi(.|s) = softmax(z_s) with entropy H(s) = -sum_a pi(a|s) log pi(a|s), a change
dz of the logits moves the entropy by

    dH(s) = -Cov_{a ~ pi(.|s)}( log pi(a|s), dz(s, a) ) + O(|dz|^2)

(dH/dz_b = -pi_b (log pi_b + H)). An exact policy-gradient step on the tabular logits is
dz = lr * grad J, and the policy-gradient theorem in tabular form gives grad J(s, a) =
d(s) pi(a|s) A(s, a), d(s) the probability an episode visits s. So

    dH(s) ~ -lr d(s) Cov( log pi(a|s), pi(a|s) A(s, a) ):

entropy falls at a state where the actions the policy already favours have positive advantage,
and rises where a disfavoured action does (Cui et al., 2025, derive this covariance for softmax
policies). Here both sides are exact: the prediction from the covariance, the measurement from the
entropies before and after one exact step.
"""
from __future__ import annotations

import torch

from ..core import validate
from ..core.losses import clipped_objective
from ..core.ops import check_finite, check_float
from .group_updates import _check_policy
from .imitation import state_visitation
from .mdp import MicroMDP

__all__ = ["state_entropy", "first_order_entropy_change", "advantages", "entropy_covariance",
           "policy_gradient_entropy_change", "completion_entropy", "clipped_policy_iteration"]


def _check_rows(logits: torch.Tensor) -> None:
    """Logits (..., n_actions), a distribution per row: a float tensor with at least one action, no NaN
    or +inf, and some action with a finite logit in every row (-inf: an action never taken)."""
    check_float("logits", logits)
    if logits.dim() == 0 or logits.size(-1) == 0:
        raise ValueError(f"logits must have one entry per action in its last dimension, got shape "
                         f"{tuple(logits.shape)}")
    bad = torch.isnan(logits) | (logits == torch.inf)
    if bool(bad.any()):
        raise ValueError(f"logits hold {int(bad.sum())} NaN or +inf entries (the first at index "
                         f"{tuple(bad.nonzero()[0].tolist())}); logits are finite, or -inf for an action never taken")
    dead = (logits == -torch.inf).all(dim=-1)
    if bool(dead.any()):
        raise ValueError(f"logits are -inf for every action in {int(dead.sum())} rows (the first at index "
                         f"{tuple(dead.nonzero()[0].tolist())}); each row needs at least one finite logit")


def _log_probs(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pi, log pi) per row, with log pi set to 0 where pi is 0 (a -inf logit), so that pi log pi is 0
    there (its limit), as torch's Categorical takes it, and no 0 * -inf makes a NaN."""
    logp = torch.log_softmax(logits, dim=-1)
    pi = logp.exp()
    return pi, logp.masked_fill(pi == 0, 0.0)


def state_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H(pi(.|s)) for every row of a tabular policy's logits (n_states, n_actions) -> (n_states,).
    A -inf logit (an action never taken) contributes 0 (the limit of p log p)."""
    _check_rows(logits)
    pi, logp = _log_probs(logits)
    return -(pi * logp).sum(-1)


def first_order_entropy_change(logits: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """-Cov_{a~pi(.|s)}(log pi(a|s), delta(s, a)) per state (n_states,): the change of each state's
    entropy when the logits move by delta (n_states, n_actions), to first order in delta."""
    _check_rows(logits)
    check_float("delta", delta)
    if delta.shape != logits.shape:
        raise ValueError(f"delta shape {tuple(delta.shape)} does not match logits shape {tuple(logits.shape)}")
    check_finite("delta", delta)
    pi, logp = _log_probs(logits)
    mean_logp, mean_delta = (pi * logp).sum(-1, keepdim=True), (pi * delta).sum(-1, keepdim=True)
    return -(pi * (logp - mean_logp) * (delta - mean_delta)).sum(-1)


def advantages(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """A(s, a) = Q(s, a) - V(s) of the policy, exactly (n_states, n_actions)."""
    _check_policy(mdp, logits, minus_inf=True)
    return mdp.q_values(logits) - mdp.values(logits)[:, None]


def entropy_covariance(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """Cov_{a~pi(.|s)}(log pi(a|s), pi(a|s) A(s, a)) per state (n_states,): the entropy of state s
    changes by about -lr d(s) times this under an exact policy-gradient step of size lr."""
    _check_policy(mdp, logits, minus_inf=True)
    pi = torch.softmax(logits.detach().double(), dim=-1)
    return -first_order_entropy_change(logits.detach().double(), pi * advantages(mdp, logits))


def policy_gradient_entropy_change(mdp: MicroMDP, logits: torch.Tensor, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(predicted, measured) change of each state's entropy (n_states,) under one exact policy-gradient
    step logits + lr * grad J: predicted -lr d(s) Cov(log pi, pi A), measured H(after) - H(before)."""
    validate.number("lr", lr, 0.0, open_low=True)
    _check_policy(mdp, logits)
    theta = logits.detach().double()
    predicted = -lr * state_visitation(mdp, theta) * entropy_covariance(mdp, theta)
    measured = state_entropy(theta + lr * mdp.exact_gradient(theta)) - state_entropy(theta)
    return predicted, measured


def completion_entropy(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """The entropy of whole completions, mean over prompts (nats). A completion of probability 0
    (through a -inf logit) contributes 0."""
    _check_policy(mdp, logits, minus_inf=True)
    per_prompt = [mdp.completion_probs(logits, p) for p in mdp.prompts]
    return torch.stack([-(q * torch.where(q > 0, q, 1.0).log()).sum() for q in per_prompt]).mean()


def clipped_policy_iteration(mdp: MicroMDP, logits: torch.Tensor, clip_eps: float = 0.2,
                             clip_eps_high: float | None = None, inner_steps: int = 8, lr: float = 1.0) -> torch.Tensor:
    """One round of PPO's clipped objective in expectation, with the old policy's exact advantages:
    `inner_steps` gradient-ascent steps of size lr on

        L(theta) = sum_s d_old(s) sum_a pi_old(a|s) min(rho A_old, clip(rho, 1 - eps, 1 + eps_high) A_old),

    rho = pi_theta(a|s) / pi_old(a|s) (`minirl.core.losses.clipped_objective`). No sampling: every
    state and action enters with its probability, so the clip acts as a trust region only. Returns
    the new logits (n_states, n_actions). At theta = theta_old the gradient of L is grad J."""
    _check_policy(mdp, logits)
    validate.number("clip_eps", clip_eps, 0.0, finite=False)
    if clip_eps_high is not None:
        validate.number("clip_eps_high", clip_eps_high, 0.0, finite=False)
    validate.integer("inner_steps", inner_steps)
    validate.number("lr", lr, 0.0, open_low=True)
    old = logits.detach().double()
    d, a, pi_old = state_visitation(mdp, old), advantages(mdp, old), torch.softmax(old, -1)
    theta = old.clone()
    for _ in range(inner_steps):
        theta.requires_grad_(True)
        rho = torch.softmax(theta, -1) / pi_old
        objective = (d[:, None] * pi_old * clipped_objective(rho, a, clip_eps, clip_eps_high)).sum()
        grad, = torch.autograd.grad(objective, theta)
        theta = (theta + lr * grad).detach()
    return theta
