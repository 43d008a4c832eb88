"""Reward over-optimization measured against the truth: exact curves over an enumerable support,
and Gao, Schulman and Hilton's (2022) functional forms.

Gao et al. plot the gold reward gained over the starting policy against d = sqrt(KL(pi || pi_ref))
and fit, for best-of-N and for RL against a proxy reward model,

    best-of-N:  R(d) = d (alpha - beta d)
    RL:         R(d) = d (alpha - beta log d)

Both are linear in (alpha, beta), so `fit_gao` is ordinary least squares with no intercept
(R(0) = 0 by construction: the gain is measured from the start). alpha is the initial slope;
beta > 0 makes the curve turn over (gold falls after a peak), beta <= 0 means it never does
within the fitted range.

Where the support is finite (the 1,008 valid orders), the two policies a curve is made of can
be computed exactly instead of sampled: the KL-regularized optimum pi_ref e^{r/beta} / Z for a
range of beta (`tilted`) and best-of-N (`minirl.train.best_of_n.exact_distribution`), each with its
exact KL, proxy and gold (`support_curve`).
"""
from __future__ import annotations

import math

import torch

from ..core import validate
from . import best_of_n

__all__ = ["FORMS", "gao_gain", "basis", "fit_gao", "tilted", "support_curve", "turnover"]

FORMS = ("bon", "rl")


def gao_gain(d: torch.Tensor, alpha: float, beta: float, form: str) -> torch.Tensor:
    """Gao et al.'s gold gain at d = sqrt(KL): d (alpha - beta d) for 'bon', d (alpha - beta log d) for 'rl'
    (0 at d = 0)."""
    d = torch.as_tensor(d, dtype=torch.float64)
    return d * (alpha - beta * basis(d, form))


def basis(d: torch.Tensor, form: str) -> torch.Tensor:
    """The second factor's shape: d for best-of-N, log d for RL (0 at d = 0, where d log d -> 0)."""
    validate.choice("form", form, FORMS)
    if form == "bon":
        return d
    return torch.where(d > 0, torch.log(d.clamp(min=1e-300)), torch.zeros_like(d))


def fit_gao(kl, gain, form: str) -> tuple[float, float]:
    """Least-squares (alpha, beta) of `gao_gain` to points (KL, gold gain over the start).
    kl: KLs (nats, >= 0), not square roots; gain: gold minus the starting policy's gold."""
    try:
        kl = torch.as_tensor(kl, dtype=torch.float64).flatten()
        gain = torch.as_tensor(gain, dtype=torch.float64).flatten()
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"kl and gain must be numbers (lists or tensors of floats), got {kl!r:.60} and "
                        f"{gain!r:.60}") from None
    if kl.shape != gain.shape or kl.numel() < 2:
        raise ValueError(f"fit_gao needs at least two (KL, gain) points of one shape, got {tuple(kl.shape)} and "
                         f"{tuple(gain.shape)}")
    if bool((kl < -1e-9).any()) or not bool(torch.isfinite(kl).all() & torch.isfinite(gain).all()):
        raise ValueError("KLs must be finite and >= 0 (nats, not their square roots), gains finite")
    d = kl.clamp(min=0.0).sqrt()  # an exact KL of 0 can come out as -1e-17
    if len(set(d[d > 0].tolist())) < 2:
        raise ValueError("fit_gao needs points at two or more different KLs above 0 to fit two coefficients")
    X = torch.stack([d, -d * basis(d, form)], dim=1)  # (P, 2): gain = X @ (alpha, beta)
    coef = torch.linalg.lstsq(X, gain[:, None]).solution.squeeze(1)
    return coef[0].item(), coef[1].item()


def tilted(ref_probs: torch.Tensor, reward: torch.Tensor, beta: float) -> torch.Tensor:
    """The KL-regularized optimum pi_ref e^{r/beta} / Z over a finite support, computed in log space
    (stable for small beta)."""
    validate.number("beta", beta, 0.0, open_low=True)
    _check_outputs(ref_probs=ref_probs, reward=reward)
    logits = torch.log(ref_probs.double()) + reward.double() / beta
    return torch.softmax(logits, dim=0)


def _check_outputs(**tensors: torch.Tensor) -> None:
    """1-D tensors over one support (the first is `ref_probs`, its probabilities >= 0): one shape,
    every entry finite."""
    (first, ref), *_ = tensors.items()
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}; wrap it: torch.tensor({name})")
        if x.shape != ref.shape or x.dim() != 1:
            raise ValueError(f"{' and '.join(tensors)} must be 1-D tensors of one shape, over the same outputs; got "
                             f"{' and '.join(str(tuple(t.shape)) for t in tensors.values())}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite, got {int((~torch.isfinite(x)).sum())} NaN or inf entries")
    if bool((ref < 0).any()):
        raise ValueError(f"{first} has {int((ref < 0).sum())} negative entries; it is a distribution (>= 0)")


def support_curve(ref_probs: torch.Tensor, proxy: torch.Tensor, gold: torch.Tensor, betas=(), ns=()) -> list[dict]:
    """Exact points (kind, knob, kl, proxy, gold) for the KL-regularized optimum at each beta of
    `betas` (kind 'rl') and best-of-n at each n of `ns` (kind 'bon'), over a finite support whose
    reference probabilities `ref_probs` sum to 1; the proxy picks, the gold judges."""
    _check_outputs(ref_probs=ref_probs, proxy=proxy, gold=gold)
    if abs(ref_probs.double().sum().item() - 1) > 1e-6:
        raise ValueError(f"ref_probs must sum to 1 (renormalize over the support), got {ref_probs.sum().item():.6f}")
    rows = []
    for kind, knobs, policy in (("rl", betas, lambda b: tilted(ref_probs, proxy, b)),
                                ("bon", ns, lambda n: best_of_n.exact_distribution(ref_probs, proxy, n))):
        for knob in knobs:
            pi = policy(knob)
            rows.append({"kind": kind, "knob": knob, "kl": best_of_n.kl_divergence(pi, ref_probs),
                         "proxy": (pi * proxy.double()).sum().item(), "gold": (pi * gold.double()).sum().item()})
    return rows


def turnover(curve: list[dict]) -> float:
    """How far gold ends below its peak along a curve ordered by KL (0 if it never falls)."""
    gold = [row["gold"] for row in sorted(curve, key=lambda row: row["kl"])]
    return max(gold) - gold[-1] if gold else math.nan
