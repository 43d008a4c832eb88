"""Masked reductions and per-token log-probabilities: the small tensor functions every loss uses.

Conventions: `mask` has the shape of `x` and holds 0/1 (float or bool); a reduction over a slice
whose mask is all zero returns NaN, like the mean of an empty tensor. Losses built on these
raise a clear error on all-masked rows instead (they know what a row means; these don't).

Whatever sits on a masked-out (padding) position, inf and NaN included, never reaches a result
or its gradient: `zero_padding` replaces it with 0 *before* any arithmetic. Multiplying by the
mask afterwards is not enough: inf * 0 is NaN, and so is the gradient 0 * NaN.
"""
from __future__ import annotations

import torch

from . import validate

__all__ = ["check_mask", "check_float", "check_finite", "check_log_probs", "zero_padding", "masked_sum", "masked_mean",
           "sequence_logprob", "masked_var", "masked_whiten", "token_logprobs", "entropy_from_logits"]


def check_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`mask` as x's dtype, after checking it has x's shape and holds only 0 and 1."""
    if not isinstance(x, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise TypeError(f"x and mask must be torch.Tensors, got {type(x).__name__} and {type(mask).__name__}")
    if mask.shape != x.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match x shape {tuple(x.shape)}")
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0 and 1 (got other values); pass a 0/1 or boolean mask")
    return mask.to(x.dtype)


def check_float(name: str, x: torch.Tensor) -> torch.Tensor:
    """`x` after checking it is a floating-point tensor (integer rewards would silently truncate)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}; convert it with {name}.float()")
    return x


def check_finite(name: str, x: torch.Tensor, what: str = "") -> torch.Tensor:
    """`x` (a float tensor) after checking it holds no NaN or inf, naming the first; `what` adds to the message."""
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        first = tuple(bad.nonzero()[0].tolist())
        raise ValueError(f"{name} must be finite{what}, got {int(bad.sum())} NaN or inf entries (the first, "
                         f"{x[first].item()}, at index {first})")
    return x


def check_log_probs(name: str, x: torch.Tensor) -> torch.Tensor:
    """`x` after checking it does not hold probabilities where log-probabilities go: every entry in [0, 1]
    and one above 0 is what probabilities look like, and log-probabilities are never above 0."""
    if x.numel() and bool(((x >= 0) & (x <= 1)).all()) and bool((x > 0).any()):
        raise ValueError(f"{name} holds values in [0, 1], as probabilities do; it takes log-probabilities "
                         f"(never above 0): pass {name}.log()")
    return x


def zero_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x with every masked-out entry replaced by 0, so padding (inf and NaN included) reaches
    neither a result nor a gradient. mask: a 0/1 tensor of x's shape (checked)."""
    return torch.where(check_mask(x, mask).bool(), x, torch.zeros_like(x))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * mask) over `dim` (all elements if None). Masked-out entries never contribute,
    even when they are inf or NaN."""
    x = zero_padding(x, mask)
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * mask) / sum(mask) over `dim` (all elements if None); NaN where sum(mask) == 0."""
    m = check_mask(x, mask)
    count = m.sum() if dim is None else m.sum(dim)
    return masked_sum(x, mask, dim) / count  # 0 / 0 = NaN for an all-masked slice


def sequence_logprob(logprobs: torch.Tensor, mask: torch.Tensor, average: bool = False) -> torch.Tensor:
    """(B,) log pi(y | x) of whole responses from per-token log-probs (B, T) and their 0/1 mask: the
    sum over each row's tokens (the sequence's log-probability, what DPO's derivation uses), or with
    `average` the per-token mean (the length-normalized score of SimPO and TRL's IPO)."""
    return masked_mean(logprobs, mask, dim=1) if average else masked_sum(logprobs, mask, dim=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries of x (all dims); with `unbiased`, divides by count - 1, so
    one entry gives NaN (0 / 0), as no entry does for the mean."""
    x = zero_padding(x, mask)
    mean = masked_mean(x, mask)
    count = check_mask(x, mask).sum()
    var = masked_sum((x - mean) ** 2, mask)
    return var / (count - 1) if unbiased else var / count


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the masked entries (unbiased variance); masked-out
    entries are returned as 0. With `shift_mean=False` the mean is added back (scale only).

    Needs at least two unmasked entries (the unbiased variance of one value is undefined).
    """
    m = check_mask(x, mask)
    if m.sum() < 2:
        raise ValueError("masked_whiten needs at least two unmasked entries")
    x = zero_padding(x, mask)
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    white = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        white = white + mean
    return torch.where(m.bool(), white, torch.zeros_like(white))


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token]: logits (..., V), tokens (...) -> (...). Stable for large logits."""
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} need shape tokens.shape + (V,); tokens are {tuple(tokens.shape)}")
    validate.token_ids("tokens", tokens, logits.size(-1))
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy -sum p log p of softmax(logits) over the last dim: (..., V) -> (...).

    Written as logsumexp(z) - sum(p z), which stays finite, with a finite gradient, when some
    logits are -inf (top-k masking) or huge: where p = 0 the logit is replaced by 0 *before* the
    product, since 0 * -inf is NaN and so is its gradient.
    """
    z = logits.float()
    p = torch.softmax(z, dim=-1)
    z_seen = torch.where(p > 0, z, torch.zeros_like(z))
    return torch.logsumexp(z, dim=-1) - (p * z_seen).sum(dim=-1)
