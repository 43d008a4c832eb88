"""The course's figure style, and one way to draw runs over seeds.

`style()` (called by `minirl.setup()`) sets what every lesson's figures share: a resolution that is
sharp on a laptop screen, a colour-blind-safe palette (Okabe and Ito's eight colours, so "C0", "C1",
... in a lesson name them), light grids, no top or right spines, and small framed legends.

`runs_band(ax, x, runs)` draws runs over seeds the way the course reports them: every run faint, so
every seed stays visible, with their median bold and the band between their first and third
quartiles. The median and quartiles rather than the mean and a standard error, because runs here
can collapse, and one collapsed run drags a mean where no run is.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

__all__ = ["PALETTE", "style", "runs_band"]

# Okabe & Ito (2008), "Color universal design": distinguishable under the common colour-vision deficiencies;
# yellow (#F0E442) comes last, as it is faint on white
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")


def style() -> None:
    """Set matplotlib's defaults to the course's style (only rcParams: nothing is drawn)."""
    import matplotlib.pyplot as plt
    from cycler import cycler

    plt.rcParams.update({
        "figure.dpi": 110, "figure.figsize": (6, 3.5), "savefig.dpi": 110,
        "axes.prop_cycle": cycler(color=PALETTE), "axes.grid": True, "grid.alpha": 0.35,
        "axes.spines.top": False, "axes.spines.right": False, "axes.titlesize": 10, "axes.labelsize": 9,
        "xtick.labelsize": 8, "ytick.labelsize": 8, "legend.fontsize": 8, "legend.framealpha": 0.9,
        "mathtext.fontset": "dejavusans",
    })


def runs_band(ax, x: Sequence[float], runs: Sequence[Sequence[float]], color: str | None = None,
              label: str | None = None, style: str = "-") -> None:
    """Every run of `runs` (one sequence per seed, each as long as `x`) drawn faint, their median bold,
    and the band between their first and third quartiles. NaN (a run not evaluated there) is left out
    of that step's median and band."""
    values = np.asarray(runs, dtype=float)  # (seeds, len(x))
    if values.ndim != 2 or values.shape[1] != len(x):
        raise ValueError(f"runs must be one sequence per seed, each as long as x ({len(x)}); got shape {values.shape}")
    with warnings.catch_warnings():  # a step where no run was evaluated: NaN, drawn as a gap
        warnings.simplefilter("ignore", RuntimeWarning)
        low, median, high = np.nanpercentile(values, [25, 50, 75], axis=0)
    (line,) = ax.plot(x, median, style, color=color, lw=2, label=label, zorder=3)
    for run in values:
        ax.plot(x, run, style, color=line.get_color(), lw=0.7, alpha=0.3)
    ax.fill_between(x, low, high, color=line.get_color(), alpha=0.18, lw=0)
