"""Predict, then run: a student commits a prediction in code before the cell that reveals the answer.

In a lesson, the prediction is a cell of its own, its answer between two markers:

    # Which has the smaller variance: "a" the full return, "b" reward-to-go, "c" the same?
    ### BEGIN PREDICTION
    predicted_variance = "b"
    ### END PREDICTION

The student version keeps each name and sets it to None (`commands.strip_predictions`), so the
notebook still runs to the end. The cell that reveals the answer measures it, then calls
`check.prediction(name, predicted, answer, why)`, which prints one line that `course grade` reads:

    RIGHT variance: you predicted "b"; the runs say "b". <why>
    WRONG variance: you predicted "a"; the runs say "b". <why>
    FAIL variance: no prediction yet (set it in the prediction cell above, then run this cell again)

A choice is right when it is the answer (case and spaces aside); a number when it is within
`tolerance` of the answer (absolute), or, with `relative=True`, within that fraction of it.
"""
from __future__ import annotations

import math
import numbers

from .verdicts import emit

__all__ = ["BEGIN", "END", "NOT_PREDICTED", "prediction"]

BEGIN, END = "### BEGIN PREDICTION", "### END PREDICTION"
NOT_PREDICTED = "TODO {name}: no prediction yet (set it in the prediction cell above, then run this cell again)"


def shown(value) -> str:
    return f'"{value}"' if isinstance(value, str) else f"{value:.3g}" if isinstance(value, float) else str(value)


def is_right(predicted, answer, tolerance: float | None, relative: bool) -> bool:
    if isinstance(answer, str):
        return isinstance(predicted, str) and predicted.strip().lower() == answer.strip().lower()
    if isinstance(predicted, bool) or not isinstance(predicted, numbers.Real) or not math.isfinite(predicted):
        return False
    if tolerance is None:
        raise ValueError("prediction: a number's answer needs a tolerance (how close counts as right)")
    return abs(predicted - answer) <= tolerance * (abs(answer) if relative else 1.0)


def prediction(name: str, predicted, answer, why: str, tolerance: float | None = None,
               choices: tuple[str, ...] | None = None, relative: bool = False) -> None:
    """Print RIGHT or WRONG (with the answer and `why`), or the TODO line of a prediction not made
    (`predicted` is None). `choices`, where given, are the allowed answers: anything else is
    refused with the list, before the answer is shown. Never raises on the student's value."""
    if predicted is None:
        emit(name, "not done", NOT_PREDICTED.format(name=name))
        return
    if choices is not None and (not isinstance(predicted, str)
                                or predicted.strip().lower() not in [c.lower() for c in choices]):
        emit(name, "fail", f"FAIL {name}: {shown(predicted)} is not one of the choices {', '.join(map(shown, choices))}")
        return
    right = is_right(predicted, answer, tolerance, relative)
    emit(name, "right" if right else "wrong",
         f"{'RIGHT' if right else 'WRONG'} {name}: you predicted {shown(predicted)}; the runs say {shown(answer)}. {why}")
