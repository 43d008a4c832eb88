"""`course grade` loses nothing and believes only the checkers: every submission gets a row (an
unreadable notebook, an empty folder, a .py, an unnumbered notebook: each a status), the CSV is
written as each notebook finishes, a forged PASS line is graded fail, a wrapper of minirl's own
function is reported as such, and the printed table and Gradescope's results.json say what the
CSV says. The end-to-end tests grade against a small solved lesson written here (its cells' ids
are what the grader matches), and one against a real lesson."""
import csv
import json

import jsonschema
import nbformat
import pytest

from minirl.course import grading

PASS_AT_K = "def pass_at_k(n, c, k):\n    from math import comb\n    return 1 - comb(n - c, k) / comb(n, k)\n"
RETURN = "def discounted_return(rewards, gamma):\n    return sum(r * gamma**t for t, r in enumerate(rewards))\n"
CHECK_1, CHECK_2 = "minirl.check.pass_at_k(pass_at_k)", "minirl.check.discounted_return(discounted_return)"
ANSWER = "<!-- written: why_unbiased, 2 points -->\nThe score has mean zero under pi, so a baseline that ignores the action adds nothing."
STUB = 'raise NotImplementedError("exercise: write your solution here")'


def cell(cid: str, source: str, kind: str = "code", text: str = "") -> nbformat.NotebookNode:
    c = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    c.id = cid
    if text:
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return c


def notebook(*cells) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=list(cells))


@pytest.fixture
def lessons(tmp_path):
    """A solved lesson, 99_homework: two exercises (their PASS lines stored) and a written problem."""
    folder = tmp_path / "lessons"
    folder.mkdir()
    nbformat.write(notebook(cell("c0", "import minirl"),
                            cell("c1", PASS_AT_K + CHECK_1, text="PASS pass_at_k: 8 cases\n"),
                            cell("c2", RETURN + CHECK_2, text="PASS discounted_return: 5 cases\n"),
                            cell("c3", ANSWER, "markdown")), folder / "99_homework.ipynb")
    return folder


def submission(c1: str, c2: str, *extra, answer: str = ANSWER) -> nbformat.NotebookNode:
    """A student's 99_homework: the solved lesson's cells with these sources (ids kept), extra cells after."""
    return notebook(cell("c0", "import minirl"), cell("c1", c1), cell("c2", c2), cell("c3", answer, "markdown"),
                    *[cell(f"x{i}", source) for i, source in enumerate(extra)])


# ---------------------------------------------------------------- every submission has a row (no kernel)
def test_every_folder_and_file_gets_a_row_with_a_status(tmp_path, lessons):
    subs = tmp_path / "subs"
    for student in ("ada", "empty", "py_only", "unnumbered", "stranger"):
        (subs / student).mkdir(parents=True)
    nbformat.write(submission(PASS_AT_K + CHECK_1, RETURN + CHECK_2), subs / "ada" / "99_homework.ipynb")
    (subs / "py_only" / "solution.py").write_text("x = 1\n")
    nbformat.write(submission(PASS_AT_K, RETURN), subs / "unnumbered" / "my work.ipynb")
    nbformat.write(notebook(cell("zz", "1 + 1")), subs / "stranger" / "scratch.ipynb")
    (subs / "bo_99_homework.ipynb").write_text('{"cells": [')  # a truncated upload
    (subs / "notes.txt").write_text("hello")
    (subs / "grades.csv").write_text("an earlier run\n")
    found = grading.submissions(subs, lessons)
    assert sorted(found) == ["ada", "bo", "empty", "notes", "py_only", "stranger", "unnumbered"]
    assert [(s.lesson, s.note) for s in found["ada"]] == [("99_homework", "")]
    assert found["empty"][0].note == "an empty folder"
    assert found["py_only"][0].note == "no notebook (found solution.py): submit the .ipynb files"
    assert found["unnumbered"][0].lesson == "99_homework" and "graded as 99_homework" in found["unnumbered"][0].note
    assert found["stranger"][0].path is None and "holds no lesson's cells" in found["stranger"][0].note
    assert found["notes"][0].note == "notes.txt: not a notebook; not graded"
    verdicts, status = grading.grade_notebook(found["bo"][0], timeout=20, lessons=lessons)
    assert verdicts == {"pass_at_k": "unreadable", "discounted_return": "unreadable", "why_unbiased": "unreadable"}
    assert status.startswith("bo_99_homework.ipynb: unreadable (")


def test_one_students_notebooks_at_the_top_are_one_submission_named_after_the_folder(tmp_path, lessons):
    """Gradescope's layout: /autograder/submission holds the student's notebooks themselves."""
    (tmp_path / "submission").mkdir()
    nbformat.write(submission(PASS_AT_K, RETURN), tmp_path / "submission" / "99_homework.ipynb")
    found = grading.submissions(tmp_path / "submission", lessons)
    assert list(found) == ["submission"] and found["submission"][0].lesson == "99_homework"


def test_a_missing_folder_or_nothing_to_grade_is_said_in_plain_words(tmp_path):
    with pytest.raises(SystemExit, match="no such folder"):
        grading.submissions(tmp_path / "nowhere")
    with pytest.raises(SystemExit, match="nothing to grade"):
        grading.submissions(tmp_path)


def test_a_submission_under_an_old_name_is_graded_as_the_lesson_it_became(tmp_path):
    (tmp_path / "ada").mkdir()
    nbformat.write(notebook(cell("a", "1")), tmp_path / "ada" / "07_reward_models.ipynb")
    assert grading.submissions(tmp_path)["ada"][0].lesson == "08_reward_models"


def test_the_csv_is_written_after_each_notebook_so_an_interrupted_run_keeps_it(tmp_path, lessons, monkeypatch):
    subs = tmp_path / "subs"
    for student in ("ada", "bo"):
        (subs / student).mkdir(parents=True)
        nbformat.write(submission(PASS_AT_K, RETURN), subs / student / "99_homework.ipynb")

    def grade_notebook(sub, timeout, lessons):
        if "bo" in sub.path.parts:
            raise KeyboardInterrupt  # the instructor stops the run
        return {"pass_at_k": "pass", "discounted_return": "fail", "why_unbiased": "done"}, "ran"
    monkeypatch.setattr(grading, "grade_notebook", grade_notebook)
    with pytest.raises(KeyboardInterrupt):
        grading.grade(subs, 20, out=tmp_path / "grades.csv", lessons=lessons)
    rows = list(csv.DictReader((tmp_path / "grades.csv").open()))
    assert [(r["student"], r["99/pass_at_k"], r["passed"]) for r in rows] == [("ada", "pass", "2/3")]


def test_the_printed_table_shows_what_the_csv_shows(tmp_path):
    table = {"ada": {"04/gae": "pass", "04/why": "done"}, "bo": {"04/gae": "minirl's own"}}
    runs = {"ada": {"04_baselines_critics": "ran"}, "bo": {"04_baselines_critics": "code cell 3: NameError"}}
    text = grading.write_grades(["04/gae", "04/why"], table, runs, tmp_path / "grades.csv")
    printed = [line.split() for line in text.splitlines()]
    with (tmp_path / "grades.csv").open() as f:
        written = [" ".join(row).split() for row in csv.reader(f)]
    assert printed == written
    assert written[2][:4] == ["bo", "minirl's", "own", "missing"]


GRADESCOPE_SCHEMA = {  # Gradescope's documented results.json (gradescope-autograders.readthedocs.io, "specs")
    "type": "object", "additionalProperties": False,
    "properties": {
        "score": {"type": "number"}, "execution_time": {"type": "number"}, "output": {"type": "string"},
        "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "test_output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "test_name_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "stdout_visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
        "extra_data": {"type": "object"},
        "tests": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "properties": {"score": {"type": "number"}, "max_score": {"type": "number"},
                           "status": {"enum": ["passed", "failed"]}, "name": {"type": "string"},
                           "name_format": {"type": "string"}, "number": {"type": "string"},
                           "output": {"type": "string"}, "output_format": {"type": "string"},
                           "tags": {"type": "array", "items": {"type": "string"}},
                           "visibility": {"enum": ["hidden", "after_due_date", "after_published", "visible"]},
                           "extra_data": {"type": "object"}}}},
        "leaderboard": {"type": "array"},
    },
    "anyOf": [{"required": ["score"]}, {"properties": {"tests": {"items": {"required": ["score"]}}}}],
}


def test_gradescope_results_follow_its_schema_and_score_each_kind_of_task(tmp_path):
    columns = ["03/reward_to_go", "03/past_rewards_drop_out", "03/reward_to_go_everywhere"]
    kinds = dict(zip(columns, ["exercise", "written", "prediction"]))
    table = {"ada": dict(zip(columns, ["pass", "done", "wrong"])), "bo": dict(zip(columns, ["minirl's own", "not done"]))}
    runs = {"ada": {"03_reinforce": "ran"}, "bo": {"03_reinforce": "ran"}}
    ada, bo = (grading.gradescope_results(s, columns, kinds, table, runs) for s in ("ada", "bo"))
    for results in (ada, bo):
        jsonschema.validate(results, GRADESCOPE_SCHEMA)
    assert [(t["score"], t["max_score"], t["status"]) for t in ada["tests"]] == [
        (1.0, 1.0, "passed"), (0.0, 0.0, "passed"), (1.0, 1.0, "passed")]  # a prediction made earns its point
    assert ada["score"] == 2.0 and bo["score"] == 0.0 and bo["tests"][2]["output"] == "missing"
    bad = dict(ada, tests=[dict(ada["tests"][0], status="ok")])  # the schema refuses what Gradescope would
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, GRADESCOPE_SCHEMA)
    path = grading.write_gradescope(ada, tmp_path, None)
    assert path == tmp_path / "results.json" and json.loads(path.read_text()) == ada


def test_checker_calls_are_taken_from_the_solved_lesson_statement_by_statement():
    nb = notebook(cell("a", "x = 1\nminirl.check.pass_at_k(pass_at_k)\nprint(x)"),
                  cell("b", "for run in 'AB':\n    check.prediction(run, guess[run], 'a', 'why')"), cell("c", "y = 2"))
    assert grading.checker_calls(nb) == {"a": ["minirl.check.pass_at_k(pass_at_k)"],
                                         "b": ["for run in 'AB':\n    check.prediction(run, guess[run], 'a', 'why')"]}


# ---------------------------------------------------------------- end to end, in kernels
FORGED = STUB.join(["def pass_at_k(n, c, k):\n    ", "\nprint('PASS pass_at_k: 8 cases, each within 1e-06 of the reference')"])
WRAPPER = "from minirl.world.evaluate import pass_at_k as theirs\npass_at_k = lambda n, c, k: theirs(n, c, k)\n" + CHECK_1
EDITED = PASS_AT_K.replace("1 - comb", "0.5 - comb") + "minirl.check.pass_at_k(lambda n, c, k: 1 - __import__('math').comb(n - c, k) / __import__('math').comb(n, k))"
WRONG_RETURN = "def discounted_return(rewards, gamma):\n    return sum(rewards)\n" + CHECK_2
UNFINISHED = f"def discounted_return(rewards, gamma):\n    {STUB}\n" + CHECK_2


@pytest.mark.slow
def test_grade_believes_the_checkers_and_loses_no_student(tmp_path, lessons):
    """Planted: all right; one exercise wrong; a cell that raises (later cells still run); a cell that
    runs forever (interrupted at the limit, the next exercise still graded); a forged PASS line; a
    lambda around minirl's own function; a call edited to check another function; a truncated
    upload; an empty folder; a .py alone. Every one has its row and status."""
    subs = tmp_path / "subs"
    planted = {"ada": submission(PASS_AT_K + CHECK_1, RETURN + CHECK_2),
               "bo": submission(PASS_AT_K + CHECK_1, WRONG_RETURN, answer="<!-- written: why_unbiased, 2 points -->\nIt is."),
               "cy": submission(PASS_AT_K + CHECK_1, UNFINISHED, "1 / 0", "print('still running')"),
               "di": submission(PASS_AT_K + CHECK_1, "while True:\n    pass"),
               "ed": submission(FORGED, RETURN + CHECK_2),
               "fy": submission(WRAPPER, RETURN + CHECK_2),
               "gu": submission(EDITED, RETURN + CHECK_2)}
    for student, nb in planted.items():
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, subs / student / "99_homework.ipynb")
    (subs / "hy").mkdir()
    (subs / "hy" / "99_homework.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')
    (subs / "iz").mkdir()
    (subs / "jo").mkdir()
    (subs / "jo" / "homework.py").write_text(PASS_AT_K)
    columns, table, runs = grading.grade(subs, timeout=20, out=tmp_path / "grades.csv", lessons=lessons,
                                         gradescope=tmp_path / "gradescope")
    assert columns == ["99/pass_at_k", "99/discounted_return", "99/why_unbiased"]
    got = {s: tuple(row.get(c, "missing") for c in columns) for s, row in table.items()}
    assert got == {"ada": ("pass", "pass", "done"), "bo": ("pass", "fail", "not done"),
                   "cy": ("pass", "not done", "done"), "di": ("pass", "no verdict", "done"),
                   "ed": ("fail", "pass", "done"), "fy": ("minirl's own", "pass", "done"),
                   "gu": ("fail", "pass", "done"), "hy": ("unreadable",) * 3,
                   "iz": ("missing",) * 3, "jo": ("missing",) * 3}
    assert runs["ada"] == {"99_homework": "ran"}
    assert runs["cy"]["99_homework"] == "code cell 4: ZeroDivisionError"
    assert runs["di"]["99_homework"] == "code cell 3: over 20 s"
    assert "printed PASS for pass_at_k, which its checker did not give" in runs["ed"]["99_homework"]
    assert runs["hy"]["99_homework"].startswith("99_homework.ipynb: unreadable (")
    assert runs["iz"] == {"submission": "an empty folder"} and "homework.py" in runs["jo"]["submission"]
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "grades.csv").open())}
    assert set(rows) == set(table) and rows["ada"]["passed"] == "3/3" and rows["ed"]["passed"] == "2/3"
    ada = json.loads((tmp_path / "gradescope" / "ada" / "results.json").read_text())
    jsonschema.validate(ada, GRADESCOPE_SCHEMA)
    assert ada["score"] == 2.0


@pytest.mark.slow
def test_a_real_lesson_graded_whole_passes_every_task(tmp_path):
    """Lesson 01, solved, handed in as a submission: the grader finds its checker cells by id and
    every exercise passes, the prediction is right, the experiment and written problem are done."""
    (tmp_path / "ada").mkdir()
    (tmp_path / "ada" / "01_token_mdp.ipynb").write_bytes((grading.LESSONS / "01_token_mdp.ipynb").read_bytes())
    verdicts, status = grading.grade_notebook(grading.submissions(tmp_path)["ada"][0], timeout=120)
    assert status == "ran"
    assert verdicts == {name: {"exercise": "pass", "prediction": "right", "written": "done"}[kind]
                        for name, kind in grading.expected_tasks("01_token_mdp").items()}


def test_only_records_signed_with_the_graders_key_count():
    """A record a student displays with the verdict's MIME type but without the key (a guessed or
    copied signature) is not a verdict; the checker's own record, signed with the key, is."""
    from minirl.course import verdicts
    key, other = b"k" * 32, b"o" * 32

    def output(name, outcome, signed_with):
        record = {"name": name, "outcome": outcome, "signature": verdicts.signature(signed_with, name, outcome)}
        return {"output_type": "display_data", "data": {verdicts.MIME: record}}
    outputs = [output("pass_at_k", "pass", other), output("gae", "not done", key), output("gae", "pass", other),
               {"output_type": "display_data", "data": {verdicts.MIME: {"name": "kl_k3", "outcome": "pass"}}}]
    assert grading._signed(outputs, key) == {"gae": "not done"}
