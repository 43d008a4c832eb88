"""What a lesson's first cell calls: `minirl.setup()`, and the progress bar lessons use.

Stored outputs must re-run identically on another machine and at another thread count, so the
setup fixes everything that would otherwise leak into them: seeds, print precision, warnings,
figure format (PNG: SVG carries random ids), and progress bars (shown live in Jupyter and emptied
when done, switched off by MINIRL_PROGRESS=0, which the headless refresh and CI set).
"""
from __future__ import annotations

import os
import random
import time
import warnings

import numpy as np
import torch

from .figures import style

__all__ = ["progress_enabled", "in_jupyter", "progress", "require", "setup"]


def progress_enabled() -> bool:
    return os.environ.get("MINIRL_PROGRESS", "1") != "0"


def in_jupyter() -> bool:
    """Running inside a Jupyter kernel (not a terminal, not a script)?"""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in shell.config


def progress(iterable, desc: str = ""):
    """Iterate with a progress bar that leaves nothing behind once the loop ends: in Jupyter, an
    HTML bar updated in place and emptied at the end (a tqdm widget would be saved into the
    notebook and read "model not found" when the student reopens it); elsewhere tqdm's text bar,
    cleared at the end. MINIRL_PROGRESS=0 turns both off."""
    if not progress_enabled():
        yield from iterable
    elif in_jupyter():
        yield from html_progress(iterable, desc)
    else:
        from tqdm import tqdm

        yield from tqdm(iterable, desc=desc, leave=False)


def html_progress(iterable, desc: str):
    """`progress` in Jupyter: one display, updated at most five times a second, then emptied."""
    from IPython.display import display

    total = len(iterable) if hasattr(iterable, "__len__") else None
    handle = display({"text/plain": ""}, raw=True, display_id=True)
    start = shown = time.perf_counter()
    try:
        for i, item in enumerate(iterable):
            now = time.perf_counter()
            if i == 0 or now - shown > 0.2:
                handle.update({"text/html": bar_html(desc, i, total, now - start)}, raw=True)
                shown = now
            yield item
    finally:
        handle.update({"text/plain": ""}, raw=True)


def bar_html(desc: str, done: int, total: int | None, seconds: float) -> str:
    """A progress element and a line of text: '<desc> 12/40, 3 s so far, about 7 s left'."""
    left = f", about {seconds / done * (total - done):.0f} s left" if done and total else ""
    count = f"{done}/{total}" if total else f"{done}"
    bar = f'<progress value="{done}" max="{total}" style="width: 16em"></progress> ' if total else ""
    return f"{bar}<code>{desc} {count}, {seconds:.0f} s so far{left}</code>"


def require(*modules: str, lesson: str = "this lesson") -> None:
    """Stop with one clear line, naming the command that installs them, when `modules` are missing
    (lesson 16's transformers and TRL are not in the lessons' own install, `make course`)."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(f"{lesson} needs {' and '.join(missing)}, which `make course` leaves out (about 0.5 GB): "
                                  "run `make trl` in the course folder (or `.venv/bin/pip install -c constraints.txt -e "
                                  "\".[trl]\"`), then restart the kernel")


def setup(seed: int = 0) -> None:
    """Seed Python, NumPy and torch; set print options, warning filters, and PNG figures in the course's style."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_printoptions(precision=4, sci_mode=False)
    np.set_printoptions(precision=4, suppress=True)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*IProgress not found.*")
    warnings.filterwarnings("ignore", module="tqdm")
    style()
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside Jupyter: plots are not shown anyway
        return
    if get_ipython() is not None:  # outside IPython it would start a shell that replaces sys.modules['__main__']
        set_matplotlib_formats("png")
