"""Importance weights for tokens the learner did not sample itself.

Two things make the policy that wrote a batch (the *behaviour* policy mu) differ from the one
being trained (pi): rollouts sampled one or more updates ago (an asynchronous pipeline, or several
inner steps), and a sampler that is not the learner (another engine, top-k, a temperature). The
policy gradient is an expectation under pi; samples from mu need the weight pi/mu, and engines
use one of four bounded versions of it (the four modes of TRL's `vllm_importance_sampling_mode`):

    token_truncate     w_t = min(rho_t, C)                      rho_t = pi(a_t|s_t) / mu(a_t|s_t)
    token_mask         w_t = rho_t if rho_t <= C else 0
    sequence_truncate  w_t = min(prod_t rho_t, C)               one weight for every token of a row
    sequence_mask      w_t = prod_t rho_t if it is <= C else 0

Only the full product prod_t rho_t = pi(y|x)/mu(y|x) makes a completion's term R(y) grad log pi(y)
unbiased; a per-token ratio corrects the choice of a_t alone, and ignores that mu also wrote the
prefix before it and the continuation after it, which sets R (Yao et al., 2025, use truncated
token weights for the sampler-learner gap). The cap C >= 1 trades that bias for variance: a weight
of 1 is what an on-policy token gets, so a cap below 1 would shrink tokens that need no correction
at all, and is refused.

GSPO (Zheng et al., 2025) uses another sequence ratio, the geometric mean of the token ratios,
exp(mean_t log rho_t): `geometric_sequence_ratio`. It is not an importance weight (its expectation
under mu is not that of pi's) but a length-independent scale for the clip.
"""
from __future__ import annotations

import torch

from . import validate
from .ops import check_float, check_log_probs, check_mask, masked_mean, masked_sum, zero_padding

__all__ = ["CORRECTIONS", "log_ratios", "importance_weights", "geometric_sequence_ratio"]

CORRECTIONS = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _checked(logprobs, behaviour_logprobs, mask, other: str = "behaviour_logprobs") -> torch.Tensor:
    """The mask as bool, after checking both log-prob tensors are floating point, of one shape, with
    a 0/1 mask of that shape, and finite on every real (mask = 1) token; padding may hold anything."""
    for name, x in (("logprobs", logprobs), (other, behaviour_logprobs)):
        check_float(name, x)
        if x.shape != logprobs.shape:
            raise ValueError(f"{name} shape {tuple(x.shape)} does not match logprobs shape {tuple(logprobs.shape)}")
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor of 0/1 (or bool) of logprobs' shape {tuple(logprobs.shape)}, "
                        f"got {type(mask).__name__}")
    if mask.shape != logprobs.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match logprobs shape {tuple(logprobs.shape)}")
    m = check_mask(logprobs, mask).bool()
    for name, x in (("logprobs", logprobs), (other, behaviour_logprobs)):
        if not bool(torch.isfinite(x.detach()).logical_or(~m).all()):
            raise ValueError(f"{name} hold NaN or inf on real (mask = 1) tokens; every sampled token needs a finite "
                             "log-prob (padding, mask = 0, may hold anything)")
    return m


def log_ratios(logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log rho_t = log pi(a_t|s_t) - log mu(a_t|s_t) per token, (B, T), 0 on padding (NaN or inf
    there never leaks). Both finite on the real tokens (checked)."""
    return _difference(logprobs, behaviour_logprobs, _checked(logprobs, behaviour_logprobs, mask))


def _difference(logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return torch.where(m, logprobs, torch.zeros_like(logprobs)) - torch.where(m, behaviour_logprobs,
                                                                               torch.zeros_like(behaviour_logprobs))


def importance_weights(logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, mode: str,
                       cap: float = 2.0) -> torch.Tensor:
    """Per-token weights (B, T) for a loss on tokens sampled from mu, by one of `CORRECTIONS`,
    detached (a weight, not a path for the gradient); 0 on padding.

    logprobs: log pi of the sampled tokens (the learner now); behaviour_logprobs: log mu (the
    policy or sampler that drew them); each finite on the real tokens, and not all in [0, 1] there
    (checked: that is what probabilities passed for their logs look like; made-up log-ratios above 0,
    as a lesson's examples use, are fine). cap: C, at least 1 (inf: the plain ratio, unbounded)."""
    validate.choice("mode", mode, CORRECTIONS)
    cap = validate.number("cap", cap, 0.0, open_low=True, finite=False)
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap:g}: an on-policy token's weight is 1, and a cap below 1 would "
                         "shrink tokens that need no correction")
    m = _checked(logprobs, behaviour_logprobs, mask)
    for name, x in (("logprobs", logprobs), ("behaviour_logprobs", behaviour_logprobs)):
        check_log_probs(name, x.detach()[m])  # the real tokens' values
    if mode.startswith("sequence") and logprobs.dim() != 2:
        raise ValueError(f"mode {mode!r} weighs whole rows: logprobs must be (B, T), one row a completion, got shape "
                         f"{tuple(logprobs.shape)}")
    log_rho = _difference(logprobs, behaviour_logprobs, m).detach()  # (B, T)
    if mode.startswith("sequence"):
        log_rho = masked_sum(log_rho, m, dim=1)[:, None].expand_as(log_rho)  # log pi(y|x) - log mu(y|x) on every token
    rho = log_rho.exp()
    if mode.endswith("truncate"):
        weights = rho.clamp(max=cap)
    else:
        weights = torch.where(rho <= cap, rho, torch.zeros_like(rho))
    return zero_padding(weights, m)


def geometric_sequence_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's ratio s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|) = exp(mean_t log rho_t), (B,), with
    the gradient of `logprobs` (old_logprobs are constants): d s_i = s_i * mean_t d log pi(a_t|s_t)."""
    m = _checked(logprobs, old_logprobs, mask, "old_logprobs")
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be (B, T), one row a completion, got shape {tuple(logprobs.shape)}")
    if bool((~m.any(dim=1)).any()):
        raise ValueError("a row of mask is all zeros: every completion needs at least one token (EOS counts)")
    return masked_mean(_difference(logprobs, old_logprobs.detach(), m), m, dim=1).exp()
