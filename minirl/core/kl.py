"""Per-token estimators of KL(p || q), with p = pi_theta (the sampling policy) and q = pi_ref.

Each takes the log-probabilities of the *sampled* tokens under both policies, (B, T) or any
shape, and returns one estimate per token (Schulman, "Approximating KL Divergence", 2020):

    k1 = log(p/q)                      unbiased for KL(p||q); can be negative on a single token
    k2 = 0.5 * log(p/q)^2              biased (close to KL when p and q are close); never negative
    k3 = q/p - 1 - log(q/p)            unbiased for KL(p||q), never negative, lower variance than k1

Summed over a completion's tokens, k1 and k3 stay unbiased for the sequence-level KL(p||q) (the
chain rule of KL). As *losses*, with the samples held fixed, their expected gradients differ: at
one state, k1's is zero, k2's is the gradient of KL(p||q), and k3's is the gradient of KL(q||p).
Applied per token inside a sequence, the k2 and k3 gradients hold each state's distribution fixed,
so they are gradients of the per-state KLs summed along the visited states, not of the
sequence-level KL (tests/test_kl.py measures both).
"""
from __future__ import annotations

import torch

from .ops import check_float, check_log_probs

__all__ = ["kl_k1", "kl_k2", "kl_k3"]


def _log_ratio(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """log p - log q, after checking both are float tensors of one shape that do not look like probabilities.
    (The losses, whose inputs are checked there and may be made-up log-ratios in tests, call `_k3`.)"""
    check_log_probs("logp", check_float("logp", logp))
    check_log_probs("ref_logp", check_float("ref_logp", ref_logp))
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp shape {tuple(logp.shape)} does not match ref_logp shape {tuple(ref_logp.shape)}")
    return logp - ref_logp


def _k3(log_p_over_q: torch.Tensor) -> torch.Tensor:
    """k3 from log p - log q: q/p - 1 - log(q/p)."""
    return torch.exp(-log_p_over_q) - 1 + log_p_over_q


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """log p(a) - log q(a), per sampled token."""
    return _log_ratio(logp, ref_logp)


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """0.5 * (log p(a) - log q(a))^2, per sampled token."""
    return 0.5 * _log_ratio(logp, ref_logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """q(a)/p(a) - 1 - log(q(a)/p(a)), per sampled token (GRPO's KL term)."""
    return _k3(_log_ratio(logp, ref_logp))
