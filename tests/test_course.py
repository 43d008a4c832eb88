"""Course tooling: student versions stub every solution; with outputs kept, they expect every checker's TODO."""
import ast
import builtins
import json
import os
import subprocess
import symtable
import sys
from pathlib import Path

import nbformat
import pytest

from minirl.course import commands
from minirl.course.predictions import NOT_PREDICTED

SOURCE = '''def f(x):
    """doc"""
    ### BEGIN SOLUTION
    y = x + 1
    return y
    ### END SOLUTION

check(f)
'''


def test_strip_solutions_keeps_indentation_and_the_rest():
    out = commands.strip_solutions(SOURCE)
    assert "y = x + 1" not in out and "BEGIN SOLUTION" not in out
    assert f"    {commands.STUB}\n" in out
    assert out.startswith('def f(x):\n    """doc"""\n') and out.endswith("\ncheck(f)\n")


def test_unbalanced_markers_are_an_error():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1")])
    with pytest.raises(ValueError, match="unbalanced"):
        commands.student_version(nb)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"{commands.BEGIN_ANSWER} the bug")])
    with pytest.raises(ValueError, match="unbalanced"):
        commands.student_version(nb)


def test_hunt_the_bug_answers_are_left_out_of_student_versions():
    text = f"Find the bug.\n\n{commands.BEGIN_ANSWER}\n*Answer:* the view is transposed.\n{commands.END_ANSWER}\n\nNext."
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    out = commands.student_version(nb).cells[0].source
    assert "transposed" not in out and commands.ANSWER_STUB in out
    assert out.startswith("Find the bug.") and out.endswith("Next.")


def test_every_lesson_has_solutions_to_strip():
    for path in commands.lesson_paths([]):
        nb = nbformat.read(path, as_version=4)
        assert any(commands.BEGIN in c.source for c in nb.cells if c.cell_type == "code"), path.name


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_student_versions_with_outputs_expect_every_checker_to_fail(path):
    """`make lessons-student` runs these copies under nbval: each must expect exactly one TODO line
    per stubbed exercise, no PASS, and every other output as stored."""
    solved = nbformat.read(path, as_version=4)
    student = commands.student_version(nbformat.read(path, as_version=4), with_outputs=True)
    stubs = text = ""
    for before, after in zip(solved.cells, student.cells):
        if after.cell_type != "code":
            continue
        if commands.BEGIN in before.source:
            stubs += after.source
            text += "".join(o.get("text", "") for o in after.outputs)
        else:  # every output as stored, but a prediction's RIGHT or WRONG: the line of one not made
            assert [o.get("data") for o in after.outputs] == [o.get("data") for o in before.outputs]
            stored, handed = ("".join(o.get("text", "") for o in cell.outputs) for cell in (before, after))
            assert handed == commands.PREDICTED.sub(lambda m: NOT_PREDICTED.format(name=m.group(1)), stored)
    assert text.count("not implemented yet") == stubs.count(commands.STUB) >= 1
    assert "PASS" not in text and commands.BEGIN not in stubs
    handed_out = commands.student_version(nbformat.read(path, as_version=4))  # what `make student` writes
    assert not any(c.outputs for c in handed_out.cells if c.cell_type == "code")


def exercise_names(source: str) -> set[str]:
    """The top-level names an exercise cell defines (functions, classes, assignments)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def names_read(source: str) -> set[str]:
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_nbval_markers_are_cell_tags_not_comments(path):
    """What tells nbval to skip a cell's output is scaffolding, so it lives in the cell's tags, out of
    the student's view: no code cell carries an `NBVAL_` comment, and every tag is one nbval reads."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code":
            assert "NBVAL_" not in cell.source, f"{path.name}: an NBVAL_ comment; use the cell tag instead"
            assert set(cell.metadata.get("tags", [])) <= {"nbval-ignore-output", "nbval-skip"}, cell.metadata


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_every_cell_has_its_own_id(path):
    """nbformat 4.5 gives every cell an id (JupyterLab and nbgrader rely on it; a cell added by a script
    without one is a validation warning today and an error in future nbformat): present and unique."""
    cells = json.loads(path.read_text())["cells"]
    ids = [cell.get("id") for cell in cells]
    assert None not in ids, f"{path.name}: cell {ids.index(None)} has no id"
    assert len(set(ids)) == len(ids), f"{path.name}: repeated cell ids"


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_no_cell_holds_a_control_character(path):
    """A script that writes "\\beta" into a cell without a raw string leaves a backspace and "eta" (lesson 11
    once showed $eta^{-1}$): no cell source holds a control character other than a newline or a tab."""
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        bad = sorted({hex(ord(ch)) for ch in cell.source if ord(ch) < 32 and ch not in "\n\t"})
        assert not bad, f"{path.name}, cell {i}: control characters {bad}"


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_no_other_cell_reads_what_an_exercise_defines(path):
    """An unfinished exercise (its body stubbed in the exercise version) breaks no other cell: no
    cell but the exercise's own reads a name an exercise cell defines. `make browser` runs the
    slider lessons' exercise versions in full; this covers every lesson without running one."""
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    defined = set().union(*(exercise_names(c.source) for c in cells if commands.BEGIN in c.source))
    assert defined
    for cell in cells:
        if commands.BEGIN not in cell.source:
            assert not names_read(cell.source) & defined, f"{path.name}: a cell reads an exercise's {names_read(cell.source) & defined}"


def cell_symbols(source: str) -> symtable.SymbolTable:
    return symtable.symtable("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))),
                             "<cell>", "exec")


def names_bound(source: str) -> set[str]:
    """The top-level names a cell binds: assignments, loop and `with` targets, imports, defs, classes."""
    return {s.get_name() for s in cell_symbols(source).get_symbols() if s.is_assigned() or s.is_imported()}


def globals_read_when_called(source: str) -> dict[str, set[str]]:
    """For each top-level function a cell defines, the global names its body (nested functions
    included) reads when it is called, as opposed to when the cell runs."""
    def reads(table) -> set[str]:
        names = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
        return names.union(*(reads(child) for child in table.get_children()))
    return {t.get_name(): reads(t) for t in cell_symbols(source).get_children() if t.get_type() == "function"}


@pytest.mark.parametrize("path", [p for p in commands.lesson_paths([]) if "widgets.interact" in p.read_text()],
                         ids=lambda p: p.name)
def test_no_later_cell_rebinds_what_a_slider_reads(path):
    """A slider keeps working after Run All: every global name its functions read when the slider
    moves (through the functions they call that the first cell or the slider's own cell defines) is
    bound by the first cell or the slider's cell and by no other. `make browser` runs each slider
    cell after the first cell alone, and one lesson's Run All; this covers every slider lesson
    without running the rest (a later cell that mutates an object the slider reads is not caught)."""
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    for k in [k for k, source in enumerate(cells) if "widgets.interact" in source]:
        functions = {**globals_read_when_called(cells[0]), **globals_read_when_called(cells[k])}
        read, todo = set(), [n for names in globals_read_when_called(cells[k]).values() for n in names]
        while todo:
            name = todo.pop()
            if name not in read:
                read.add(name)
                todo += functions.get(name, ())
        for j, source in enumerate(cells):
            rebound = read & names_bound(source) if j not in (0, k) else set()
            assert not rebound, f"{path.name}: code cell {j} rebinds {sorted(rebound)}, which the slider of code cell {k} reads"
        at_run = {s.get_name() for s in cell_symbols(cells[k]).get_symbols() if s.is_referenced()}
        missing = (at_run | read) - names_bound(cells[0]) - names_bound(cells[k]) - set(dir(builtins))
        assert not missing, (f"{path.name}: the slider of code cell {k} reads {sorted(missing)}, which neither the "
                             "first cell nor its own binds: run after the first cell alone, it stops")


def test_student_versions_never_replace_a_students_work(tmp_path, capsys):
    lesson = commands.lesson_paths([])[:1]
    commands.write_student_versions(lesson, tmp_path)
    target = tmp_path / lesson[0].name
    nb = nbformat.read(target, as_version=4)
    nb.cells[0].source += "\n# my notes"
    nbformat.write(nb, target)
    commands.write_student_versions(lesson, tmp_path)
    assert "# my notes" in target.read_text() and "kept" in capsys.readouterr().out
    commands.write_student_versions(lesson, tmp_path, force=True)
    assert "# my notes" not in target.read_text()


def test_renamed_lessons_point_to_lessons_that_exist_and_reuse_no_old_name():
    """Each old name became current lessons, and no current lesson has an old name (so a student's
    old notebook is never the file a fresh copy is written to)."""
    current = {p.stem for p in commands.lesson_paths([])}
    assert all(set(became) <= current for became in commands.RENAMED.values())
    assert not current & set(commands.RENAMED)


def test_student_versions_name_what_each_old_lesson_became(tmp_path, capsys):
    old = tmp_path / "08_rlhf.ipynb"
    old.write_text("my work")
    commands.write_student_versions([commands.LESSONS / "09_rlhf.ipynb"], tmp_path)
    out = capsys.readouterr().out
    assert f"{tmp_path / '08_rlhf'}.ipynb became lessons 09 and 10 (09_rlhf.ipynb, 10_overoptimization.ipynb)" in out
    assert old.read_text() == "my work" and (tmp_path / "09_rlhf.ipynb").exists()


@pytest.mark.parametrize("path", commands.lesson_paths([]), ids=lambda p: p.name)
def test_every_solution_cell_carries_nbgrader_metadata(path):
    """What `refresh` writes (commands.nbgrader_metadata) is what each stored lesson holds: a cell with a
    solution block is an nbgrader solution cell, no other cell is marked, and the ids are unique."""
    stored = nbformat.read(path, as_version=4)
    marked = commands.nbgrader_metadata(nbformat.read(path, as_version=4), path.stem)
    assert [c.metadata.get("nbgrader") for c in stored.cells] == [c.metadata.get("nbgrader") for c in marked.cells]
    ids = [c.metadata["nbgrader"]["grade_id"] for c in stored.cells if "nbgrader" in c.metadata]
    solutions = [c for c in stored.cells if commands.BEGIN in c.source or commands.BEGIN_ANSWER in c.source]
    assert len(ids) == len(set(ids)) == len(solutions) >= 1


@pytest.mark.slow
def test_nbgrader_generate_assignment_accepts_the_lessons(tmp_path):
    """nbgrader's own command turns two lessons (one with a hunt-the-bug answer in Markdown) into
    assignments: the solutions and the answer are replaced by its stubs, the rest kept."""
    source = tmp_path / "source" / "ps1"
    source.mkdir(parents=True)
    lessons = [p for p in commands.lesson_paths([]) if p.name.startswith(("03_", "09_"))]
    for path in lessons:
        source.joinpath(path.name).write_bytes(path.read_bytes())
    result = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "ps1", "--force",
                             f"--CourseDirectory.root={tmp_path}", f"--CourseDirectory.db_url=sqlite:///{tmp_path}/gradebook.db"],
                            capture_output=True, text=True, timeout=300,  # nbgrader runs alembic from PATH
                            env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"))
    assert result.returncode == 0, result.stdout + result.stderr
    for path in lessons:
        released = nbformat.read(tmp_path / "release" / "ps1" / path.name, as_version=4)
        text = "\n".join(c.source for c in released.cells)
        assert commands.BEGIN not in text and commands.BEGIN_ANSWER not in text
        assert "raise NotImplementedError" in text and "YOUR ANSWER HERE" in text
        assert len(released.cells) == len(nbformat.read(path, as_version=4).cells)


def test_start_opens_lesson_00s_exercise_version_in_jupyterlab(tmp_path, monkeypatch):
    """`make course` (commands.start): the exercise versions written into the folder, JupyterLab started
    on lesson 00's there; --solved opens the solved lesson instead and writes nothing."""
    launched = []
    monkeypatch.setattr(commands.os, "execvp", lambda program, args: launched.append(args))
    commands.start(solved=False, lesson="00", folder=tmp_path / "exercises")
    opened = Path(launched[0][2])
    assert launched[0][:2] == ["jupyter", "lab"] and opened == tmp_path / "exercises" / "00_welcome.ipynb"
    source = "".join(c.source for c in nbformat.read(opened, as_version=4).cells)
    assert commands.STUB in source and len(list(opened.parent.glob("*.ipynb"))) == len(commands.lesson_paths([]))
    commands.start(solved=True, lesson="04", folder=tmp_path / "elsewhere")
    assert Path(launched[1][2]) == commands.LESSONS / "04_baselines_critics.ipynb" and not (tmp_path / "elsewhere").exists()
    with pytest.raises(SystemExit, match="no lesson '42'"):
        commands.start(solved=True, lesson="42", folder=tmp_path)
