"""Where a lesson finds its recorded sweeps, wherever the notebook was copied.

A lesson plots sweeps recorded in the repository's `lessons/sweeps/`: a script (its settings, and
functions that read its results back) and its CSVs. A copy of the lesson elsewhere (an nbgrader
release, a student's folder) finds them too: `sweeps/` beside the notebook first, else the
repository minirl was installed from.

    load_sweep("rlhf")           # lessons/sweeps/rlhf.py as a module: sweep.read_rows("rlhf_evals"), ...
    sweep_rows("stale.csv")      # a recorded CSV's rows, each a dict of strings
    sweep_path("stale.csv")      # the file itself
"""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["sweep_path", "sweep_rows", "load_sweep", "REPOSITORY_SWEEPS"]

# the repository's recorded sweeps, found from minirl's own files (the course installs it editable)
REPOSITORY_SWEEPS = Path(__file__).resolve().parents[2] / "lessons" / "sweeps"


def sweep_path(name: str, repository: Path = REPOSITORY_SWEEPS) -> Path:
    """The path of a recorded sweep's file, e.g. sweep_path("rlhf.py"): `sweeps/<name>` in the
    working directory (beside the notebook) if it is there, else `<name>` in the repository's
    `lessons/sweeps/`. Neither: FileNotFoundError, saying how to put the sweeps beside the lesson."""
    for path in (Path("sweeps") / name, repository / name):
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"no recorded sweep {name!r} in {Path.cwd() / 'sweeps'} or {repository}: copy the course's "
        f"lessons/sweeps/ folder beside this notebook (for nbgrader, into source/<assignment>/ before "
        f"generate_assignment)")


def sweep_rows(name: str) -> list[dict[str, str]]:
    """A recorded CSV's rows (csv.DictReader's: one dict of strings per row), found by sweep_path."""
    with open(sweep_path(name), newline="") as f:
        return list(csv.DictReader(f))


def load_sweep(name: str) -> ModuleType:
    """A recorded sweep's script, `<name>.py` found by sweep_path, run as the module `<name>_sweep`
    (not added to sys.modules): its settings, and its functions that read its CSVs back."""
    spec = importlib.util.spec_from_file_location(f"{name}_sweep", sweep_path(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
