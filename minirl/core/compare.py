"""Comparing runs the way a careful reader will check the comparison.

Every empirical comparison in the lessons and sweeps goes through these four functions:

- `compare_seeds`: every seed's value shown, and a verdict ("A ahead") only when the seeds separate:
  every seed of one method beyond every seed of the other. Under no difference, with the seeds
  exchangeable, a complete separation of n_a and n_b runs happens by chance with probability
  2 / C(n_a + n_b, n_a) (0.1 at three seeds each; 0.29 at two), which the verdict prints. Anything
  less than a separation reads "no difference that these seeds can detect", with both ranges.
- `at_kl`: "at matched KL" read off one run's own trajectory: the metric where the run's KL first
  reaches each common level, interpolated between the two evaluations that straddle it (NaN if
  the run never gets there). Never bins that pool evaluations of different runs and steps.
- `window`: a run that oscillates judged over its late evaluations (median, worst point, share
  above a threshold), not by its last one.
- `choose_rate`: a learning rate chosen on a grid by the mean score over tuning seeds that are not
  the reported ones; a choice at either end of the grid is flagged, because the grid does not
  bracket the optimum and must be extended; the runner-up is compared with `compare_seeds`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["Verdict", "compare_seeds", "at_kl", "Window", "window", "RateChoice", "choose_rate", "sweep_rate"]


@dataclass(frozen=True)
class Verdict:
    """Two methods' per-seed values and what they support. leader: the name ahead, or None."""
    names: tuple[str, str]
    values: tuple[tuple[float, ...], tuple[float, ...]]  # a diverged run (NaN) as the worst value, +-inf
    leader: str | None
    chance: float  # probability of a separation this complete (either way) when there is no difference

    def __str__(self) -> str:
        (a, b), (va, vb) = self.names, self.values
        shown = f"{a}: {_values(va)} | {b}: {_values(vb)}"
        if self.leader is None:
            return (f"{shown} -> no difference that {len(va)} and {len(vb)} seeds can detect "
                    f"({a} {_range(va)}, {b} {_range(vb)})")
        return f"{shown} -> {self.leader} ahead on every seed (chance of a separation this complete: {self.chance:.2f})"


def compare_seeds(a: Sequence[float], b: Sequence[float], names: tuple[str, str] = ("A", "B"),
                  higher_is_better: bool = True) -> Verdict:
    """A verdict on two sets of runs (one value per seed): a leader only where every seed of one is
    better than every seed of the other. NaN (a diverged run) counts as the worst value."""
    va, vb = _finite_or_worst(a, higher_is_better), _finite_or_worst(b, higher_is_better)
    if not va or not vb:
        raise ValueError(f"compare_seeds needs at least one run per method, got {len(va)} and {len(vb)}")
    sign = 1.0 if higher_is_better else -1.0
    leader = None
    if min(sign * x for x in va) > max(sign * x for x in vb):
        leader = names[0]
    elif min(sign * x for x in vb) > max(sign * x for x in va):
        leader = names[1]
    chance = min(1.0, 2.0 / math.comb(len(va) + len(vb), len(va)))
    return Verdict(tuple(names), (tuple(va), tuple(vb)), leader, chance)


def at_kl(kl: Sequence[float], metric: Sequence[float], levels: Sequence[float]) -> list[float]:
    """One run's metric where its own KL trajectory (evaluations in step order) first reaches each
    level: linear interpolation between the evaluation below the level and the first at or above it.
    NaN for a level the run never reaches. kl, metric: (E,) each; returns (len(levels),)."""
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
        s = sorted(self.values)
        n = len(s)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    @property
    def worst(self) -> float:
        return min(self.values)

    def share_at_least(self, threshold: float) -> float:
        """The share of the window's evaluations at or above threshold (e.g. steps whose valid share >= 0.9)."""
        return sum(v >= threshold for v in self.values) / len(self.values)


def window(steps: Sequence[int], values: Sequence[float], start: int, end: int | None = None) -> Window:
    """The evaluations of one run with start <= step <= end (end: the last step)."""
    if len(steps) != len(values):
        raise ValueError(f"window needs one value per step, got {len(steps)} steps and {len(values)} values")
    end = max(steps) if end is None else end
    kept = [(s, float(v)) for s, v in zip(steps, values) if start <= s <= end]
    if not kept:
        raise ValueError(f"no evaluation between steps {start} and {end} (steps run {min(steps)}..{max(steps)})")
    return Window(tuple(s for s, _ in kept), tuple(v for _, v in kept))


@dataclass(frozen=True)
class RateChoice:
    """The chosen rate, each rate's mean score over the tuning seeds, and the chosen rate against the runner-up."""
    rate: float
    means: dict[float, float]
    at_edge: bool
    against_runner_up: Verdict | None

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
    versus = compare_seeds(list(scores[best].values()), list(scores[runner_up].values()),
                           (f"{best:g}", f"{runner_up:g}"), higher_is_better)
    return RateChoice(best, means, best in (grid[0], grid[-1]), versus)


def sweep_rate(rows: Sequence[Mapping], rates: Sequence[float], score: str, reported_seeds: Sequence[int],
               higher_is_better: bool = True) -> float:
    """The rate a sweep reports at: `choose_rate` over one method's tuning rows (dicts with 'lr', 'seed'
    and `score`) on its grid `rates`. Raises where the choice sits at the grid's edge (extend the grid)."""
    choice = choose_rate({lr: {r["seed"]: r[score] for r in rows if r["lr"] == lr} for lr in rates}, reported_seeds,
                         higher_is_better)
    if choice.at_edge:
        raise ValueError(str(choice))
    return choice.rate

def _finite_or_worst(values, higher_is_better: bool) -> list[float]:
    worst = -math.inf if higher_is_better else math.inf
    return [float(v) if math.isfinite(v) else worst for v in values]


def _values(values: Sequence[float]) -> str:
    return " ".join(f"{v:+.2f}" if math.isfinite(v) else "diverged" for v in values)


def _range(values: Sequence[float]) -> str:
    return f"{_values([min(values)])} to {_values([max(values)])}"
