"""Losses whose gradients are the estimators of the course.

A *surrogate* loss is built so that its gradient is the estimator we want; its value means
nothing (it is not J, and it can go up while the policy gets better). Every loss takes
completion-only (B, T) tensors with a 0/1 `mask` (COURSE.md conventions) and raises a clear error
on a row whose mask is all zero.

Aggregation over tokens is explicit and named, because it changes what is estimated:

    sequence_sum   sum over a row's tokens, mean over rows: (1/B) sum_i sum_t x_it. With x = A_t *
                   log pi(a_t|s_t) this is exactly the policy-gradient estimator.
    sequence_mean  token mean within each row, then mean over rows (the GRPO paper): long
                   completions get less weight per token.
    token_mean     one mean over every token of the batch (DAPO): long completions weigh more.
    constant       sum over all tokens divided by B * max_len (Dr. GRPO), a constant that does
                   not depend on the lengths sampled.
"""
from __future__ import annotations

import torch

from .ops import check_mask, masked_mean, masked_sum, token_logprobs

AGGREGATIONS = ("sequence_sum", "sequence_mean", "token_mean", "constant")


def _rows_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"expected a (B, T) tensor, got shape {tuple(x.shape)}")
    m = check_mask(x, mask)
    if bool((m.sum(dim=1) == 0).any()):
        raise ValueError("a row of mask is all zeros: every completion needs at least one token (EOS counts)")
    return m


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str, max_len: int | None = None) -> torch.Tensor:
    """Reduce per-token values x (B, T) to a scalar by one of `AGGREGATIONS`.

    max_len: the constant of mode 'constant' (default T, the width of the batch).
    """
    m = _rows_mask(x, mask)
    if mode == "sequence_sum":
        return masked_sum(x, m, dim=1).mean()
    if mode == "sequence_mean":
        return masked_mean(x, m, dim=1).mean()
    if mode == "token_mean":
        return masked_mean(x, m)
    if mode == "constant":
        return masked_sum(x, m) / (x.size(0) * (max_len or x.size(1)))
    raise ValueError(f"unknown aggregation {mode!r}; choose one of {AGGREGATIONS}")


def policy_gradient_loss(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                         aggregation: str = "sequence_sum") -> torch.Tensor:
    """Surrogate -aggregate(A_t * log pi(a_t|s_t)), whose gradient is the policy-gradient estimator.

    logprobs: (B, T) log-probs of the sampled tokens under the current policy (with gradient).
    advantages: (B, T) per token, or (B,) one per completion (broadcast to its tokens); treated
    as constants (detached). With aggregation 'sequence_sum' the gradient is exactly
    -(1/B) sum_i sum_t A_it grad log pi(a_it | s_it).
    """
    return -aggregate(_same_shapes(logprobs, advantages) * logprobs, mask, aggregation)


def _same_shapes(logprobs: torch.Tensor, advantages: torch.Tensor, **others: torch.Tensor) -> torch.Tensor:
    """Broadcast (B,) advantages to (B, T) and check every per-token input has logprobs' shape."""
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    for name, x in {"advantages": advantages, **others}.items():
        if x.shape != logprobs.shape:
            raise ValueError(f"{name} shape {tuple(x.shape)} does not match logprobs shape {tuple(logprobs.shape)}")
    return advantages.detach()


def clipped_objective(log_ratio: torch.Tensor, advantages: torch.Tensor, clip_eps: float,
                      clip_eps_high: float | None = None) -> torch.Tensor:
    """min(ratio A, clip(ratio, 1 - eps, 1 + eps_high) A) per token, ratio = exp(log_ratio).

    The ratio is always positive; the advantage carries the sign. With A > 0 the objective stops
    rewarding a ratio above 1 + eps_high; with A < 0, a ratio below 1 - eps. eps_high defaults to
    eps (PPO); a larger one is DAPO's "clip-higher".
    """
    ratio = log_ratio.exp()
    high = clip_eps if clip_eps_high is None else clip_eps_high
    return torch.minimum(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + high) * advantages)


def _clip_fraction(log_ratio: torch.Tensor, mask: torch.Tensor, clip_eps: float, clip_eps_high: float | None) -> float:
    ratio = log_ratio.detach().exp()
    high = clip_eps if clip_eps_high is None else clip_eps_high
    return masked_mean(((ratio < 1 - clip_eps) | (ratio > 1 + high)).to(ratio.dtype), mask).item()


def ppo_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  clip_eps: float = 0.2, aggregation: str = "token_mean") -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate (Schulman et al., 2017), per token, and its diagnostics.

        ratio_t = pi_theta(a_t|s_t) / pi_old(a_t|s_t)      pi_old: the policy that *collected* the batch
        loss    = -aggregate(min(ratio_t A_t, clip(ratio_t, 1 - eps, 1 + eps) A_t))

    Returns (loss, diagnostics): `clip_fraction` (share of tokens whose ratio lies outside
    [1 - eps, 1 + eps]) and `approx_kl` (the k3 estimate of KL(pi_old || pi_theta) on the batch's
    tokens).
    """
    advantages = _same_shapes(logprobs, advantages, old_logprobs=old_logprobs)
    log_ratio = torch.where(mask.bool(), logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    loss = -aggregate(clipped_objective(log_ratio, advantages, clip_eps), mask, aggregation)
    with torch.no_grad():  # mask was validated by aggregate
        diagnostics = {"clip_fraction": _clip_fraction(log_ratio, mask, clip_eps, None),
                       "approx_kl": masked_mean(log_ratio.exp() - 1 - log_ratio, mask).item()}
    return loss, diagnostics


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip_eps: float = 0.2, beta: float = 0.04, aggregation: str = "sequence_mean",
              max_len: int | None = None, clip_eps_high: float | None = None,
              kl_ratio_weight: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO's loss (Shao et al., 2024): the clipped surrogate plus beta * KL to the reference, per token.

        loss_t = -min(ratio_t A_i, clip(ratio_t, 1 - eps, 1 + eps) A_i) + beta * k3_t
        k3_t   = pi_ref(a_t)/pi_theta(a_t) - 1 - log(pi_ref(a_t)/pi_theta(a_t))

    advantages: (B,) one per completion (group-normalized rewards) or (B, T). The KL sits in the
    *loss*, not in the reward as in PPO-RLHF; as a loss k3's expected gradient is that of
    KL(pi_ref || pi_theta) at each visited state (minirl.kl). Default aggregation 'sequence_mean'
    (each completion's token mean, then the batch mean) as in the paper; 'token_mean' (DAPO) and
    'constant' with max_len (Dr. GRPO, max_len = the maximum completion length) are the others.
    The tokens were sampled from pi_old, not pi_theta; after the first inner step, k3 on them
    estimates the KL of the wrong policy. kl_ratio_weight=True multiplies k3 by the ratio
    pi_theta/pi_old (importance sampling; TRL's `use_bias_correction_kl`, on by default there);
    the paper, and our default, leave it out. At the first inner step the ratio is 1 and both agree.
    Returns (loss, diagnostics): clip_fraction, kl (mean k3 per token), ratio_mean.
    """
    advantages = _same_shapes(logprobs, advantages, old_logprobs=old_logprobs, ref_logprobs=ref_logprobs)
    m = mask.bool()
    log_ratio = torch.where(m, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    log_ref_ratio = torch.where(m, ref_logprobs.detach() - logprobs, torch.zeros_like(logprobs))  # log(pi_ref / pi_theta)
    kl = log_ref_ratio.exp() - 1 - log_ref_ratio  # k3 per token
    kl_term = kl * log_ratio.exp() if kl_ratio_weight else kl
    per_token = -clipped_objective(log_ratio, advantages, clip_eps, clip_eps_high) + beta * kl_term
    loss = aggregate(per_token, mask, aggregation, max_len)
    with torch.no_grad():
        diagnostics = {"clip_fraction": _clip_fraction(log_ratio, mask, clip_eps, clip_eps_high),
                       "kl": masked_mean(kl, mask).item(), "ratio_mean": masked_mean(log_ratio.exp(), mask).item()}
    return loss, diagnostics


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, old_values: torch.Tensor | None = None,
               clip_range: float | None = None, aggregation: str = "token_mean") -> torch.Tensor:
    """0.5 * (V - R)^2 over response tokens; returns are targets (detached).

    With `clip_range` (PPO's value clipping, needs `old_values`): the new value may move at most
    clip_range from the value at collection time, and the loss is the larger of the clipped and
    unclipped errors, max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2) / 2.
    """
    if values.shape != returns.shape:
        raise ValueError(f"values shape {tuple(values.shape)} does not match returns {tuple(returns.shape)}")
    returns = returns.detach()
    err = (values - returns) ** 2
    if clip_range is not None:
        if old_values is None:
            raise ValueError("value clipping needs old_values, the values at collection time")
        old_values = old_values.detach()
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * aggregate(err, mask, aggregation)


def sft_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Supervised fine-tuning (behaviour cloning): mean negative log-likelihood of the response
    tokens only. logits (B, T, V) predict tokens (B, T); mask (B, T) is 1 on response tokens, so
    the prompt is context, never a target."""
    return -aggregate(token_logprobs(logits, tokens), mask, "token_mean")
