"""Best-of-N: draw N completions from a policy, keep the one a reward function scores highest.

No training: the policy pi stays as it is and the selection defines a new policy pi_N. Its
distribution is exact wherever pi's can be enumerated. Sort the outputs by reward; with F(y)
the probability that a draw scores at most r(y), and F-(y) strictly less, the best of N draws
lands on y's reward level with probability F(y)^N - F-(y)^N, and within a level (a tie)
each output in proportion to pi (`exact_distribution`). With no ties,

    pi_N(y) / pi(y) = (F(y)^N - F-(y)^N) / pi(y)  ->  N F(y)^(N-1)   (pi(y) small),

and KL(pi_N || pi) <= log N - (N-1)/N (`kl_bound`). The bound is what papers (Stiennon et al.
2020, Gao et al. 2022) report as "the" KL of best-of-N; Beirami et al. (2024) showed it is only
an upper bound, tight when pi spreads its mass thinly and loose when a few outputs hold most of
it. `kl_plugin_estimate` estimates the KL from samples instead, plugging an empirical CDF into
the exact density ratio above.

Ties are broken by taking the first of the tied draws; the draws are exchangeable, so that is
the same as picking one of them at random.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core import validate
from ..lm.model import GPT
from ..lm.sampling import Rollout, sample
from ..lm.tokenizer import load_tokenizer
from ..world.tasks import RewardFn, check_signature, reward_scores

__all__ = ["kl_bound", "select_best", "exact_distribution", "kl_divergence", "kl_plugin_estimate", "BestOfN",
           "best_of_n"]


def _check_scores(name: str, x) -> torch.Tensor:
    """x after checking it is a 1-D tensor of finite numbers (a list would meet torch's errors instead)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}; wrap it: torch.tensor({name})")
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}")
    bad = (~torch.isfinite(x)).nonzero().flatten().tolist()
    if bad:
        raise ValueError(f"{name} must be finite, got {len(bad)} NaN or inf entries (the first {x[bad[0]].item()} at "
                         f"index {bad[0]})")
    return x


def _check_device(name: str, x: torch.Tensor, other: str, y: torch.Tensor) -> None:
    """x and y on one device, and one that has float64 (the exact computations here need it)."""
    if x.device != y.device:
        raise ValueError(f"{name} is on {x.device} but {other} on {y.device}; put both on one device")
    if x.device.type == "mps":
        raise ValueError(f"{name} is on an MPS device, which has no float64, and this exact computation is done in "
                         f"float64: pass {name}.cpu() and {other}.cpu() (the result is a small table)")


def _check_nonnegative(name: str, p: torch.Tensor) -> None:
    """p (finite, 1-D, checked) holds probabilities >= 0."""
    if bool((p < 0).any()):
        raise ValueError(f"{name} must hold probabilities >= 0, got {int((p < 0).sum())} negative entries (the "
                         f"first {p[p < 0][0].item():.4g})")


def kl_bound(n: int) -> float:
    """log N - (N-1)/N: an upper bound on KL(best-of-N || pi), reached only without heavy outputs."""
    n = validate.integer("n", n)
    return math.log(n) - (n - 1) / n


def select_best(scores: torch.Tensor, n: int) -> torch.Tensor:
    """(B,) index into scores (B*n,) of each group's best: groups are consecutive blocks of n,
    and a tie goes to the first of the tied draws."""
    n = validate.integer("n", n)
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}; wrap it: torch.tensor(scores)")
    if scores.dim() != 1 or scores.numel() % n:
        raise ValueError(f"scores must be 1-D with a multiple of n={n} entries (consecutive groups of n), "
                         f"got shape {tuple(scores.shape)}")
    _check_scores("scores", scores)  # a NaN is never the max: its group's pick would silently be the first
    groups = scores.view(-1, n)  # (B, n)
    best = groups.max(dim=1, keepdim=True).values
    first = (groups == best).float().argmax(dim=1)  # first position that attains the maximum
    return torch.arange(groups.size(0), device=scores.device) * n + first


def exact_distribution(probs: torch.Tensor, scores: torch.Tensor, n: int) -> torch.Tensor:
    """(K,) the best-of-n distribution over K enumerable outputs with probabilities `probs` under
    pi (summing to 1) and rewards `scores`: each reward level gets F^n - F-^n, shared within the
    level in proportion to probs."""
    n = validate.integer("n", n)
    _check_scores("probs", probs)
    _check_scores("scores", scores)
    if probs.shape != scores.shape:
        raise ValueError(f"probs and scores must be 1-D of one shape, got {tuple(probs.shape)} and {tuple(scores.shape)}")
    _check_device("probs", probs, "scores", scores)
    probs = probs.double()
    if abs(probs.sum().item() - 1) > 1e-6 or bool((probs < 0).any()):
        raise ValueError(f"probs must be a distribution (>= 0, summing to 1), got a sum of {probs.sum().item():.6f}")
    levels, level_of = torch.unique(scores.double(), return_inverse=True)  # ascending reward levels
    mass = torch.zeros(len(levels), dtype=torch.float64, device=probs.device)  # (L,) pi(level), where probs live
    mass.index_add_(0, level_of, probs)
    cdf = mass.cumsum(0).clamp(max=1.0)  # F at each level
    below = cdf - mass  # F- (strictly below)
    level_prob = cdf ** n - below.clamp(min=0.0) ** n  # (L,) P(best of n lands on the level)
    level_mass = mass[level_of]  # (K,) pi of each output's level
    share = torch.where(level_mass > 0, probs / level_mass.clamp(min=1e-300), torch.zeros_like(probs))
    return level_prob[level_of] * share


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL(p || q) = sum p log(p / q) over a finite support (0 log 0 = 0), never below 0 (rounding
    can otherwise give -1e-17 for p = q)."""
    for name, x in (("p", p), ("q", q)):
        _check_scores(name, x)
    if p.shape != q.shape:
        raise ValueError(f"p and q must be 1-D of one shape (one support), got {tuple(p.shape)} and {tuple(q.shape)}")
    _check_device("p", p, "q", q)
    _check_nonnegative("p", p)  # not checked to sum to 1: lesson 09 measures a buggy best-of-n's 'KL' with it
    _check_nonnegative("q", q)
    p, q = p.double(), q.double()
    return max(0.0, (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum().item())


def kl_plugin_estimate(best_scores: torch.Tensor, reference_scores: torch.Tensor, n: int) -> float:
    """Estimate KL(best-of-n || pi) from the scores of best-of-n picks and of an independent batch
    of plain draws from pi: the mean over the picks of log[(F^n - F-^n) / (F - F-)], with F and F-
    the empirical CDF of the plain draws (at most, and strictly below, each pick's score). The ratio
    depends only on a pick's reward level, so ties between different outputs are fine. A pick whose
    score no plain draw shares gets the limit n F^(n-1), with F floored at 1/(m+1) for m plain
    draws (a pick below every plain draw would otherwise count as impossible). Consistent as both
    batches grow."""
    n = validate.integer("n", n)
    for name, x in (("best_scores", best_scores), ("reference_scores", reference_scores)):
        if not len(_check_scores(name, x)):
            raise ValueError(f"{name} must hold at least one score, got none")
    _check_device("best_scores", best_scores, "reference_scores", reference_scores)
    ref = reference_scores.double().sort().values
    x = best_scores.double()
    m = ref.numel()
    F = torch.searchsorted(ref, x, right=True).double() / m  # share of draws <= x
    F_below = torch.searchsorted(ref, x, right=False).double() / m  # share of draws < x
    tied = F > F_below
    untied = n * F.clamp(min=1.0 / (m + 1)) ** (n - 1)
    ratio = torch.where(tied, (F ** n - F_below ** n) / (F - F_below).clamp(min=1e-300), untied)
    return ratio.log().mean().item()


@dataclass
class BestOfN:
    rollout: Rollout  # the N draws of every prompt, rows [i*N, (i+1)*N) are prompt i's
    scores: torch.Tensor  # (B*N,) the reward function's score of every draw
    best: torch.Tensor  # (B,) row of each prompt's pick

    @property
    def texts(self) -> list[str]:
        return [self.rollout.texts[i] for i in self.best.tolist()]

    @property
    def best_scores(self) -> torch.Tensor:
        return self.scores[self.best]


@torch.no_grad()
def best_of_n(policy: GPT, prompts: list[str], n: int, reward_fn: RewardFn, max_new_tokens: int,
              generator: torch.Generator | None = None, tokenizer=None) -> BestOfN:
    """For each prompt, sample n completions at temperature 1 and keep the highest-scoring one
    under `reward_fn` (TRL's signature; it gets `completion_ids` and `truncated` too)."""
    check_signature(reward_fn, getattr(reward_fn, "__name__", type(reward_fn).__name__))  # before the sampling
    rollout = sample(policy, prompts, max_new_tokens=max_new_tokens, group_size=validate.integer("n", n),
                     generator=generator, tokenizer=tokenizer or load_tokenizer())
    scores = reward_scores(reward_fn, rollout).cpu().double()
    return BestOfN(rollout, scores, select_best(scores, n))
