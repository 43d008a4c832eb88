"""Where the course's data lives, and the manifest that guards it.

`data/` sits beside the package, so an editable install (`pip install -e .`) finds it. A
non-editable install points at it with the `MINIRL_DATA` environment variable. Every file the
course loads is listed in `data/MANIFEST.json` with its sha256; `verified_path` checks a file
against it once per process and raises `DataError` naming the file and the command that
rebuilds it.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from . import validate

__all__ = ["MANIFEST", "REBUILD_COMMANDS", "DataError", "data_dir", "rebuild_command", "sha256", "read_manifest",
           "write_manifest", "verified_path", "build_named"]

MANIFEST = "MANIFEST.json"

# Which command writes which files (matched by path prefix, first match wins).
REBUILD_COMMANDS = {
    "checkpoints/rm_": "python -m minirl.train.reward_models",
    "checkpoints/prm_": "python -m minirl.train.process_models",
    "checkpoints/orm_": "python -m minirl.train.process_models",
    "checkpoints/sft": "python -m minirl.train.sft_model",
    "checkpoints/tool": "python -m minirl.train.tool_model",
    "checkpoints/steps": "python -m minirl.train.steps_model",
    "checkpoints/capstone_baseline": "python -m minirl.course.capstone baseline",
    "checkpoints/": "python -m minirl.train.pretrain",
    "": "python -m minirl.world",
}


class DataError(RuntimeError):
    """A course data file is missing, corrupted, or cannot be found."""


def data_dir(create: bool = False) -> Path:
    """The `data/` folder: `$MINIRL_DATA` if set, else the one beside the package.

    create: for the commands that write the data (`python -m minirl.world`): make the folder if
    it is missing instead of requiring it to hold the course's data already.
    """
    env = os.environ.get("MINIRL_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "data"
    if create:
        path.mkdir(parents=True, exist_ok=True)
        return path
    if env:
        if not (path / MANIFEST).is_file():
            raise DataError(f"MINIRL_DATA={env} is not the course's data folder (it has no {MANIFEST}). Point it at "
                            "the data/ folder of a checkout, or build one there with `python -m minirl.world`.")
        return path
    if not (path / MANIFEST).is_file():
        raise DataError(
            "Cannot find the course's data/ folder beside the minirl package (a non-editable install?). "
            "Either install the course with `pip install -e .` from its checkout, or set "
            "MINIRL_DATA=/path/to/checkout/data."
        )
    return path


def rebuild_command(relpath: str) -> str:
    """The command that writes `relpath` (relative to data/)."""
    for prefix, command in REBUILD_COMMANDS.items():
        if relpath.startswith(prefix):
            return command
    raise AssertionError("unreachable: '' matches every path")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(root: Path) -> dict[str, str]:
    path = root / MANIFEST
    fix = f"Restore it with `git checkout data/{MANIFEST}` or rebuild the data with `python -m minirl.world`."
    if not path.is_file():
        raise DataError(f"{path} is missing. {fix}")
    try:
        entries = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"data/{MANIFEST} is corrupted (not valid JSON: {e}). {fix}") from None
    if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
        raise DataError(f"data/{MANIFEST} is corrupted (expected a JSON object of file -> sha256). {fix}")
    return entries


def write_manifest(root: Path) -> None:
    """Record the sha256 of every file under `root` (except the manifest itself)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {p.relative_to(root).as_posix(): sha256(p) for p in files}
    (root / MANIFEST).write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")


_verified: dict[Path, str] = {}


def verified_path(relpath: str) -> Path:
    """Absolute path of `data/<relpath>`, after checking it against the manifest."""
    root = data_dir()
    path = root / relpath
    fix = rebuild_command(relpath)
    if not path.is_file():
        raise DataError(f"Data file data/{relpath} is missing. Rebuild it with `{fix}`.")
    expected = read_manifest(root).get(relpath)
    if expected is None:
        raise DataError(f"Data file data/{relpath} is not in data/{MANIFEST}. Rebuild it with `{fix}`.")
    if _verified.get(path) != expected:
        actual = sha256(path)
        if actual != expected:
            raise DataError(
                f"Data file data/{relpath} does not match data/{MANIFEST} "
                f"(sha256 {actual[:12]}... != {expected[:12]}...): it is corrupted or was edited. "
                f"Restore it with `git checkout data/` or rebuild it with `{fix}`."
            )
        _verified[path] = expected
    return path


def build_named(prog: str, description: str, kind: str, names: list[str], build) -> None:
    """The command line of a command that builds named checkpoints (`python -m minirl.train.reward_models`):
    the names given (default: all of `names`), every one checked before the first is built (each takes
    minutes), then build(name) -> its card, whose metrics are printed, and the manifest rewritten."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("names", nargs="*", default=sorted(names), help=f"which {kind}s (default: all)")
    args = parser.parse_args()
    for name in args.names:
        try:
            validate.choice(kind, name, sorted(names))
        except ValueError as e:
            parser.error(str(e))
    for name in args.names:
        card = build(name)
        print(name, json.dumps(card["metrics"]), flush=True)
    write_manifest(data_dir())
