"""Preferences: rankings into pairs, Bradley-Terry strengths, Elo, and how well any scorer can agree.

Bradley-Terry (1952) gives every item a strength theta and says

    P(i beats j) = sigmoid(theta_i - theta_j)        (natural log-odds: a gap of 1 is 73% : 27%)

Only differences matter, so strengths are reported with mean zero. Elo is the same model on
another scale, base + scale / ln 10 * theta (a gap of 400 points is 10 : 1), and the online Elo
update after a game, r_i += K (S_i - E_i), is one step of stochastic gradient ascent on the same
log-likelihood with learning rate K ln 10 / scale in theta units.

The last three functions score a scorer against a known label model: items drawn independently
with probabilities p (a pair is two different items), labelled by Bradley-Terry on a known
utility u. The best any scorer can do is the accuracy ceiling E[sigmoid(|u_i - u_j|)]; a scorer
that orders a pair like u does agrees with the label with probability sigmoid(|u_i - u_j|), and
one that orders it the other way with the complement.
"""
from __future__ import annotations

import math
import numbers
import re

import numpy as np
import torch

from . import validate

__all__ = ["parse_ranking", "ranking_to_pairs", "win_counts", "expected_wins", "fit_bradley_terry", "elo",
           "elo_expected", "elo_update", "online_elo", "pair_weights", "accuracy_ceiling", "expected_accuracy",
           "reliability"]

# ---------------------------------------------------------------- rankings
def parse_ranking(text: str) -> list[list[str]]:
    """'B > C = D > A' -> [['B'], ['C', 'D'], ['A']]: tiers from best to worst, ties share a tier."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a ranking is a string such as 'B > C = D > A', got {text!r}")
    tiers = [[name.strip() for name in tier.split("=")] for tier in text.split(">")]
    names = [n for tier in tiers for n in tier]
    if any(not re.fullmatch(r"\S+", n) for n in names):
        raise ValueError(f"every item of the ranking {text!r} needs a name ('A > B = C'), with '>' and '=' between them")
    if len(set(names)) != len(names):
        raise ValueError(f"an item appears twice in the ranking {text!r}")
    return tiers


def ranking_to_pairs(ranking: str | list[list[str]]) -> list[tuple[str, str, float]]:
    """Every pair of a ranking as (a, b, P(a preferred over b)): 1 when a's tier is above b's,
    1/2 for a tie. k items give k (k - 1) / 2 pairs, a listed before b."""
    tiers = parse_ranking(ranking) if isinstance(ranking, str) else ranking
    ranked = [(name, level) for level, tier in enumerate(tiers) for name in tier]
    return [(a, b, 1.0 if la < lb else 0.5) for i, (a, la) in enumerate(ranked) for b, lb in ranked[i + 1:]]


# ---------------------------------------------------------------- Bradley-Terry strengths
def _check_ids(name: str, ids) -> None:
    """Item ids are integers (a list of ints or an integer tensor); names or fractional ids are refused."""
    if isinstance(ids, torch.Tensor):
        ok = not ids.is_floating_point() and not ids.is_complex()
    else:
        ok = not isinstance(ids, str) and all(isinstance(i, numbers.Integral) for i in np.asarray(ids, dtype=object).flat)
    if not ok:
        raise TypeError(f"{name} must be item ids, integers in [0, n_items) (a list of ints or an integer tensor). "
                        "For named items, number them first: ids = {name: i for i, name in enumerate(names)}")


def _games(winners, losers, n_items: int, labels) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(winners, losers, labels) as tensors, checked, all on the device of `winners` (a tensor's own,
    the CPU for lists): every function here computes there, so CUDA ids stay on the GPU."""
    n_items = validate.integer("n_items", n_items, minimum=2)
    for name, ids in (("winners", winners), ("losers", losers)):
        _check_ids(name, ids)
    w = torch.as_tensor(winners, dtype=torch.long).flatten()
    l = torch.as_tensor(losers, dtype=torch.long, device=w.device).flatten()
    if w.shape != l.shape or w.numel() == 0:
        raise ValueError(f"winners and losers must be equally long, non-empty lists of item ids, got {w.numel()} and "
                         f"{l.numel()}")
    if int(torch.cat([w, l]).min()) < 0 or int(torch.cat([w, l]).max()) >= n_items:
        raise ValueError(f"item ids must lie in [0, n_items={n_items})")
    if bool((w == l).any()):
        raise ValueError("an item cannot play itself: winners[g] == losers[g] for some game g")
    if labels is None:
        return w, l, torch.ones(w.numel(), dtype=torch.float64, device=w.device)
    y = torch.as_tensor(labels, dtype=torch.float64, device=w.device).flatten()
    if y.shape != w.shape:
        raise ValueError(f"labels must hold one entry per game: got {y.numel()} labels for {w.numel()} games")
    if not bool(((y >= 0) & (y <= 1)).all()):
        lo, hi = torch.stack(torch.aminmax(y)).tolist()
        raise ValueError(f"labels must be one probability in [0, 1] per game (1: the listed winner won, 1/2: a tie, "
                         f"0: it lost), got values from {lo:g} to {hi:g}. Outcomes +1/-1? pass (y + 1) / 2. "
                         "Strength or reward differences? pass their torch.sigmoid")
    return w, l, y


def win_counts(winners, losers, n_items: int, labels=None) -> torch.Tensor:
    """(n_items,) each item's observed wins, a tie counting 1/2 to each side."""
    w, l, y = _games(winners, losers, n_items, labels)
    wins = torch.zeros(n_items, dtype=torch.float64, device=w.device)
    return wins.index_add_(0, w, y).index_add_(0, l, 1 - y)


def expected_wins(theta: torch.Tensor, winners, losers, n_items: int) -> torch.Tensor:
    """(n_items,) each item's expected wins over the same games under strengths theta."""
    w, l, _ = _games(winners, losers, n_items, None)
    theta = torch.as_tensor(theta, dtype=torch.float64, device=w.device)
    if theta.shape != (n_items,) or not bool(torch.isfinite(theta).all()):
        raise ValueError(f"theta must hold one finite strength per item, n_items={n_items} of them; got shape "
                         f"{tuple(theta.shape)}{'' if theta.shape != (n_items,) else ' with NaN or inf'}")
    p = torch.sigmoid(theta[w] - theta[l])  # P(listed winner wins) per game
    return torch.zeros(n_items, dtype=torch.float64, device=w.device).index_add_(0, w, p).index_add_(0, l, 1 - p)


def _strongly_connected(w: torch.Tensor, l: torch.Tensor, y: torch.Tensor, n: int) -> bool:
    """Can every item reach every other along 'beat at least partly' edges (both directions)?"""
    beats = torch.zeros(n, n, dtype=torch.bool, device=w.device)
    beats[w[y > 0], l[y > 0]] = True
    beats[l[y < 1], w[y < 1]] = True
    for graph in (beats, beats.T):
        seen = torch.zeros(n, dtype=torch.bool, device=w.device)
        seen[0] = True
        while True:
            grown = seen | graph[seen].any(dim=0)
            if bool((grown == seen).all()):
                break
            seen = grown
        if not bool(seen.all()):
            return False
    return True


def fit_bradley_terry(winners, losers, n_items: int, labels=None, l2: float = 0.0, tol: float = 1e-10,
                      max_iter: int = 100) -> torch.Tensor:
    """Maximum-likelihood Bradley-Terry strengths theta (n_items,), float64, mean zero.

    winners, losers: item ids of each game (game g: winners[g] beat losers[g]); labels: optional
    P(winners[g] won) per game, 1/2 for a tie. l2: a Gaussian prior (l2 / 2) |theta|^2, needed when
    the maximum likelihood does not exist. Newton's method on the concave log-likelihood; at the
    optimum each item's observed wins equal its expected wins (`win_counts`, `expected_wins`).

    Without a prior the maximum exists only when every item can reach every other through chains
    of wins (Zermelo 1929): an item that never lost would need an infinite strength. That case
    raises a ValueError saying so.
    """
    w, l, y = _games(winners, losers, n_items, labels)
    validate.number("l2", l2, 0.0)
    validate.number("tol", tol, 0.0)
    validate.integer("max_iter", max_iter)
    if l2 == 0 and not _strongly_connected(w, l, y, n_items):
        raise ValueError("the maximum-likelihood strengths do not exist: some items never lose (or never win) against "
                         "the rest, or some groups of items were never compared, so a strength runs to infinity or "
                         "floats free. Add games, or pass a prior such as l2=0.01")
    f64 = {"dtype": torch.float64, "device": w.device}  # the games' device, not silently the CPU
    theta = torch.zeros(n_items, **f64)
    ones = torch.full((n_items, n_items), 1.0 / n_items, **f64)
    eye = torch.eye(n_items, **f64)
    for _ in range(max_iter):
        p = torch.sigmoid(theta[w] - theta[l])  # (G,)
        grad = torch.zeros_like(theta).index_add_(0, w, y - p).index_add_(0, l, p - y) - l2 * theta
        c = p * (1 - p)  # curvature per game
        lap = torch.zeros(n_items, n_items, **f64)  # the weighted graph Laplacian
        lap.index_put_((w, w), c, accumulate=True).index_put_((l, l), c, accumulate=True)
        lap.index_put_((w, l), -c, accumulate=True).index_put_((l, w), -c, accumulate=True)
        # -Hessian = lap + l2 I; the 11^T/n term fixes the free constant (grad has no component along 1)
        step = torch.linalg.solve(lap + l2 * eye + ones, grad)
        theta = theta + step
        theta = theta - theta.mean()
        if float(step.abs().max()) < tol:
            break
    return theta


# ---------------------------------------------------------------- Elo
def elo(theta, base: float = 1000.0, scale: float = 400.0) -> torch.Tensor:
    """Elo ratings of Bradley-Terry strengths: base + scale / ln 10 * theta."""
    validate.number("base", base)
    validate.number("scale", scale, 0.0, open_low=True)
    return base + scale / math.log(10) * torch.as_tensor(theta, dtype=torch.float64)


def elo_expected(rating_a, rating_b, scale: float = 400.0):
    """Elo's expected score of a against b: 1 / (1 + 10^((r_b - r_a) / scale)) = sigmoid(theta_a - theta_b)."""
    validate.number("scale", scale, 0.0, open_low=True)
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / scale))


def elo_update(rating_a: float, rating_b: float, score_a: float, k: float = 32.0, scale: float = 400.0) -> tuple[float, float]:
    """Ratings after one game in which a scored score_a (1 win, 1/2 draw, 0 loss): each side moves
    by K times (actual - expected) score, in opposite directions."""
    validate.number("rating_a", rating_a)
    validate.number("rating_b", rating_b)
    if not 0 <= validate.number("score_a", score_a) <= 1:
        raise ValueError(f"score_a must be a's score in [0, 1] (1 a win, 1/2 a draw, 0 a loss), got {score_a!r}. "
                         "Outcomes +1/-1? pass (s + 1) / 2")
    validate.number("k", k, 0.0)
    change = k * (score_a - elo_expected(rating_a, rating_b, scale))
    return rating_a + change, rating_b - change


def online_elo(winners, losers, n_items: int, labels=None, k: float = 32.0, base: float = 1000.0,
               scale: float = 400.0) -> torch.Tensor:
    """Ratings (n_items,) after playing the games in order with `elo_update`, everyone starting at base."""
    w, l, y = _games(winners, losers, n_items, labels)
    ratings = [validate.number("base", base)] * n_items
    for a, b, s in zip(w.tolist(), l.tolist(), y.tolist()):
        ratings[a], ratings[b] = elo_update(ratings[a], ratings[b], s, k, scale)
    return torch.tensor(ratings, dtype=torch.float64, device=w.device)


# ---------------------------------------------------------------- scorers against a known label model
def pair_weights(probs) -> torch.Tensor:
    """(n, n) P(the pair is (i, j)) when both items are drawn independently with `probs` and
    redrawn until they differ: p_i p_j / (1 - sum p^2) off the diagonal, 0 on it."""
    p = torch.as_tensor(probs, dtype=torch.float64)
    if p.dim() != 1:
        raise ValueError(f"probs must be a 1-D probability vector, one entry per item; got shape {tuple(p.shape)}")
    if not bool((torch.isfinite(p) & (p >= 0)).all()):
        raise ValueError(f"probs must be a probability vector: non-negative and finite, got {p.tolist()!r:.80}")
    total = float(p.sum())
    if abs(total - 1) > 1e-9:
        raise ValueError(f"probs must sum to 1, got a sum of {total:g}: counts or weights? divide by their total "
                         "(probs / probs.sum())")
    if int((p > 0).sum()) < 2:
        raise ValueError("probs must put mass on at least two items: a pair is two different items")
    w = p[:, None] * p[None, :]
    w.fill_diagonal_(0.0)
    return w / w.sum()


def accuracy_ceiling(utilities, probs) -> float:
    """E[sigmoid(|u_i - u_j|)] over the pair distribution: the expected agreement of the best
    possible scorer (u itself) with Bradley-Terry labels drawn on u."""
    weights = pair_weights(probs)
    u = _per_item("utilities", utilities, weights)
    return float((weights * torch.sigmoid((u[:, None] - u[None, :]).abs())).sum())


def _per_item(name: str, values, weights: torch.Tensor) -> torch.Tensor:
    """values as a float64 tensor on the weights' device, after checking it holds one finite number per item."""
    x = torch.as_tensor(values, dtype=torch.float64, device=weights.device)
    if x.shape != weights.shape[:1]:
        raise ValueError(f"{name} and probs need one entry per item: got {tuple(x.shape)} {name} and "
                         f"{weights.size(0)} probs")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} holds NaN or inf: {x.tolist()!r:.80}")
    return x


def expected_accuracy(scores, utilities, probs) -> float:
    """Expected agreement of a scorer with Bradley-Terry labels on u, over the pair distribution
    (a pair the scorer ties counts 1/2). Exact: no test-set noise."""
    s = torch.as_tensor(scores, dtype=torch.float64)
    u = torch.as_tensor(utilities, dtype=torch.float64)
    if s.shape != u.shape:
        raise ValueError(f"one score per item: got {tuple(s.shape)} scores for {tuple(u.shape)} utilities")
    weights = pair_weights(probs)
    s, u = _per_item("scores", s, weights), _per_item("utilities", u, weights)
    p_first = torch.sigmoid(u[:, None] - u[None, :])  # P(label prefers i over j)
    says_first = (s[:, None] > s[None, :]).double() + 0.5 * (s[:, None] == s[None, :]).double()
    agree = says_first * p_first + (1 - says_first) * (1 - p_first)
    return float((weights * agree).sum())


def reliability(predicted, outcome, weights=None, bins: int = 10) -> dict[str, torch.Tensor | float]:
    """A reliability diagram: predicted probabilities binned into `bins` equal-width bins, and per
    bin the (weighted) mean prediction, mean outcome and total weight; plus the expected
    calibration error ECE = sum_bins weight * |mean outcome - mean prediction| (weights summing to 1).

    outcome: 0/1 labels (held-out pairs) or true probabilities (the exact label model).
    """
    bins = validate.integer("bins", bins)
    q = torch.as_tensor(predicted, dtype=torch.float64).flatten()
    o = torch.as_tensor(outcome, dtype=torch.float64, device=q.device).flatten()
    wt = torch.ones_like(q) if weights is None else torch.as_tensor(weights, dtype=torch.float64, device=q.device)
    wt = wt.flatten()
    if not q.shape == o.shape == wt.shape:
        raise ValueError("predicted, outcome and weights need one entry each per pair")
    if q.numel() == 0:
        raise ValueError("no pairs: a reliability diagram needs at least one prediction")
    for name, x, hint in (("predicted", q, "Scores or reward differences? pass their torch.sigmoid"),
                          ("outcome", o, "Outcomes +1/-1? pass (y + 1) / 2")):
        if not bool(((x >= 0) & (x <= 1)).all()):
            lo, hi = torch.stack(torch.aminmax(x)).tolist()
            raise ValueError(f"{name} must be probabilities in [0, 1], got values from {lo:g} to {hi:g}. {hint}")
    if not bool((torch.isfinite(wt) & (wt >= 0)).all()) or not wt.sum() > 0:
        raise ValueError("weights must be finite and non-negative with a positive total (they are normalized to sum "
                         f"to 1), got {wt.tolist()!r:.80}")
    wt = wt / wt.sum()
    idx = (q * bins).long().clamp(0, bins - 1)
    mass = torch.zeros(bins, dtype=torch.float64, device=q.device).index_add_(0, idx, wt)
    safe = mass.clamp(min=1e-300)
    mean_q = torch.zeros(bins, dtype=torch.float64, device=q.device).index_add_(0, idx, wt * q) / safe
    mean_o = torch.zeros(bins, dtype=torch.float64, device=q.device).index_add_(0, idx, wt * o) / safe
    ece = float((mass * (mean_o - mean_q).abs()).sum())
    return {"predicted": mean_q, "observed": mean_o, "weight": mass, "ece": ece}
