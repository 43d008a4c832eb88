"""The course's commands: open it, hand it out, check it, grade it.

    python -m minirl.course start [--solved] [--lesson NN]   # exercise versions in exercises/, opened in JupyterLab
    python -m minirl.course student [--out student/] [--with-outputs] [--force]   # write exercise versions
    python -m minirl.course grade SUBMISSIONS [--timeout 300] [--out grades.csv] [--gradescope DIR]   # task x student table
    python -m minirl.course refresh [lessons/NN_x.ipynb ...]   # re-execute headlessly, store outputs
    python -m minirl.course capstone testset | evaluate | baseline   # the capstone (minirl.course.capstone)

`start` writes the exercise versions into `exercises/` (once: a notebook already there is never
replaced) and opens lesson 00's in JupyterLab; `--solved` opens the solved lessons in `lessons/`.

`student` copies every lesson with each solution block, the lines from `### BEGIN SOLUTION` to
`### END SOLUTION`, replaced by `raise NotImplementedError(...)` at the same indentation, and all
outputs cleared (a student's outputs are the ones their own run makes; the site shows the solved
lessons' figures for reading ahead). A notebook already in the output folder that differs from the
fresh copy is kept, and said so, unless `--force`. Solutions live only inside function bodies, so
the student version still runs end to end: the checkers print FAIL and the experiments use
minirl's own functions. With `--with-outputs` the stored outputs are kept instead, each checker's
PASS line turned into the TODO line an unfinished exercise prints: what a student's first run must
show, so `pytest --nbval` on these copies checks that they run end to end and that every other
output comes back. In Markdown cells, the text between `<!-- BEGIN SOLUTION -->` and
`<!-- END SOLUTION -->` (a hunt-the-bug answer) is replaced by a line saying the answer is left out,
so students find the bug by its numbers; in the answer cell of an experiment or a written problem
(`minirl.course.written`) it is replaced by the line a student writes over. A prediction, the lines between `### BEGIN PREDICTION` and
`### END PREDICTION`, keeps its names set to None (`minirl.course.predictions`), and with
`--with-outputs` each RIGHT or WRONG line becomes the line of a prediction not made. The solution markers are nbgrader's, and every cell
holding one carries nbgrader's cell metadata (`refresh` writes it: `nbgrader_metadata`), so
`nbgrader generate_assignment` accepts the lessons too: an exercise is a solution cell, a
hunt-the-bug answer a manually graded answer of one point.

`grade` runs every submitted notebook in a fresh kernel (each cell limited to `--timeout`
seconds, errors recorded and the run continued) and asks each checker itself, through a channel
the grader controls: one row per student, one column per task (an exercise pass, fail, not done
or minirl's own; a prediction right, wrong or not done; an experiment or written problem done or
not done, its content for a person to grade with the rubric in the solved lesson). Every student
gets a row whatever they submitted; grades.csv is rewritten after each notebook. `--gradescope`
also writes Gradescope's results.json. minirl.course.grading says how.

`refresh` runs each lesson top to bottom in a fresh kernel with one thread and progress bars
off (MINIRL_PROGRESS=0), stores the outputs in place, and prints each lesson's runtime.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from .grading import LESSONS, RENAMED, grade, write_grades
from .verdicts import NOT_DONE
from .predictions import BEGIN as BEGIN_PREDICTION, END as END_PREDICTION, NOT_PREDICTED
from . import written

__all__ = ["lesson_paths", "strip_solutions", "strip_predictions", "strip_answers", "student_version", "nbgrader_metadata", "execute", "write_student_versions", "start"]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = 'raise NotImplementedError("exercise: write your solution here")'
BEGIN_ANSWER, END_ANSWER = "<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->"  # nbgrader finds these too
ANSWER_STUB = "*(The answer is left out of the student version: find the bug by its numbers.)*"
CHECKER_PASS = re.compile(r"^PASS (\w+): .*$", re.M)  # a checker's verdict on a right answer (minirl.check)
PREDICTED = re.compile(r"^(?:RIGHT|WRONG) (\w+): .*$", re.M)  # check.prediction's verdict on a prediction made


def lesson_paths(paths: list[str]) -> list[Path]:
    return [Path(p) for p in paths] if paths else sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))


def strip_solutions(source: str) -> str:
    """Replace each solution block in a cell's source with a stub at the block's indentation."""
    pattern = re.compile(rf"^([ \t]*){re.escape(BEGIN)}[^\n]*\n.*?^[ \t]*{re.escape(END)}[^\n]*(\n|$)", re.M | re.S)
    return pattern.sub(lambda m: f"{m.group(1)}{STUB}\n", source)


def strip_predictions(source: str) -> str:
    """Replace each prediction block with its names set to None: `name = None  # your prediction`."""
    pattern = re.compile(rf"^([ \t]*){re.escape(BEGIN_PREDICTION)}[^\n]*\n(.*?)^[ \t]*{re.escape(END_PREDICTION)}[^\n]*(\n|$)",
                         re.M | re.S)
    def stub(m):
        names = re.findall(r"^[ \t]*(\w+)\s*=", m.group(2), re.M)
        return "".join(f"{m.group(1)}{name} = None  # your prediction\n" for name in names)
    return pattern.sub(stub, source)


def strip_answers(source: str) -> str:
    """Replace each answer block of a Markdown cell (markers included) with ANSWER_STUB, or, in the
    answer cell of an experiment or a written problem, with the line a student writes over."""
    pattern = re.compile(rf"{re.escape(BEGIN_ANSWER)}.*?{re.escape(END_ANSWER)}", re.S)
    stub = written.STUB if written.written_task(source) else ANSWER_STUB
    return pattern.sub(lambda m: stub, source)


def student_version(nb: nbformat.NotebookNode, with_outputs: bool = False) -> nbformat.NotebookNode:
    """Solutions stubbed and hunt-the-bug answers left out; outputs cleared, or (with_outputs) kept
    with every checker's PASS turned into the TODO of an unfinished exercise."""
    for cell in nb.cells:
        begin, end = (BEGIN, END) if cell.cell_type == "code" else (BEGIN_ANSWER, END_ANSWER)
        pairs = [(begin, end)] + ([(BEGIN_PREDICTION, END_PREDICTION)] if cell.cell_type == "code" else [])
        for b, e in pairs:
            if cell.source.count(b) != cell.source.count(e):
                raise ValueError(f"cell has unbalanced {b!r} / {e!r} markers:\n{cell.source[:200]}")
        if cell.cell_type == "code":
            if with_outputs:
                for output in cell.outputs:
                    if output.get("output_type") == "stream":
                        if BEGIN in cell.source:
                            output.text = CHECKER_PASS.sub(lambda m: NOT_DONE.format(name=m.group(1)), output.text)
                        output.text = PREDICTED.sub(lambda m: NOT_PREDICTED.format(name=m.group(1)), output.text)
            else:
                cell.outputs, cell.execution_count = [], None
            cell.source = strip_predictions(strip_solutions(cell.source))
        elif cell.cell_type == "markdown":
            cell.source = strip_answers(cell.source)
    return nb


def nbgrader_metadata(nb: nbformat.NotebookNode, lesson: str) -> nbformat.NotebookNode:
    """Mark every cell holding a solution block for nbgrader (schema 3): an exercise's code cell as
    a solution cell, id '<NN>-<its function>'; the Markdown cell with the hunt-the-bug answer as a
    manually graded answer worth one point, id '<NN>-hunt-the-bug'; an experiment's or a written
    problem's answer cell as a manually graded answer of its marker's points, id '<NN>-<its name>'.
    Other cells carry no mark."""
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code" and BEGIN in cell.source:
            name = re.search(r"^def (\w+)", cell.source, re.M)
            grade_id, graded, points = f"{lesson[:2]}-{name.group(1) if name else 'exercise'}", False, None
        elif cell.cell_type == "markdown" and (task := written.written_task(cell.source)):
            grade_id, graded, points = f"{lesson[:2]}-{task.name}", True, task.points
        elif cell.cell_type == "markdown" and BEGIN_ANSWER in cell.source:
            grade_id, graded, points = f"{lesson[:2]}-hunt-the-bug", True, 1
        else:
            continue
        cell.metadata["nbgrader"] = {"grade": graded, "grade_id": grade_id, "locked": False, "schema_version": 3,
                                     "solution": True, "task": False, **({"points": points} if graded else {})}
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
    nbgrader_metadata(nb, path.stem)
    nb.metadata.kernelspec = kernelspec()
    nbformat.write(nb, path)
    return seconds


def kernelspec(name: str = "python3") -> dict:
    """The kernelspec metadata JupyterLab writes for this environment's kernel: stored as is, a
    freshly opened lesson is not marked modified by JupyterLab rewriting it."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(name)
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def write_student_versions(paths: list[Path], out: Path, with_outputs: bool = False, force: bool = False) -> None:
    """Each lesson's student version into `out`, keeping (unless `force`) any that a student changed."""
    out.mkdir(parents=True, exist_ok=True)
    for old, became in RENAMED.items():
        if (out / f"{old}.ipynb").exists():
            lessons = f"lesson{'s' * (len(became) > 1)} {' and '.join(n[:2] for n in became)}"
            print(f"{out / old}.ipynb became {lessons} ({', '.join(n + '.ipynb' for n in became)}): "
                  "your copy stays as it is, the new one is beside it")
    for path in paths:
        fresh = nbformat.writes(student_version(nbformat.read(path, as_version=4), with_outputs))
        target = out / path.name
        if target.exists() and not force:
            if target.read_text(encoding="utf-8") != fresh:
                print(f"kept {target}: it differs from a fresh copy (your work?); --force replaces it")
            continue
        target.write_text(fresh, encoding="utf-8")
        print(f"wrote {target}")
    sweeps = paths[0].parent / "sweeps" if paths else None
    if sweeps is not None and sweeps.is_dir():  # recorded sweep results that lessons plot
        shutil.copytree(sweeps, out / "sweeps", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


def start(solved: bool, lesson: str, folder: Path) -> None:
    """Open the course in JupyterLab: the exercise versions in `folder` (made once), or the solved lessons."""
    if not solved:
        write_student_versions(lesson_paths([]), folder)
    home = LESSONS if solved else folder
    matches = sorted(home.glob(f"{lesson}_*.ipynb"))
    if not matches:
        raise SystemExit(f"no lesson {lesson!r} in {home}: lessons are numbered 00 to {lesson_paths([])[-1].name[:2]}")
    args = ["jupyter", "lab", str(matches[0])] + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
    print(f"opening {matches[0]} ({'solved' if solved else 'exercise version; solved lessons: --solved'})", flush=True)
    os.execvp(shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter", args)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m minirl.course",
                                     description="The course's commands: open it, hand it out, check it, grade it.")
    sub = parser.add_subparsers(dest="command", required=True)
    opener = sub.add_parser("start", help="open the exercise versions (made once in exercises/) in JupyterLab")
    opener.add_argument("--solved", action="store_true", help="open the solved lessons instead")
    opener.add_argument("--lesson", default="00", help="the lesson to open first (its number, e.g. 04)")
    opener.add_argument("--folder", type=Path, default=LESSONS.parent / "exercises")
    refresh = sub.add_parser("refresh", help="re-execute lessons headlessly and store their outputs")
    refresh.add_argument("paths", nargs="*")
    student = sub.add_parser("student", help="write student versions with solutions stubbed out")
    student.add_argument("paths", nargs="*")
    student.add_argument("--out", default="student")
    student.add_argument("--with-outputs", action="store_true",
                         help="keep the stored outputs, each checker's PASS as an unfinished exercise's TODO (for nbval)")
    student.add_argument("--force", action="store_true", help="replace notebooks already in --out, changed or not")
    grader = sub.add_parser("grade", help="run submitted notebooks and tabulate each task's verdict")
    grader.add_argument("folder", type=Path, nargs="?", help="the submissions: a folder per student, or "
                        "<student>_<NN_lesson>.ipynb files, or one student's notebooks (Gradescope's layout)")
    grader.add_argument("--timeout", type=int, default=300, help="seconds each cell may run (default 300)")
    grader.add_argument("--out", type=Path, help="CSV to write (default: grades.csv in the submissions folder)")
    grader.add_argument("--gradescope", type=Path, metavar="FOLDER",
                        help="also write each student's results.json in Gradescope's format there "
                             "(FOLDER/results.json for one student's submission)")
    grader.add_argument("--lessons", type=Path, default=LESSONS,
                        help="the solved notebooks to grade against (default: the course's lessons/)")
    capstone = sub.add_parser("capstone", help="the capstone: its private test set, the leaderboard, the baseline",
                              description="python -m minirl.course capstone testset | evaluate | baseline (each has --help)")
    capstone.add_argument("args", nargs=argparse.REMAINDER, metavar="testset|evaluate|baseline ...")
    args = parser.parse_args()

    if args.command == "start":
        start(args.solved, args.lesson, args.folder)
    elif args.command == "refresh":
        for path in lesson_paths(args.paths):
            print(f"{path.name}: {execute(path):.1f} s at one thread", flush=True)
    elif args.command == "student":
        write_student_versions(lesson_paths(args.paths), Path(args.out), args.with_outputs, args.force)
    elif args.command == "capstone":
        from . import capstone
        capstone.main(args.args)
    else:
        if args.folder is None:
            raise SystemExit("grade: name the folder of submissions, e.g. python -m minirl.course grade submissions/ "
                             "(a folder per student, or <student>_<NN_lesson>.ipynb files)")
        out = args.out or args.folder / "grades.csv"
        columns, table, runs = grade(args.folder, args.timeout, out, args.lessons, args.gradescope)
        print(write_grades(columns, table, runs, out))
        print(f"wrote {out}" + (f" and results.json under {args.gradescope}" if args.gradescope else ""))


if __name__ == "__main__":
    main()
