"""Bad input to the off-policy corrections (minirl.core.corrections): each gets an error from minirl
itself, of a stated type, whose message names what was wrong: probabilities passed for log-probs, NaN
or inf on a real token, wrong types, shapes and masks. And legal input keeps working: padding may hold
anything (NaN, inf, a positive value) and never leaks.

Each case is (id, call, exception type, a regex the message must match), as in tests/test_bad_input.py.
"""
from __future__ import annotations

import math

import pytest
import torch

from bad_input import assert_refused_by_minirl

from minirl.core import corrections

PI = torch.tensor([[0.5, 0.2, 0.9], [0.6, 0.3, 0.4]], dtype=torch.float64)
MU = torch.tensor([[0.25, 0.4, 0.3], [0.2, 0.6, 0.5]], dtype=torch.float64)
LOG_PI, LOG_MU = PI.log(), MU.log()
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def with_entry(x: torch.Tensor, i: int, j: int, value: float) -> torch.Tensor:
    x = x.clone()
    x[i, j] = value
    return x


def iw(logprobs=LOG_PI, behaviour=LOG_MU, mask=MASK, mode="token_truncate", cap=2.0):
    return corrections.importance_weights(logprobs, behaviour, mask, mode, cap)


CASES = [
    # ------------------------------------------------------------ importance_weights
    ("importance_weights: probabilities for logprobs", lambda: iw(logprobs=PI), ValueError,
     r"logprobs holds values in \[0, 1\], as probabilities do.*pass logprobs\.log\(\)"),
    ("importance_weights: probabilities for behaviour_logprobs", lambda: iw(behaviour=MU, mode="sequence_mask"),
     ValueError, r"behaviour_logprobs holds values in \[0, 1\], as probabilities do.*pass behaviour_logprobs\.log\(\)"),
    ("importance_weights: NaN log-prob on a real token", lambda: iw(logprobs=with_entry(LOG_PI, 0, 1, math.nan)),
     ValueError, r"logprobs hold NaN or inf on real \(mask = 1\) tokens"),
    ("importance_weights: -inf behaviour log-prob on a real token",
     lambda: iw(behaviour=with_entry(LOG_MU, 1, 0, -math.inf)), ValueError, "behaviour_logprobs hold NaN or inf"),
    ("importance_weights: integer log-probs", lambda: iw(logprobs=torch.zeros(2, 3, dtype=torch.long)), TypeError,
     r"logprobs must be a floating-point tensor.*\.float\(\)"),
    ("importance_weights: log-probs as a list", lambda: iw(behaviour=LOG_MU.tolist()), TypeError,
     "behaviour_logprobs must be a torch.Tensor"),
    ("importance_weights: shapes differ", lambda: iw(behaviour=LOG_MU[:, :2]), ValueError,
     r"behaviour_logprobs shape \(2, 2\) does not match logprobs shape \(2, 3\)"),
    ("importance_weights: mask as a list", lambda: iw(mask=MASK.tolist()), TypeError, "mask must be a torch.Tensor"),
    ("importance_weights: mask of 2s", lambda: iw(mask=MASK * 2), ValueError, "mask must hold only 0 and 1"),
    ("importance_weights: unknown mode", lambda: iw(mode="token_clip"), ValueError,
     "unknown mode 'token_clip'.*choose one of"),
    ("importance_weights: cap below 1", lambda: iw(cap=0.5), ValueError, "cap must be >= 1"),
    ("importance_weights: cap as a string", lambda: iw(cap="2"), TypeError, "cap must be a number"),
    ("importance_weights: sequence mode on 1-D log-probs", lambda: iw(LOG_PI[0], LOG_MU[0], MASK[0], "sequence_truncate"),
     ValueError, r"mode 'sequence_truncate' weighs whole rows: logprobs must be \(B, T\)"),
    # ------------------------------------------------------------ log_ratios, geometric_sequence_ratio
    ("log_ratios: NaN on a real token", lambda: corrections.log_ratios(with_entry(LOG_PI, 1, 1, math.nan), LOG_MU, MASK),
     ValueError, "logprobs hold NaN or inf on real"),
    ("log_ratios: mask of another shape", lambda: corrections.log_ratios(LOG_PI, LOG_MU, MASK[:, :2]), ValueError,
     r"mask shape \(2, 2\) does not match logprobs shape"),
    ("geometric_sequence_ratio: old log-probs as a list",
     lambda: corrections.geometric_sequence_ratio(LOG_PI, LOG_MU.tolist(), MASK), TypeError,
     "old_logprobs must be a torch.Tensor"),
    ("geometric_sequence_ratio: inf old log-prob on a real token",
     lambda: corrections.geometric_sequence_ratio(LOG_PI, with_entry(LOG_MU, 0, 0, math.inf), MASK), ValueError,
     "old_logprobs hold NaN or inf on real"),
    ("geometric_sequence_ratio: a row with no token",
     lambda: corrections.geometric_sequence_ratio(LOG_PI, LOG_MU, torch.tensor([[1, 1, 1], [0, 0, 0]])), ValueError,
     "a row of mask is all zeros"),
    ("geometric_sequence_ratio: 1-D log-probs", lambda: corrections.geometric_sequence_ratio(LOG_PI[0], LOG_MU[0], MASK[0]),
     ValueError, r"logprobs must be \(B, T\)"),
]


@pytest.mark.parametrize("label, call, error, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(label, call, error, match):
    assert_refused_by_minirl(call, error, match)


# ---------------------------------------------------------------- legal input keeps working
@pytest.mark.parametrize("mode", corrections.CORRECTIONS)
def test_padding_may_hold_anything(mode):
    """NaN, inf or a probability-like positive value on a masked token neither raises nor leaks."""
    want = iw(mode=mode)
    for pad in (math.nan, math.inf, -math.inf, 0.7):
        got = iw(with_entry(LOG_PI, 1, 2, pad), with_entry(LOG_MU, 1, 2, pad), mode=mode)
        assert torch.equal(got, want), (mode, pad)
        assert got[1, 2] == 0
    r = corrections.log_ratios(with_entry(LOG_PI, 1, 2, math.nan), LOG_MU, MASK)
    assert torch.isfinite(r).all() and r[1, 2] == 0
    s = corrections.geometric_sequence_ratio(with_entry(LOG_PI, 1, 2, math.inf), LOG_MU, MASK)
    assert torch.allclose(s, torch.tensor([3.0 ** (1 / 3), 1.5 ** (1 / 2)], dtype=torch.float64), atol=1e-12)


def test_made_up_log_ratios_above_zero_are_legal():
    """A lesson's example log-probs (log 1.5 here, mixed with negative ones) are not probabilities: only
    real tokens all in [0, 1] are refused as such."""
    made_up = LOG_PI.clone()
    made_up[0, 0] = math.log(1.5)
    assert torch.isfinite(iw(logprobs=made_up)).all()


def test_log_probs_at_zero_and_bool_mask_are_legal():
    """A token the policy is sure of (log p = 0) is a log-prob, not a probability; a bool mask and a
    float mask give the weights an int mask gives."""
    sure = torch.zeros(2, 3, dtype=torch.float64)
    assert torch.equal(iw(sure, sure, cap=math.inf), MASK.double())  # on-policy: weight 1 on each real token
    want = iw()
    assert torch.equal(iw(mask=MASK.bool()), want) and torch.equal(iw(mask=MASK.double()), want)
