"""Experiments' findings and written problems: handed out blank, marked for nbgrader, read as done or not done."""
import csv

import nbformat

from minirl.course import commands, grading, written

ANSWER = ("<!-- written: baseline_lemma, 2 points -->\n<!-- BEGIN SOLUTION -->\n**The course's answer.** "
          "E[grad log pi(a|s) b(s)] = b(s) sum_a grad pi(a|s) = b(s) grad 1 = 0.\n\n*Rubric.* One point each: "
          "the score's mean is zero; b leaves the sum.\n<!-- END SOLUTION -->")
HUNT = "**Hunt the bug.**\n\n<!-- BEGIN SOLUTION -->\nThe mask is forgotten.\n<!-- END SOLUTION -->"


def lesson(*markdown):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(m) for m in markdown]
    return nb


def test_the_marker_names_kind_name_and_points_and_nothing_else_is_a_task():
    assert written.written_task(ANSWER) == written.Written("written", "baseline_lemma", 2)
    assert written.written_task("<!-- experiment: beta_sweep, 1 point -->\nx") == ("experiment", "beta_sweep", 1)
    assert written.written_task(HUNT) is None
    assert written.written_task("Some text\n<!-- written: late, 2 points -->") is None  # the marker opens the cell


def test_the_student_version_blanks_the_answer_and_keeps_the_marker():
    nb = commands.student_version(lesson(ANSWER, HUNT))
    assert nb.cells[0].source == f"<!-- written: baseline_lemma, 2 points -->\n{written.STUB}"
    assert nb.cells[1].source == f"**Hunt the bug.**\n\n{commands.ANSWER_STUB}"
    assert grading.checker_verdicts(nb) == {"baseline_lemma": "not done"}


def test_done_needs_the_stub_gone_and_ten_words():
    blank = commands.student_version(lesson(ANSWER)).cells[0].source
    marker = blank.replace(written.STUB, "")
    assert not written.is_done(blank)
    assert not written.is_done(marker + "It is zero.")  # three words are not an answer a person can grade
    assert written.is_done(marker + "The score has mean zero under pi, and b(s) does not depend on the action.")
    assert not written.is_done(blank + "\nThe score has mean zero under pi, and b(s) does not depend on a.")  # stub kept
    assert written.is_done(ANSWER)  # the solved lesson's worked answer


def test_nbgrader_sees_a_manually_graded_answer_of_the_markers_points():
    nb = commands.nbgrader_metadata(lesson(ANSWER, HUNT), "04_baselines_critics")
    assert nb.cells[0].metadata["nbgrader"] == {"grade": True, "grade_id": "04-baseline_lemma", "locked": False,
                                                "schema_version": 3, "solution": True, "task": False, "points": 2}
    assert nb.cells[1].metadata["nbgrader"]["grade_id"] == "04-hunt-the-bug"


def test_the_grade_table_counts_a_done_answer(tmp_path):
    table = {"ada": {"04/baseline_lemma": "done", "04/gae": "pass", "04/predicted": "wrong"},
             "bo": {"04/baseline_lemma": "not done", "04/gae": "fail", "04/predicted": "right"}}
    runs = {"ada": {"04": "ran"}, "bo": {"04": "ran"}}
    grading.write_grades(list(table["ada"]), table, runs, tmp_path / "grades.csv")
    rows = {r["student"]: r["passed"] for r in csv.DictReader((tmp_path / "grades.csv").open())}
    assert rows == {"ada": "2/3", "bo": "1/3"}
