"""Predict, then run: `check.prediction`'s lines, the student version's stub, and the grade's reading."""
import nbformat
import pytest

from minirl import check
from minirl.course import commands, grading
from minirl.course.predictions import NOT_PREDICTED

CELL = '''# Which has the smaller variance: "a", "b" or "c"?
### BEGIN PREDICTION
predicted_variance = "b"
predicted_ratio = 0.5
### END PREDICTION
print("next")
'''


@pytest.mark.parametrize("predicted, verdict", [("b", "RIGHT"), (" B ", "RIGHT"), ("a", "WRONG")])
def test_a_choice_is_right_only_when_it_is_the_answer(capsys, predicted, verdict):
    check.prediction("variance", predicted, "b", "Reward-to-go drops the rewards before each action.",
                     choices=("a", "b", "c"))
    assert capsys.readouterr().out == (f'{verdict} variance: you predicted "{predicted}"; the runs say "b". '
                                       "Reward-to-go drops the rewards before each action.\n")


@pytest.mark.parametrize("predicted, tolerance, relative, verdict", [
    (0.45, 0.1, False, "RIGHT"), (0.65, 0.1, False, "WRONG"), (0.52, 0.05, True, "RIGHT"),
    (0.6, 0.05, True, "WRONG"), (float("nan"), 1.0, False, "WRONG"), ("0.5", 1.0, False, "WRONG")])
def test_a_number_is_right_within_its_tolerance(capsys, predicted, tolerance, relative, verdict):
    check.prediction("ratio", predicted, 0.5, "why", tolerance=tolerance, relative=relative)
    assert capsys.readouterr().out.startswith(f"{verdict} ratio: you predicted ")


def test_no_prediction_and_a_choice_not_offered_are_said_so_without_the_answer(capsys):
    check.prediction("variance", None, "b", "the reason")
    check.prediction("variance", "d", "b", "the reason", choices=("a", "b", "c"))
    out = capsys.readouterr().out.splitlines()
    assert out == [NOT_PREDICTED.format(name="variance"),
                   'FAIL variance: "d" is not one of the choices "a", "b", "c"']
    with pytest.raises(ValueError, match="needs a tolerance"):
        check.prediction("ratio", 0.4, 0.5, "why")


def test_the_student_version_keeps_each_name_set_to_none_and_runs(capsys):
    stub = commands.strip_predictions(CELL)
    assert stub == ('# Which has the smaller variance: "a", "b" or "c"?\n'
                    "predicted_variance = None  # your prediction\n"
                    "predicted_ratio = None  # your prediction\n"
                    'print("next")\n')
    scope = {}
    exec(stub, scope)
    check.prediction("variance", scope["predicted_variance"], "b", "why")
    assert capsys.readouterr().out.splitlines() == ["next", NOT_PREDICTED.format(name="variance")]


def test_with_outputs_a_verdict_becomes_the_line_of_a_prediction_not_made_and_the_grade_reads_it():
    lines = 'RIGHT variance: you predicted "b"; the runs say "b". why\nWRONG ratio: you predicted 0.7; x\n'
    reveal = nbformat.v4.new_code_cell("check.prediction(...)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=lines)])
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL), reveal])
    assert grading.checker_verdicts(nb) == {"variance": "right", "ratio": "wrong"}
    student = commands.student_version(nb, with_outputs=True)
    assert student.cells[1].outputs[0].text == (NOT_PREDICTED.format(name="variance") + "\n"
                                                + NOT_PREDICTED.format(name="ratio") + "\n")
    assert grading.checker_verdicts(student) == {"variance": "not done", "ratio": "not done"}
    assert "BEGIN PREDICTION" not in student.cells[0].source


def test_unbalanced_prediction_markers_are_an_error():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("### BEGIN PREDICTION\nx = 1")])
    with pytest.raises(ValueError, match="unbalanced"):
        commands.student_version(nb)
