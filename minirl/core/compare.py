"""Comparing runs the way a statistician will check the comparison.

Every empirical comparison in the lessons and sweeps goes through this module. It follows Agarwal et
al. (2021), "Deep Reinforcement Learning at the Edge of the Statistical Precipice" (the practice of
their rliable library): report an effect's size with a confidence interval, not only a verdict; use the
interquartile mean where a few runs can collapse; never read a verdict off one run per method. The
resampling is `scipy.stats` (`bootstrap`, `permutation_test`), not written here.

- `paired`: two arms that share each seed (its prompts, batches, demonstrations or data). The
  difference a - b per seed; its mean with a 95% percentile bootstrap interval; a two-sided sign-flip
  permutation p-value, exact (every one of the 2^n sign patterns) up to 16 pairs. With n pairs the
  smallest p the test can give is 2 / 2^n: 5 pairs cannot reach 0.05 (0.0625), 6 can (0.031).
- `unpaired`: two arms with nothing shared. The probability of improvement P(a better than b) (ties
  count one half; the Mann-Whitney statistic over n_a n_b) with a stratified bootstrap interval (each
  arm resampled on its own), the difference of the means with its interval, and a two-sided permutation
  p-value on the probability of improvement, exact over every split up to 100,000 of them. The smallest
  possible p is 2 / C(n_a + n_b, n_a): 0.10 at 3 v 3, 0.0079 at 5 v 5; at 1 v 1 it is 1.
- A verdict ("a ahead") only where p <= alpha (0.05) and the interval excludes no difference; anything
  else reads "no difference that these seeds can detect", with the interval, and says when the seeds
  could never have reached alpha. Values are compared as recorded: printing rounds, comparing does not.
- `table`: comparisons shown as one table, a row each (`Comparison.row`: the same numbers as its
  printed line), for a cell whose comparisons would otherwise print a screen of lines.
- `family`: a cell that makes k comparisons prints k beside every verdict, and adjusts their p-values
  by Holm's step-down method (each verdict then holds with a family-wise error of alpha) unless its
  seeds could not survive the adjustment, in which case each line says its p is unadjusted.
- `iqm`: the interquartile mean (the mean of the middle half, `scipy.stats.trim_mean` at 0.25) with
  its bootstrap interval: an aggregate that one collapsed run cannot drag.
- `at_kl`: "at matched KL" read off one run's own trajectory: the metric where the run's KL first
  reaches each common level, interpolated between the two evaluations that straddle it (NaN if
  the run never gets there). Never bins that pool evaluations of different runs and steps.
- `window`: a run that oscillates judged over its late evaluations (median, worst point, share
  above a threshold), not by its last one.
- `choose_rate`: a learning rate chosen on a grid by the mean score over tuning seeds that are not
  the reported ones; a choice at either end of the grid is flagged, because the grid does not
  bracket the optimum and must be extended; the runner-up is compared with `paired` (the tuning
  seeds are shared by every rate).

A diverged run (NaN) counts as the worst value in `unpaired` and `choose_rate`; a paired difference
with a diverged run has no value, so `paired` refuses one and says to use `unpaired`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

__all__ = ["Comparison", "paired", "unpaired", "family", "table", "COLUMNS", "holm", "Estimate", "iqm", "at_kl", "Window", "window",
           "RateChoice", "choose_rate", "sweep_rate"]

ALPHA, CONFIDENCE, RESAMPLES, EXACT_UP_TO = 0.05, 0.95, 10_000, 100_000


@dataclass(frozen=True)
class Comparison:
    """Two arms' per-seed values, the effect between them with its interval, and what they support.

    effect: paired, the mean of a - b; unpaired, P(a better than b) (0.5: no difference).
    difference: the mean of a minus the mean of b (NaN where a run diverged), with `difference_interval`.
    p: two-sided permutation p-value (Holm-adjusted over `comparisons` where `adjusted`); smallest_p:
    the least the design could give. leader: the arm ahead, or None."""
    names: tuple[str, str]
    values: tuple[tuple[float, ...], tuple[float, ...]]
    is_paired: bool
    higher_is_better: bool
    effect: float
    interval: tuple[float, float]
    difference: float
    difference_interval: tuple[float, float]
    p: float
    exact: bool
    smallest_p: float
    comparisons: int = 1
    adjusted: bool = False
    alpha: float = ALPHA

    @property
    def leader(self) -> str | None:
        null = 0.0 if self.is_paired else 0.5  # no difference: a mean difference of 0, or P(a better) = 1/2
        lo, hi = self.interval
        if self.p > self.alpha or lo <= null <= hi:
            return None
        if self.is_paired:  # the effect is the raw a - b
            a_ahead = (self.effect > 0) == self.higher_is_better
        else:  # the effect is already P(a better than b)
            a_ahead = self.effect > 0.5
        return self.names[0] if a_ahead else self.names[1]

    def row(self) -> tuple[str, str, str, str, str, str]:
        """The comparison as one row of `table` (its COLUMNS), each number to the decimals its printed
        line uses. Paired: the differences by seed, their mean and its interval; unpaired: each arm's
        values, P(a better than b) and its interval."""
        (a, b), (va, vb) = self.names, self.values
        fmt = _formatter([*va, *vb])
        p = f"{self.p:.3f}" if self.p >= 0.001 else "< 0.001"
        if self.is_paired:
            name, seeds = f"{a} - {b}", " ".join(fmt(x - y, sign=True) for x, y in zip(va, vb))
            effect, interval = fmt(self.effect, sign=True), [fmt(x, sign=True) for x in self.interval]
            count = f"{len(va)} pair{'s' if len(va) > 1 else ''}"
        else:
            name, seeds = f"{a} v {b}", f"{' '.join(fmt(x) for x in va)} | {' '.join(fmt(x) for x in vb)}"
            better = ">" if self.higher_is_better else "<"
            effect, interval = f"P({a} {better} {b}) = {self.effect:.2f}", [f"{x:.2f}" for x in self.interval]
            count = f"{len(va)} v {len(vb)} runs"
        least = min(1.0, self.smallest_p * (self.comparisons if self.adjusted else 1))
        verdict = (f"{self.leader} ahead" if self.leader is not None else f"no difference that {count} can detect"
                   + (f" (cannot reach p <= {self.alpha:g})" if least > self.alpha else ""))
        return name, seeds, effect, ", ".join(interval), p, verdict

    def __str__(self) -> str:
        (a, b), (va, vb) = self.names, self.values
        fmt = _formatter([*va, *vb])
        p = f"p = {self.p:.3f}" if self.p >= 0.001 else "p < 0.001"
        p += "" if self.exact else " (Monte Carlo)"
        if self.comparisons > 1:
            p += (f", Holm-adjusted over {self.comparisons} comparisons" if self.adjusted else
                  f", one of {self.comparisons} comparisons here, unadjusted")
        if self.is_paired:
            d = [x - y for x, y in zip(va, vb)]
            seeds = f"{len(d)} pair{'s' if len(d) > 1 else ''}"
            head = (f"{a} - {b}, paired over {seeds}: {' '.join(fmt(x, sign=True) for x in d)}; "
                    f"mean {fmt(self.effect, sign=True)} [95% CI {fmt(self.interval[0], sign=True)}, "
                    f"{fmt(self.interval[1], sign=True)}], sign-flip {p}")
        else:
            diff = ("undefined (a diverged run)" if math.isnan(self.difference) else
                    f"{fmt(self.difference, sign=True)} [95% CI {fmt(self.difference_interval[0], sign=True)}, "
                    f"{fmt(self.difference_interval[1], sign=True)}]")
            better = ">" if self.higher_is_better else "<"
            head = (f"{a}: {' '.join(fmt(x) for x in va)} | {b}: {' '.join(fmt(x) for x in vb)}; "
                    f"P({a} {better} {b}) = {self.effect:.2f} [95% CI {self.interval[0]:.2f}, {self.interval[1]:.2f}], "
                    f"difference of means {diff}, permutation {p}")
            seeds = f"{len(va)} v {len(vb)} runs"
        if self.leader is not None:
            return f"{head} -> {self.leader} ahead"
        least = min(1.0, self.smallest_p * (self.comparisons if self.adjusted else 1))  # Holm: the smallest p times k
        reach = (f"; {seeds} cannot reach p <= {self.alpha:g} (the smallest possible p is {least:.3f})"
                 if least > self.alpha else "")
        return f"{head} -> no difference that {seeds} can detect{reach}"


def paired(a: Sequence[float], b: Sequence[float], names: tuple[str, str] = ("A", "B"),
           higher_is_better: bool = True, alpha: float = ALPHA) -> Comparison:
    """Arms that share each seed: a[i] and b[i] ran on seed i. The mean difference a - b, its 95%
    percentile bootstrap interval, and the two-sided sign-flip permutation p-value (exact up to
    2^16 sign patterns). a, b: (n,) each, finite."""
    va, vb = _floats(a, "a"), _floats(b, "b")
    names, higher_is_better, alpha = _arm_options(names, higher_is_better, alpha)
    if len(va) != len(vb):
        raise ValueError(f"paired needs one value per seed in each arm, got {len(va)} and {len(vb)}; "
                         "arms that share no seeds are compared with unpaired")
    if not all(map(math.isfinite, va + vb)):
        raise ValueError("paired needs finite values: a diverged run has no difference; compare the arms with "
                         "unpaired, which ranks a diverged run worst")
    d = np.array(va) - np.array(vb)  # (n,)
    n = len(d)
    mean = float(d.mean())
    interval = _bootstrap((d,), _mean) if n > 1 else (mean, mean)
    p, exact = _permutation_p((d,), _mean, "samples", 2 ** n) if n > 1 else (1.0, True)
    return Comparison(tuple(names), (tuple(va), tuple(vb)), True, higher_is_better, mean, interval, mean, interval,
                      p, exact, min(1.0, 2 / 2 ** n), alpha=alpha)


def unpaired(a: Sequence[float], b: Sequence[float], names: tuple[str, str] = ("A", "B"),
             higher_is_better: bool = True, alpha: float = ALPHA) -> Comparison:
    """Arms with nothing shared. The probability of improvement P(a better than b) with a stratified
    bootstrap interval, the difference of means with its interval, and a two-sided permutation p-value
    on the probability of improvement (exact up to 100,000 splits). A diverged run (NaN) is the worst."""
    va, vb = _floats(a, "a"), _floats(b, "b")
    names, higher_is_better, alpha = _arm_options(names, higher_is_better, alpha)
    sign = 1.0 if higher_is_better else -1.0
    xa = np.array(_finite_or_worst(va, higher_is_better)) * sign  # (n_a,) higher is better
    xb = np.array(_finite_or_worst(vb, higher_is_better)) * sign  # (n_b,)
    effect = float(_improvement(xa, xb))
    splits = math.comb(len(xa) + len(xb), len(xa))
    enough = len(xa) > 1 and len(xb) > 1  # scipy resamples and permutes arms of two runs or more
    interval = _bootstrap((xa, xb), _improvement) if enough else (effect, effect)
    p, exact = _permutation_p((xa, xb), _improvement, "independent", splits) if enough else (1.0, True)
    if all(map(math.isfinite, va + vb)):
        ra, rb = np.array(va), np.array(vb)
        difference = float(ra.mean() - rb.mean())
        spread = _bootstrap((ra, rb), _difference_of_means) if enough else (difference, difference)
    else:
        difference, spread = math.nan, (math.nan, math.nan)
    return Comparison(tuple(names), (tuple(va), tuple(vb)), False, higher_is_better, effect, interval, difference,
                      spread, p, exact, min(1.0, 2 / splits) if enough else 1.0, alpha=alpha)


COLUMNS = ("comparison", "by seed", "effect", "95% CI", "p", "verdict")


def table(comparisons: Sequence[Comparison], title: str | None = None, labels: Sequence[str] | None = None) -> None:
    """Show comparisons as one `minirl.table`, a row each (`Comparison.row`), after a first column of
    `labels` (what each compares) where given; the title says how their p-values were taken when they
    are a family (`family`): Holm-adjusted over k, or unadjusted."""
    from .tables import table as show

    comparisons = _comparisons(comparisons, "table")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"compare.table: title must be a string or None, got {type(title).__name__}")
    if labels is not None:
        if isinstance(labels, str) or not isinstance(labels, Sequence):
            raise TypeError(f"compare.table: labels must be a list of strings, one per comparison, got "
                            f"{type(labels).__name__}{' (one string: wrap it, [label])' if isinstance(labels, str) else ''}")
    if labels is not None and len(labels) != len(comparisons):
        raise ValueError(f"compare.table: {len(labels)} labels for {len(comparisons)} comparisons")
    k = max((c.comparisons for c in comparisons), default=1)
    how = ("" if k == 1 else f"p Holm-adjusted over {k} comparisons" if comparisons[0].adjusted
           else f"p unadjusted, each one of {k} comparisons")
    rows = [c.row() if labels is None else (label, *c.row()) for c, label in zip(comparisons, labels or comparisons)]
    show(rows, COLUMNS if labels is None else ("measure", *COLUMNS), "; ".join(t for t in (title, how) if t) or None)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: sorted ascending, the i-th smallest p (from 0) times (k - i), made
    non-decreasing and capped at 1. A verdict at adjusted p <= alpha keeps the family-wise error at alpha."""
    pvalues = _floats(pvalues, "pvalues", empty_ok=True, each="one per comparison")
    for i, p in enumerate(pvalues):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"holm: pvalues[{i}] is {p!r}; a p-value lies in [0, 1]")
    k = len(pvalues)
    order = sorted(range(k), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * k, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def family(comparisons: Sequence[Comparison], adjust: bool = True) -> list[Comparison]:
    """The k comparisons one cell makes, each printing k. adjust: Holm-adjust their p-values over all k
    (every verdict then holds with a family-wise error of alpha); False keeps each p as it is, for a
    cell whose seeds could not survive the adjustment, and the line says they are unadjusted."""
    comparisons = _comparisons(comparisons, "family")
    adjust = _flag("adjust", adjust)
    adjusted = holm([c.p for c in comparisons]) if adjust else [c.p for c in comparisons]
    return [replace(c, p=p, comparisons=len(comparisons), adjusted=adjust) for c, p in zip(comparisons, adjusted)]


@dataclass(frozen=True)
class Estimate:
    """A point estimate over runs and its 95% bootstrap interval."""
    value: float
    interval: tuple[float, float]

    def __str__(self) -> str:
        fmt = _formatter([self.value, *self.interval])
        return f"{fmt(self.value)} [95% CI {fmt(self.interval[0])}, {fmt(self.interval[1])}]"


def iqm(values: Sequence[float]) -> Estimate:
    """The interquartile mean (the mean of the middle half of the runs, `scipy.stats.trim_mean` at 0.25)
    and its percentile bootstrap interval; robust to a few collapsed runs. values: (n,) finite."""
    x = np.array(_floats(values, "values"))
    if not np.isfinite(x).all():
        raise ValueError("iqm needs finite values: a diverged run has no place in a mean")
    value = float(stats.trim_mean(x, 0.25))
    return Estimate(value, _bootstrap((x,), _iqm) if len(x) > 1 else (value, value))


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def _iqm(x, axis=-1):
    return stats.trim_mean(x, 0.25, axis=axis)


def _improvement(x, y, axis=-1):
    """P(X > Y) + P(X = Y) / 2 over every pair, batched over leading dimensions. x: (..., n_a), y: (..., n_b)."""
    x, y = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    gt = x[..., :, None] > y[..., None, :]  # (..., n_a, n_b)
    eq = x[..., :, None] == y[..., None, :]
    return (gt + 0.5 * eq).mean(axis=(-2, -1))


def _difference_of_means(x, y, axis=-1):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _bootstrap(data, statistic) -> tuple[float, float]:
    """The 95% percentile interval over RESAMPLES resamples, each arm resampled on its own (stratified),
    from a fixed generator so a printed interval is the same on every run."""
    res = stats.bootstrap(data, statistic, n_resamples=RESAMPLES, vectorized=True,
                          confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _permutation_p(data, statistic, kind: str, count: int) -> tuple[float, bool]:
    """Two-sided permutation p-value: exact when the `count` rearrangements number at most EXACT_UP_TO."""
    exact = count <= EXACT_UP_TO
    res = stats.permutation_test(data, statistic, permutation_type=kind, vectorized=True, alternative="two-sided",
                                 n_resamples=np.inf if exact else RESAMPLES, rng=np.random.default_rng(0))
    return float(min(1.0, res.pvalue)), exact


def _floats(values: Sequence[float], name: str, empty_ok: bool = False, keep: bool = False,
            each: str = "one per run (seed)") -> list:
    """`values` (a list, tuple, range, NumPy or torch 1-D array of numbers) as a list of floats (the
    values themselves with `keep`), after checking it is a sequence of numbers and, unless empty_ok,
    not empty. A dict is refused: iterating it would read its keys (the seeds) as the values."""
    if isinstance(values, Mapping):
        raise TypeError(f"{name} is a {'dict' if type(values) is dict else type(values).__name__}; iterating it would read its keys (seeds?) as "
                        f"the values. Pass the values in seed order: [{name}[s] for s in seeds]")
    if isinstance(values, (str, bytes)) or values is None or not hasattr(values, "__iter__") or isinstance(values, (set, frozenset)):
        got = f"the string {values!r}" if isinstance(values, (str, bytes)) else f"{values!r} ({type(values).__name__})"
        hint = (": sets have no order; pass a list" if isinstance(values, (set, frozenset)) else
                f": for one, pass [{values!r}]" if isinstance(values, (int, float, np.number)) else "")
        raise TypeError(f"{name} must be a list of numbers, {each}, got {got}{hint}")
    if getattr(values, "ndim", 1) != 1:
        raise ValueError(f"{name} must be one-dimensional, {each}, got shape {tuple(values.shape)}")
    out = []
    for i, v in enumerate(values):
        try:
            if isinstance(v, (str, bytes)) or v is None:
                raise TypeError
            x = float(v)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name}[{i}] must be a number, got {v!r} ({type(v).__name__}); {name} holds numbers, "
                            f"{each}") from None
        out.append(v if keep else x)
    if not out and not empty_ok:
        raise ValueError(f"a comparison needs at least one run per arm; {name} is empty")
    return out


def _finite(name: str, value) -> None:
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def _arm_options(names, higher_is_better, alpha) -> tuple[tuple[str, str], bool, float]:
    """paired's and unpaired's options, checked: two different names, a flag, 0 < alpha < 1."""
    if isinstance(names, str) or not isinstance(names, (tuple, list)):
        raise TypeError(f"names must be a pair of names, one per arm, such as ('PPO', 'REINFORCE'), got {names!r}")
    if len(names) != 2 or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be two strings, one per arm (a first, then b), got {names!r}")
    if names[0] == names[1]:
        raise ValueError(f"names are both {names[0]!r}: give each arm its own name, or the verdict cannot say "
                         "which is ahead")
    higher_is_better = _flag("higher_is_better", higher_is_better)
    if isinstance(alpha, (bool, str, bytes)) or not isinstance(alpha, (int, float, np.number)):
        raise TypeError(f"alpha must be a number in (0, 1), e.g. 0.05, got {alpha!r} ({type(alpha).__name__})")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), e.g. 0.05, got {alpha!r}")
    return tuple(names), higher_is_better, alpha


def _comparisons(comparisons, caller: str) -> list[Comparison]:
    """`comparisons` as a list, after checking it is a list (or other iterable) of Comparisons."""
    if isinstance(comparisons, Comparison):
        raise TypeError(f"compare.{caller} takes a list of comparisons; for one, pass [comparison]")
    if isinstance(comparisons, (str, bytes, Mapping)) or not hasattr(comparisons, "__iter__"):
        raise TypeError(f"compare.{caller} takes a list of comparisons (from paired or unpaired), got "
                        f"{type(comparisons).__name__}")
    out = list(comparisons)
    for i, c in enumerate(out):
        if not isinstance(c, Comparison):
            raise TypeError(f"compare.{caller}: item {i} is a {type(c).__name__}, not a Comparison; pass what "
                            "paired or unpaired return")
    return out


def _formatter(values: Sequence[float]):
    """Enough decimals (2 to 4) that the values' spread shows: printing rounds, comparing never does."""
    finite = [v for v in values if math.isfinite(v)]
    spread = max(finite) - min(finite) if len(finite) > 1 else 0.0
    decimals = 2 if spread == 0 else min(4, max(2, 1 - math.floor(math.log10(spread))))

    def fmt(v: float, sign: bool = False) -> str:
        if not math.isfinite(v):
            return "diverged"
        v = 0.0 if abs(v) < 0.5 * 10 ** -decimals else v  # no "-0.00"
        return f"{v:+.{decimals}f}" if sign else f"{v:.{decimals}f}"
    return fmt


def at_kl(kl: Sequence[float], metric: Sequence[float], levels: Sequence[float]) -> list[float]:
    """One run's metric where its own KL trajectory (evaluations in step order) first reaches each
    level: linear interpolation between the evaluation below the level and the first at or above it.
    NaN for a level the run never reaches. kl, metric: (E,) each; returns (len(levels),). The KLs and
    levels must be numbers, not NaN (a diverged run's metric may be NaN: it reads as NaN)."""
    kl = _floats(kl, "kl", empty_ok=True, keep=True, each="one per evaluation")
    metric = _floats(metric, "metric", empty_ok=True, keep=True, each="one per evaluation")
    if isinstance(levels, (int, float, np.number)) and not isinstance(levels, bool):
        raise TypeError(f"at_kl: levels must be a list of KL levels, got the number {levels!r}: for one level pass "
                        f"[{levels!r}] (at_kl returns one metric per level)")
    levels = _floats(levels, "levels", empty_ok=True, keep=True, each="the KL levels")  # the values as given: the arithmetic is unchanged
    for i, k in enumerate(kl):
        if math.isnan(float(k)):
            raise ValueError(f"at_kl: kl[{i}] is NaN; a KL trajectory needs a KL at every evaluation (drop the "
                             "evaluations that have none, with their metrics)")
    for i, level in enumerate(levels):
        if not math.isfinite(float(level)):
            raise ValueError(f"at_kl: levels[{i}] is {level!r}; each level must be a finite KL, e.g. 0.5")
    if len(kl) != len(metric) or len(kl) == 0:
        raise ValueError(f"at_kl needs one metric per evaluation, got {len(kl)} KLs and {len(metric)} metrics")
    out = []
    for level in levels:
        i = next((j for j, k in enumerate(kl) if k >= level), None)
        if i is None:
            out.append(float("nan"))
        elif i == 0:
            out.append(float(metric[0]))
        else:
            t = (level - kl[i - 1]) / (kl[i] - kl[i - 1])  # kl[i-1] < level <= kl[i]
            out.append(float(metric[i - 1] + t * (metric[i] - metric[i - 1])))
    return out


@dataclass(frozen=True)
class Window:
    """A run's evaluations over a late window of steps [start, end]."""
    steps: tuple[int, ...]
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        """The middle evaluation (NaN where the run diverged inside the window)."""
        if any(map(math.isnan, self.values)):
            return math.nan
        s = sorted(self.values)
        n = len(s)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    @property
    def worst(self) -> float:
        return min(self.values)

    def share_at_least(self, threshold: float) -> float:
        """The share of the window's evaluations at or above threshold (e.g. steps whose valid share >= 0.9)."""
        _finite("threshold", threshold)
        return sum(v >= threshold for v in self.values) / len(self.values)


def window(steps: Sequence[int], values: Sequence[float], start: int, end: int | None = None) -> Window:
    """The evaluations of one run with start <= step <= end (end: the last step)."""
    steps = _floats(steps, "steps", empty_ok=True, keep=True, each="one per evaluation")
    values = _floats(values, "values", empty_ok=True, each="one per evaluation")
    _finite("start", start)
    if end is not None:
        _finite("end", end)
        if end < start:
            raise ValueError(f"window: end ({end}) is before start ({start}); the window is start <= step <= end")
    if not steps:
        raise ValueError("window needs a run's evaluations, got none (steps and values are empty)")
    if len(steps) != len(values):
        raise ValueError(f"window needs one value per step, got {len(steps)} steps and {len(values)} values")
    end = max(steps) if end is None else end
    kept = [(s, float(v)) for s, v in zip(steps, values) if start <= s <= end]
    if not kept:
        raise ValueError(f"no evaluation between steps {start} and {end} (steps run {min(steps)}..{max(steps)})")
    return Window(tuple(s for s, _ in kept), tuple(v for _, v in kept))


@dataclass(frozen=True)
class RateChoice:
    """The chosen rate, each rate's mean score over the tuning seeds, and the chosen rate against the
    runner-up (paired over the tuning seeds both ran)."""
    rate: float
    means: dict[float, float]
    at_edge: bool
    against_runner_up: Comparison | None

    def __str__(self) -> str:
        means = ", ".join(f"{lr:g}: {m:+.3f}" for lr, m in self.means.items())
        edge = " AT THE GRID'S EDGE: the grid does not bracket the optimum; extend it" if self.at_edge else ""
        versus = f"; against the runner-up: {self.against_runner_up}" if self.against_runner_up else ""
        return f"rate {self.rate:g} (mean over tuning seeds {means}){edge}{versus}"


def choose_rate(scores: Mapping[float, Mapping[int, float]], reported_seeds: Sequence[int] = (),
                higher_is_better: bool = True) -> RateChoice:
    """The learning rate with the best mean score over its tuning seeds. scores: {rate: {seed: score}}
    on a grid of at least three rates; a diverged run (NaN) counts as the worst score. Raises if a
    tuning seed is a reported seed (a rate tuned on the runs it reports is optimistic)."""
    if not isinstance(scores, Mapping):
        raise TypeError(f"choose_rate: scores must be a dict {{rate: {{seed: score}}}}, got {type(scores).__name__}")
    for lr, per_seed in scores.items():
        if isinstance(lr, (bool, str, bytes)) or not isinstance(lr, (int, float, np.number)):
            raise TypeError(f"choose_rate: the keys of scores must be the rates (numbers), got {lr!r} "
                            f"({type(lr).__name__})")
        if not math.isfinite(lr):
            raise ValueError(f"choose_rate: a rate (a key of scores) is {lr!r}; each rate must be a finite number")
        if not isinstance(per_seed, Mapping):
            raise TypeError(f"choose_rate: scores[{lr!r}] must be a dict {{seed: score}} (each score keyed by its tuning "
                            f"seed), got {type(per_seed).__name__}")
        if not per_seed:
            raise ValueError(f"choose_rate: rate {lr!r} has no runs (scores[{lr!r}] is empty); each rate needs a score "
                             "on at least one tuning seed")
        _floats(list(per_seed.values()), f"scores[{lr!r}]")
    if isinstance(reported_seeds, (str, bytes, Mapping)) or not hasattr(reported_seeds, "__iter__"):
        raise TypeError(f"choose_rate: reported_seeds must be a list of seeds, e.g. range(6) or (0, 1, 2), got "
                        f"{reported_seeds!r} ({type(reported_seeds).__name__})")
    higher_is_better = _flag("higher_is_better", higher_is_better)
    if len(scores) < 3:
        raise ValueError(f"choose_rate needs a grid of at least three rates to bracket an optimum, got {sorted(scores)}")
    reused = sorted({s for per_seed in scores.values() for s in per_seed} & set(reported_seeds))
    if reused:
        raise ValueError(f"tuning seeds {reused} are also reported seeds: tune on other seeds")
    grid = sorted(scores)
    means = {lr: sum(_finite_or_worst(scores[lr].values(), higher_is_better)) / len(scores[lr]) for lr in grid}
    sign = 1.0 if higher_is_better else -1.0
    ranked = sorted(grid, key=lambda lr: -sign * means[lr])
    best, runner_up = ranked[0], ranked[1]
    shared = sorted(set(scores[best]) & set(scores[runner_up]))  # the tuning seeds both rates ran
    if not shared:
        raise ValueError(f"choose_rate: rates {best:g} and {runner_up:g} share no tuning seed, so they cannot be "
                         "compared seed by seed; run every rate on the same tuning seeds")
    a, b = [scores[best][s] for s in shared], [scores[runner_up][s] for s in shared]
    compared = paired if all(map(math.isfinite, a + b)) else unpaired  # a diverged run has no paired difference
    versus = compared(a, b, (f"{best:g}", f"{runner_up:g}"), higher_is_better)
    return RateChoice(best, means, best in (grid[0], grid[-1]), versus)


def sweep_rate(rows: Sequence[Mapping], rates: Sequence[float], score: str, reported_seeds: Sequence[int],
               higher_is_better: bool = True) -> float:
    """The rate a sweep reports at: `choose_rate` over one method's tuning rows (dicts with 'lr', 'seed'
    and `score`) on its grid `rates`. Raises where the choice sits at the grid's edge (extend the grid)."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise TypeError(f"sweep_rate: rows must be a list of dicts (one per run, with 'lr', 'seed' and the score), "
                        f"got {type(rows).__name__}")
    if not isinstance(score, str):
        raise TypeError(f"sweep_rate: score must be the name of a column of rows (a string such as 'pass1'), got "
                        f"{score!r} ({type(score).__name__})")
    rates = _floats(rates, "rates", keep=True, each="the grid's learning rates")
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise TypeError(f"sweep_rate: rows[{i}] must be a dict with 'lr', 'seed' and {score!r}, got {type(r).__name__}")
        needed = ("lr", "seed", score) if "lr" in r and r["lr"] in rates else ("lr",)
        missing = [c for c in needed if c not in r]
        if missing:
            raise ValueError(f"sweep_rate: rows[{i}] has no column {missing[0]!r}; its columns: {', '.join(map(str, r))}")
    for lr in rates:
        if not any(r["lr"] == lr for r in rows):
            raise ValueError(f"sweep_rate: no row has lr == {lr!r}, a rate of the grid; the rows' rates: "
                             f"{sorted({r['lr'] for r in rows}, key=str)} (is the grid right, or a run missing?)")
    choice = choose_rate({lr: {r["seed"]: r[score] for r in rows if r["lr"] == lr} for lr in rates}, reported_seeds,
                         higher_is_better)
    if choice.at_edge:
        raise ValueError(str(choice))
    return choice.rate


def _finite_or_worst(values, higher_is_better: bool) -> list[float]:
    worst = -math.inf if higher_is_better else math.inf
    return [float(v) if math.isfinite(v) else worst for v in values]
