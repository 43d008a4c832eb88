"""Instructor commands for the lessons.

    python -m minirl.course refresh [lessons/NN_x.ipynb ...]   # re-execute headlessly, store outputs
    python -m minirl.course student [--out student/] [--with-outputs]   # write student versions

`refresh` runs each lesson top to bottom in a fresh kernel with one thread and progress bars
off (MINIRL_PROGRESS=0), stores the outputs in place, and prints each lesson's runtime.

`student` copies every lesson with each solution block, the lines from `### BEGIN SOLUTION` to
`### END SOLUTION`, replaced by `raise NotImplementedError(...)` at the same indentation, and all
outputs cleared. Solutions live only inside function bodies, so the student version still runs
end to end: the checkers print FAIL and the experiments use minirl's own functions. With
`--with-outputs` the stored outputs are kept instead, each checker's PASS line turned into the FAIL
line an unfinished exercise prints: what a student's first run must show, so `pytest --nbval` on
these copies checks that they run end to end and that every other output comes back. In Markdown
cells, the text between `<!-- BEGIN ANSWER -->` and `<!-- END ANSWER -->` (a hunt-the-bug answer)
is replaced by a line saying the answer is left out, so students find the bug by its numbers.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import time
from pathlib import Path

import nbformat

from minirl.check import NOT_DONE

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = 'raise NotImplementedError("exercise: write your solution here")'
BEGIN_ANSWER, END_ANSWER = "<!-- BEGIN ANSWER -->", "<!-- END ANSWER -->"
ANSWER_STUB = "*(The answer is left out of the student version: find the bug by its numbers.)*"
CHECKER_PASS = re.compile(r"^PASS (\w+): .*$", re.M)  # a checker's verdict on a right answer (minirl.check)


def lesson_paths(paths: list[str]) -> list[Path]:
    return [Path(p) for p in paths] if paths else sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def strip_solutions(source: str) -> str:
    """Replace each solution block in a cell's source with a stub at the block's indentation."""
    pattern = re.compile(rf"^([ \t]*){re.escape(BEGIN)}[^\n]*\n.*?^[ \t]*{re.escape(END)}[^\n]*(\n|$)", re.M | re.S)
    return pattern.sub(lambda m: f"{m.group(1)}{STUB}\n", source)


def strip_answers(source: str) -> str:
    """Replace each answer block of a Markdown cell (markers included) with ANSWER_STUB."""
    pattern = re.compile(rf"{re.escape(BEGIN_ANSWER)}.*?{re.escape(END_ANSWER)}", re.S)
    return pattern.sub(ANSWER_STUB, source)


def student_version(nb: nbformat.NotebookNode, with_outputs: bool = False) -> nbformat.NotebookNode:
    """Solutions stubbed and hunt-the-bug answers left out; outputs cleared, or (with_outputs) kept
    with every checker's PASS turned into the FAIL of an unfinished exercise."""
    for cell in nb.cells:
        begin, end = (BEGIN, END) if cell.cell_type == "code" else (BEGIN_ANSWER, END_ANSWER)
        if cell.source.count(begin) != cell.source.count(end):
            raise ValueError(f"cell has unbalanced {begin!r} / {end!r} markers:\n{cell.source[:200]}")
        if cell.cell_type == "code":
            if with_outputs and BEGIN in cell.source:
                for output in cell.outputs:
                    if output.get("output_type") == "stream":
                        output.text = CHECKER_PASS.sub(lambda m: NOT_DONE.format(name=m.group(1)), output.text)
            elif not with_outputs:
                cell.outputs, cell.execution_count = [], None
            cell.source = strip_solutions(cell.source)
        elif cell.cell_type == "markdown":
            cell.source = strip_answers(cell.source)
    return nb


def strip_widgets(nb: nbformat.NotebookNode) -> None:
    """Drop widget state and widget views: stored, they only show 'model not found'."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" not in o.get("data", {})]


def execute(path: Path, timeout: int = 600) -> float:
    """Run a notebook in place in a fresh kernel (one thread, no progress bars); return seconds."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MINIRL_PROGRESS="0")
    start = time.time()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.time() - start
    strip_widgets(nb)
    nb.metadata.kernelspec = kernelspec()
    nbformat.write(nb, path)
    return seconds


def kernelspec(name: str = "python3") -> dict:
    """The kernelspec metadata JupyterLab writes for this environment's kernel: stored as is, a
    freshly opened lesson is not marked modified by JupyterLab rewriting it."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(name)
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def main() -> None:
    parser = argparse.ArgumentParser(description="Instructor commands for the lessons.")
    sub = parser.add_subparsers(dest="command", required=True)
    refresh = sub.add_parser("refresh", help="re-execute lessons headlessly and store their outputs")
    refresh.add_argument("paths", nargs="*")
    student = sub.add_parser("student", help="write student versions with solutions stubbed out")
    student.add_argument("paths", nargs="*")
    student.add_argument("--out", default="student")
    student.add_argument("--with-outputs", action="store_true",
                         help="keep the stored outputs, each checker's PASS as an unfinished exercise's FAIL (for nbval)")
    args = parser.parse_args()

    if args.command == "refresh":
        for path in lesson_paths(args.paths):
            print(f"{path.name}: {execute(path):.1f} s at one thread", flush=True)
    else:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        paths = lesson_paths(args.paths)
        for path in paths:
            nbformat.write(student_version(nbformat.read(path, as_version=4), args.with_outputs), out / path.name)
            print(f"wrote {out / path.name}")
        sweeps = paths[0].parent / "sweeps" if paths else None
        if sweeps is not None and sweeps.is_dir():  # recorded sweep results that lessons plot
            shutil.copytree(sweeps, out / "sweeps", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            print(f"copied {sweeps.name}/ to {out / 'sweeps'}")


if __name__ == "__main__":
    main()
