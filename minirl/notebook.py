"""What a lesson's first cell calls: `minirl.setup()`, and the progress bar lessons use.

Stored outputs must re-run identically on another machine and at another thread count, so the
setup fixes everything that would otherwise leak into them: seeds, print precision, warnings,
figure format (PNG: SVG carries random ids), and progress bars (shown live in Jupyter, switched
off by MINIRL_PROGRESS=0, which the headless refresh and CI set).
"""
from __future__ import annotations

import os
import random
import warnings

import numpy as np
import torch


def progress_enabled() -> bool:
    return os.environ.get("MINIRL_PROGRESS", "1") != "0"


def progress(iterable, **kwargs):
    """A tqdm progress bar (a widget in Jupyter) that leaves nothing behind when done."""
    from tqdm.auto import tqdm

    return tqdm(iterable, leave=False, disable=not progress_enabled(), **kwargs)


def setup(seed: int = 0) -> None:
    """Seed Python, NumPy and torch; set print options, warning filters and PNG figures."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_printoptions(precision=4, sci_mode=False)
    np.set_printoptions(precision=4, suppress=True)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*IProgress not found.*")
    warnings.filterwarnings("ignore", module="tqdm")
    try:
        import matplotlib.pyplot as plt
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
        plt.rcParams.update({"figure.dpi": 80, "figure.figsize": (6, 3.5), "axes.grid": True})
    except ImportError:  # outside Jupyter: plots are not shown anyway
        pass
