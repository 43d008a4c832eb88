"""`python -m minirl.course grade`: run every submitted notebook and tabulate a verdict per task,
losing nothing and believing only the checkers.

Every student gets a row, whatever their folder holds: an empty folder, files that are not
notebooks, a notebook that cannot be read, or one named after no lesson (graded as the lesson its
cells' ids come from, or marked) each get a clear status in the `runs` column, and a notebook that
cannot be read marks its lesson's tasks `unreadable`. grades.csv is rewritten after each notebook,
so a run stopped half way keeps what it graded, and the printed table holds the same columns.

Verdicts come from the checkers through a channel the grader controls (minirl.course.verdicts):
the grader runs the notebook cell by cell in a fresh kernel, and after each cell where the solved
lesson calls a checker (matched by the cell's id, which the exercise version keeps) it runs that
call itself, its source taken from the solved lesson, with a key made for that request; only
records signed with the key count. A line the notebook prints ("PASS name: ...") counts for
nothing, and one that claims a pass the checker does not give marks the task `fail`. A student
function that calls minirl's function of the exercise's name is `minirl's own` (check.run_cases).
Experiments' findings and written problems are read from their answer cells: done or not done
(`minirl.course.written`), for a person to grade with the rubric in the solved lesson.

`--gradescope` also writes each student's results.json in Gradescope's autograder format.
"""
from __future__ import annotations

import ast
import csv
import hmac
import json
import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import verdicts, written

__all__ = ["LESSONS", "RENAMED", "CHECKER_LINE", "SHOWN_AS", "Submission", "checker_verdicts", "expected_tasks",
           "checker_calls", "submissions", "grade_notebook", "grade", "write_grades", "gradescope_results",
           "write_gradescope"]

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
RENAMED = {  # the lessons renumbered on 2026-12-06 into the order they are taken: old name -> what it became
    "07_reward_models": ("08_reward_models",),
    "08_rlhf": ("09_rlhf", "10_overoptimization"),  # split in two; its exercises are all in 09
    "09_dpo": ("11_dpo",),
    "10_imitation_irl_gail": ("12_imitation_irl_gail",),
    "11_trl_scale_out": ("16_trl_scale_out",),  # 15 from 2026-12-06, 16 from 2026-12-07
    "12_grpo_family_off_policy": ("07_grpo_family_off_policy",),
    # and on 2026-12-07, to make room for lesson 14 (process rewards and expert iteration)
    "14_agents_tools": ("15_agents_tools",),
    "15_trl_scale_out": ("16_trl_scale_out",),
}
CHECKER_LINE = re.compile(r"^(PASS|FAIL|RIGHT|WRONG|TODO) (\w+):(.*)$", re.M)
SHOWN_AS = {"package": "minirl's own"}  # a verdict's outcome as the table shows it, where the two differ
CREDIT = ("pass", "right", "done")  # what counts in the `passed` column
LESSON_NAME = re.compile(r"(\d\d_\w+)\.ipynb$")


# ---------------------------------------------------------------- what a solved lesson asks
def checker_verdicts(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Task name -> verdict, read from a notebook's printed checker lines and answer cells: for the
    solved lessons (which tasks a lesson has) and the exercise versions (what a first run shows).
    A submission is never graded from its printed lines: `grade_notebook` asks the checkers."""
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (task := written.written_task(cell.source)):
            found[task.name] = "done" if written.is_done(cell.source) else "not done"
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            for verdict, name, _ in CHECKER_LINE.findall(output.get("text", "")):
                found[name] = {"PASS": "pass", "RIGHT": "right", "WRONG": "wrong", "TODO": "not done"}.get(verdict, "fail")
    return found


def solved_lesson(lesson: str, lessons: Path = LESSONS) -> nbformat.NotebookNode | None:
    path = lessons / f"{lesson}.ipynb"
    return nbformat.read(path, as_version=4) if path.exists() else None


def expected_tasks(lesson: str, lessons: Path = LESSONS) -> dict[str, str]:
    """The tasks the solved lesson of that name holds (its checkers' lines and answer cells), in
    order, each with its kind: 'exercise', 'prediction' or 'written' (an experiment's findings or a
    written problem)."""
    nb = solved_lesson(lesson, lessons)
    kind = {"pass": "exercise", "right": "prediction", "wrong": "prediction", "done": "written"}
    return {name: kind.get(v, "exercise") for name, v in checker_verdicts(nb).items()} if nb is not None else {}


def checker_calls(nb: nbformat.NotebookNode) -> dict[str, list[str]]:
    """Cell id -> the source of each top-level statement of that code cell that calls a checker
    (`check.<name>(...)` or `minirl.check.<name>(...)`, anywhere inside the statement)."""
    calls = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or "check." not in cell.source:
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        found = [ast.get_source_segment(cell.source, s) for s in tree.body if any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and (getattr(n.func.value, "id", None) == "check" or getattr(n.func.value, "attr", None) == "check")
            for n in ast.walk(s))]
        if found:
            calls[cell.get("id", "")] = found
    return calls


# ---------------------------------------------------------------- what was submitted
@dataclass
class Submission:
    """One file of a student's, or one problem with their folder: `path` None when there is no
    notebook to run; `lesson` None when none could be told; `note` what the table should say."""
    path: Path | None
    lesson: str | None
    note: str = ""


def _lesson_by_name(name: str) -> str | None:
    m = LESSON_NAME.search(name)
    return RENAMED.get(m.group(1), (m.group(1),))[0] if m else None  # an old name graded as today's


def _lesson_by_cells(path: Path, lessons: Path) -> str | None:
    """The solved lesson holding at least half of the notebook's cell ids, if one does."""
    try:
        ids = {c.get("id") for c in nbformat.read(path, as_version=4).cells} - {None}
    except Exception:  # noqa: BLE001 - an unreadable notebook is reported when it is graded
        return None
    for lesson in sorted(lessons.glob("[0-9][0-9]_*.ipynb")):
        theirs = {c.get("id") for c in nbformat.read(lesson, as_version=4).cells}
        if ids and len(ids & theirs) * 2 >= len(ids):
            return lesson.stem
    return None


def _notebook(path: Path, lessons: Path, shown_name: str) -> Submission:
    lesson = _lesson_by_name(path.name)
    if lesson is not None:
        return Submission(path, lesson)
    lesson = _lesson_by_cells(path, lessons)
    if lesson is not None:
        return Submission(path, lesson, f"{shown_name}: named after no lesson; graded as {lesson}, whose cells it holds")
    return Submission(None, None, f"{shown_name}: named after no lesson (NN_name.ipynb) and holds no lesson's cells; not graded")


def _folder(folder: Path, lessons: Path) -> list[Submission]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts)
    notebooks = [p for p in files if p.suffix == ".ipynb"]
    if notebooks:
        return [_notebook(p, lessons, p.name) for p in notebooks]
    if files:
        names = ", ".join(p.name for p in files[:5]) + (", ..." if len(files) > 5 else "")
        return [Submission(None, None, f"no notebook (found {names}): submit the .ipynb files")]
    return [Submission(None, None, "an empty folder")]


def submissions(folder: Path, lessons: Path = LESSONS, skip: tuple[Path, ...] = ()) -> dict[str, list[Submission]]:
    """Student -> their submissions. A folder per student (every folder gets a row, empty or not),
    or files named <student>_<NN_lesson>.ipynb; a folder whose own notebooks are named after
    lessons (NN_name.ipynb) is one student's submission, named after the folder (Gradescope's
    layout). Any other file at the top is a row of its own, named after the file; CSV files (an
    earlier grades.csv) and the files in `skip` are left alone."""
    if not folder.is_dir():
        raise SystemExit(f"{folder}: no such folder (give the folder that holds the submissions)")
    top = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    if any(p.is_file() and re.fullmatch(r"\d\d_\w+\.ipynb", p.name) for p in top):
        return {folder.resolve().name: _folder(folder, lessons)}
    found: dict[str, list[Submission]] = {}
    for path in top:
        if path.is_dir():
            found[path.name] = _folder(path, lessons)
        elif path.suffix == ".csv" or path.resolve() in {s.resolve() for s in skip}:
            continue
        elif path.suffix != ".ipynb":
            found.setdefault(path.stem, []).append(Submission(None, None, f"{path.name}: not a notebook; not graded"))
        elif m := re.match(r"(.+?)_(\d\d_\w+\.ipynb)$", path.name):
            found.setdefault(m.group(1), []).append(Submission(path, _lesson_by_name(m.group(2))))
        else:
            found.setdefault(path.stem, []).append(_notebook(path, lessons, path.name))
    if not found:
        raise SystemExit(f"{folder}: nothing to grade (a folder per student, or <student>_<NN_lesson>.ipynb files)")
    return found


# ---------------------------------------------------------------- running one notebook
def _signed(outputs: list, key: bytes) -> dict[str, str]:
    """Name -> outcome of the records among a grader cell's outputs that carry the key (the last wins)."""
    found = {}
    for output in outputs:
        record = output.get("data", {}).get(verdicts.MIME)
        if isinstance(record, dict) and _verified(record, key):
            found[record["name"]] = record["outcome"]
    return found


def _verified(record: dict, key: bytes) -> bool:
    """The record names a task and an outcome, and its signature is the key's."""
    name, outcome = record.get("name"), record.get("outcome")
    return (isinstance(name, str) and outcome in verdicts.OUTCOMES
            and hmac.compare_digest(str(record.get("signature", "")), verdicts.signature(key, name, outcome)))


def _claims(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Name -> 'pass' or 'right' for each PASS or RIGHT line the notebook's own cells printed."""
    claims = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            for verdict, name, _ in CHECKER_LINE.findall(output.get("text", "")):
                if verdict in ("PASS", "RIGHT"):
                    claims[name] = verdict.lower()
    return claims


def _run_status(nb: nbformat.NotebookNode, timeout: int) -> list[str]:
    """The code cells (counted from 1) that raised or ran out of time."""
    problems = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code, 1):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                what = f"over {timeout} s" if output.get("ename") == "KeyboardInterrupt" else output.get("ename", "error")
                problems.append(f"code cell {i}: {what}")
    return problems


def _execute(nb: nbformat.NotebookNode, calls: dict[str, list[str]], timeout: int) -> tuple[dict[str, str], list[str]]:
    """Run the notebook cell by cell in a fresh kernel (a copy of the lessons' sweep results beside
    it), the grader's checker calls after their cells; return the signed verdicts and notes."""
    try:
        from nbclient import NotebookClient
        from nbclient.exceptions import DeadKernelError
    except ImportError:
        raise SystemExit("grading runs notebooks with nbclient, one of an instructor's tools: make install-instructor "
                         "(or pip install -c constraints.txt -e '.[instructor]')") from None

    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MINIRL_PROGRESS="0")
    found, notes = {}, []
    ids = [c.get("id") for c in nb.cells]
    pending = {cid: stmts for cid, stmts in calls.items() if cid in ids}
    if missing := [cid for cid in calls if cid not in ids]:
        notes.append(f"{len(missing)} checker cell(s) not found by id; their checks ran at the end")
    with tempfile.TemporaryDirectory(prefix="minirl-grade-") as work:
        if (LESSONS / "sweeps").is_dir():
            shutil.copytree(LESSONS / "sweeps", Path(work) / "sweeps", ignore=shutil.ignore_patterns("__pycache__"))
        client = NotebookClient(nb, timeout=timeout, interrupt_on_timeout=True, allow_errors=True,
                                kernel_name="python3", resources={"metadata": {"path": work}})

        def ask(statements: list[str]) -> None:
            """The grader's cell, run at the notebook's end for the moment (nbclient files a cell's
            outputs by its index) and taken out again: the student's cells keep their outputs."""
            key = secrets.token_bytes(32)
            cell = nbformat.v4.new_code_cell(f"__import__('minirl.course.verdicts', fromlist=['graded']).graded("
                                             f"{key.hex()!r}, {statements!r}, globals())")
            nb.cells.append(cell)
            try:
                client.execute_cell(cell, len(nb.cells) - 1, store_history=False)
            finally:
                nb.cells.pop()
            found.update(_signed(cell.outputs, key))
        try:
            with client.setup_kernel():
                for index, cell in enumerate(list(nb.cells)):
                    client.execute_cell(cell, index)
                    if cell.get("id") in pending:
                        ask(pending[cell.get("id")])
                for cid in missing:
                    ask(calls[cid])
        except DeadKernelError:
            notes.append("the kernel died")
    return found, notes


def grade_notebook(sub: Submission, timeout: int, lessons: Path = LESSONS) -> tuple[dict[str, str], str]:
    """Task -> verdict for one submitted notebook, and how its run went ('ran', or what went wrong)."""
    expected = list(expected_tasks(sub.lesson, lessons))
    try:
        nb = nbformat.read(sub.path, as_version=4)
    except Exception as e:  # noqa: BLE001 - a truncated upload, a file that is not JSON, ...
        reason = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        return {name: "unreadable" for name in expected}, f"{sub.path.name}: unreadable ({reason})"
    solved = solved_lesson(sub.lesson, lessons)
    found, notes = _execute(nb, checker_calls(solved) if solved is not None else {}, timeout)
    for cell in nb.cells:  # experiments' findings and written problems: done or not done
        if cell.cell_type == "markdown" and (task := written.written_task(cell.source)):
            found[task.name] = "done" if written.is_done(cell.source) else "not done"
    for name, claimed in _claims(nb).items():
        if found.get(name) != claimed:
            notes.append(f"printed {claimed.upper()} for {name}, which its checker did not give")
            found[name] = "fail"
    result = {name: found.get(name, "no verdict") for name in expected}
    result.update({name: v for name, v in found.items() if name not in result})
    status = ", ".join([sub.note] * bool(sub.note) + _run_status(nb, timeout) + notes) or "ran"
    return result, status


# ---------------------------------------------------------------- the table
def grade(folder: Path, timeout: int, out: Path | None = None, lessons: Path = LESSONS,
          gradescope: Path | None = None) -> tuple[list[str], dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """Grade every submission; return the columns ('NN/task'), the table student -> column ->
    verdict, and each student's run notes per lesson. With `out`, the CSV is rewritten after each
    notebook (and each student's results.json under `gradescope`, when given)."""
    columns: list[str] = []
    kinds: dict[str, str] = {}  # column -> exercise, prediction or written
    table: dict[str, dict[str, str]] = {}
    runs: dict[str, dict[str, str]] = {}
    found = submissions(folder, lessons, skip=(out,) if out else ())
    for student, subs in found.items():
        table.setdefault(student, {})
        runs.setdefault(student, {})
        for sub in subs:
            if sub.path is None:
                key = sub.lesson or "submission"
                runs[student][key] = "; ".join(filter(None, [runs[student].get(key), sub.note]))
                print(f"{student}: {sub.note}", flush=True)
                continue
            verdict, status = grade_notebook(sub, timeout, lessons)
            print(f"{student} {sub.lesson}: {status}", flush=True)
            runs[student][sub.lesson] = status
            expected = expected_tasks(sub.lesson, lessons)
            for name, value in verdict.items():
                column = f"{sub.lesson[:2]}/{name}"
                if column not in columns:
                    columns.append(column)
                    kinds[column] = expected.get(name, "exercise")
                table[student][column] = SHOWN_AS.get(value, value)
            if out is not None:
                write_grades(columns, table, runs, out)
        if gradescope is not None:
            write_gradescope(gradescope_results(student, columns, kinds, table, runs), gradescope,
                             None if len(found) == 1 else student)
    if out is not None:
        write_grades(columns, table, runs, out)
    return columns, table, runs


def _rows(columns: list[str], table: dict[str, dict[str, str]], runs: dict[str, dict[str, str]]) -> list[list[str]]:
    """The header and one row per student: every column ('missing' where no notebook of that lesson
    was graded), the tasks passed, right or done out of all, and the run notes."""
    rows = [["student", *columns, "passed", "runs"]]
    for student, row in table.items():
        passed = sum(row.get(c) in CREDIT for c in columns)
        notes = "; ".join(f"{lesson}: {status}" for lesson, status in runs.get(student, {}).items())
        rows.append([student, *(row.get(c, "missing") for c in columns), f"{passed}/{len(columns)}", notes])
    return rows


def write_grades(columns: list[str], table: dict[str, dict[str, str]], runs: dict[str, dict[str, str]], out: Path) -> str:
    """Write the table as CSV at `out`; return it as text, the same rows and columns."""
    rows = _rows(columns, table, runs)
    with out.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]  # the notes go last, unpadded
    return "\n".join("  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths)) + "  " + r[-1] for r in rows)


# ---------------------------------------------------------------- Gradescope
def gradescope_results(student: str, columns: list[str], kinds: dict[str, str], table: dict[str, dict[str, str]],
                       runs: dict[str, dict[str, str]]) -> dict:
    """A student's results in Gradescope's autograder format (results.json): one test per task. An
    exercise scores 1 on a pass; a prediction 1 when made (right or wrong: a prediction is graded
    for doing it); an experiment or written problem 0 of 0 with its done / not done, its points
    given by a person with the rubric. The run notes go in the top-level output."""
    tests = []
    for column in columns:
        value, kind = table.get(student, {}).get(column, "missing"), kinds.get(column, "exercise")
        score = float(value == "pass" if kind == "exercise" else value in ("right", "wrong") if kind == "prediction" else 0)
        earned = score == 1.0 or value in CREDIT  # a prediction made earns its point, right or wrong
        tests.append({"name": f"{column} ({kind})", "score": score, "max_score": 0.0 if kind == "written" else 1.0,
                      "status": "passed" if earned else "failed", "output": value})
    notes = "; ".join(f"{lesson}: {status}" for lesson, status in runs.get(student, {}).items())
    return {"score": sum(t["score"] for t in tests), "output": notes or "ran", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def write_gradescope(results: dict, folder: Path, student: str | None) -> Path:
    """Write results.json in `folder` itself for a single submission (Gradescope's
    /autograder/results), else in folder/<student>/."""
    target = folder if student is None else folder / student
    target.mkdir(parents=True, exist_ok=True)
    path = target / "results.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    return path
