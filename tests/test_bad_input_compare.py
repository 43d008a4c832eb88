"""Bad input to the comparisons (minirl.core.compare): each gets an error from minirl itself, of a
stated type, whose message names the argument and what to pass: strings and None for values, a dict
{seed: value} per arm (it would compare the seed numbers), one name for both arms, a scalar level, a
NaN KL, a window with no evaluations, a rate with no runs, a missing column. And legal degenerate
input (equal values, one run per arm, a diverged run where it is allowed) keeps working.

Each case is (id, call, exception type, a regex the message must match), as in tests/test_bad_input.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from bad_input import assert_refused_by_minirl

from minirl.core import compare

A, B = [0.9, 0.8, 0.85, 0.95, 0.7, 0.9], [0.5, 0.6, 0.55, 0.4, 0.5, 0.6]
KL, GOLD = [0.0, 1.0, 2.0, 4.0], [1.0, 1.5, 2.0, 3.0]
SCORES = {1e-4: {10: 0.1, 11: 0.2}, 3e-4: {10: 0.5, 11: 0.4}, 1e-3: {10: 0.3, 11: 0.2}}
ROWS = [{"lr": lr, "seed": s, "pass1": v} for lr, per_seed in SCORES.items() for s, v in per_seed.items()]


def c():
    return compare.paired(A, B, ("new", "old"))


CASES = [
    # ------------------------------------------------------------ paired, unpaired, iqm
    ("paired: a dict {seed: value} per arm", lambda: compare.paired(dict(enumerate(A)), dict(enumerate(B))), TypeError,
     r"a is a dict.*keys \(seeds\?\).*\[a\[s\] for s in seeds\]"),
    ("unpaired: a string for an arm", lambda: compare.unpaired("0.5 0.6", B), TypeError,
     "a must be a list of numbers, one per run.*the string"),
    ("paired: None for an arm", lambda: compare.paired(A, None), TypeError, "b must be a list of numbers"),
    ("paired: one number for an arm", lambda: compare.paired(0.9, [0.5]), TypeError, r"for one, pass \[0.9\]"),
    ("unpaired: None among the values", lambda: compare.unpaired([0.1, None, 0.3], B), TypeError,
     r"a\[1\] must be a number, got None"),
    ("unpaired: a set for an arm", lambda: compare.unpaired(set(A), B), TypeError, "sets have no order"),
    ("paired: a 2-D array", lambda: compare.paired(np.ones((3, 2)), np.ones((3, 2))), ValueError,
     r"a must be one-dimensional.*\(3, 2\)"),
    ("paired: one name for both arms", lambda: compare.paired(A, B, ("PPO", "PPO")), ValueError,
     "names are both 'PPO'.*its own name"),
    ("unpaired: names as one string", lambda: compare.unpaired(A, B, "PPO v GRPO"), TypeError,
     r"names must be a pair of names.*\('PPO', 'REINFORCE'\)"),
    ("paired: three names", lambda: compare.paired(A, B, ("a", "b", "c")), TypeError, "names must be two strings"),
    ("paired: higher_is_better as a string", lambda: compare.paired(A, B, higher_is_better="no"), TypeError,
     "higher_is_better must be True or False"),
    ("unpaired: alpha of 5 (percent)", lambda: compare.unpaired(A, B, alpha=5), ValueError,
     r"alpha must be a number in \(0, 1\), e.g. 0.05"),
    ("paired: alpha of 1", lambda: compare.paired(A, B, alpha=1.0), ValueError, r"alpha must be a number in \(0, 1\)"),
    ("iqm: a dict of runs", lambda: compare.iqm({0: 0.3, 1: 0.4}), TypeError, "values is a dict"),
    # ------------------------------------------------------------ holm, family, table
    ("holm: a p-value above 1", lambda: compare.holm([0.01, 1.5]), ValueError, r"pvalues\[1\] is 1.5.*\[0, 1\]"),
    ("holm: a NaN p-value", lambda: compare.holm([math.nan]), ValueError, r"pvalues\[0\] is nan"),
    ("holm: one p-value, not a list", lambda: compare.holm(0.03), TypeError,
     r"pvalues must be a list of numbers, one per comparison.*\[0.03\]"),
    ("family: one comparison, not a list", lambda: compare.family(c()), TypeError, r"for one, pass \[comparison\]"),
    ("family: a p-value for a comparison", lambda: compare.family([c(), 0.03]), TypeError,
     "item 1 is a float, not a Comparison"),
    ("family: adjust as a string", lambda: compare.family([c()], adjust="holm"), TypeError, "adjust must be True or False"),
    ("table: labels as one string", lambda: compare.table([c()], labels="pass@1"), TypeError,
     r"labels must be a list of strings.*wrap it, \[label\]"),
    # ------------------------------------------------------------ at_kl
    ("at_kl: a scalar level", lambda: compare.at_kl(KL, GOLD, 0.5), TypeError, r"levels must be a list.*\[0.5\]"),
    ("at_kl: a NaN KL", lambda: compare.at_kl([0.0, math.nan, 2.0, 4.0], GOLD, [1.0]), ValueError, r"kl\[1\] is NaN"),
    ("at_kl: a NaN level", lambda: compare.at_kl(KL, GOLD, [1.0, math.nan]), ValueError,
     r"levels\[1\] is nan.*finite KL"),
    ("at_kl: a string level", lambda: compare.at_kl(KL, GOLD, ["0.5"]), TypeError, r"levels\[0\] must be a number"),
    ("at_kl: one metric short", lambda: compare.at_kl(KL, GOLD[:3], [1.0]), ValueError, "one metric per evaluation"),
    # ------------------------------------------------------------ window
    ("window: no evaluations", lambda: compare.window([], [], 0), ValueError, "window needs a run's evaluations"),
    ("window: start as a string", lambda: compare.window([0, 1], [0.1, 0.2], "late"), TypeError, "start must be a number"),
    ("window: a NaN start", lambda: compare.window([0, 1], [0.1, 0.2], math.nan), ValueError,
     "start must be a finite number, got nan"),
    ("window: end before start", lambda: compare.window([0, 1, 2], [0.1, 0.2, 0.3], 2, 1), ValueError,
     r"end \(1\) is before start \(2\)"),
    ("window: a dict of values", lambda: compare.window([0, 1], {0: 0.1, 1: 0.2}, 0), TypeError, "values is a dict"),
    ("Window.share_at_least: a NaN threshold", lambda: compare.window([0, 1], [0.1, 0.2], 0).share_at_least(math.nan),
     ValueError, "threshold must be a finite number"),
    # ------------------------------------------------------------ choose_rate, sweep_rate
    ("choose_rate: a rate with no runs", lambda: compare.choose_rate({**SCORES, 3e-3: {}}), ValueError,
     r"rate 0.003 has no runs.*at least one tuning seed"),
    ("choose_rate: scores per rate as a list", lambda: compare.choose_rate({lr: list(v.values()) for lr, v in SCORES.items()}),
     TypeError, r"scores\[0.0001\] must be a dict \{seed: score\}"),
    ("choose_rate: one reported seed, not a list", lambda: compare.choose_rate(SCORES, reported_seeds=3), TypeError,
     r"reported_seeds must be a list of seeds.*range\(6\)"),
    ("choose_rate: a rate as a string", lambda: compare.choose_rate({"1e-4": {0: 0.1}, 3e-4: {0: 0.2}, 1e-3: {0: 0.1}}),
     TypeError, "the keys of scores must be the rates"),
    ("choose_rate: best and runner-up share no seed", lambda: compare.choose_rate(
        {1e-4: {0: 0.1}, 3e-4: {1: 0.5}, 1e-3: {2: 0.4}}), ValueError, "share no tuning seed"),
    ("sweep_rate: a grid rate with no rows", lambda: compare.sweep_rate(ROWS, [1e-4, 3e-4, 1e-3, 3e-3], "pass1", [0]),
     ValueError, r"no row has lr == 0.003.*the rows' rates"),
    ("sweep_rate: a missing score column", lambda: compare.sweep_rate(ROWS, list(SCORES), "pass@1", [0]), ValueError,
     r"rows\[0\] has no column 'pass@1'; its columns: lr, seed, pass1"),
    ("sweep_rate: rows without lr", lambda: compare.sweep_rate([{"seed": 0, "pass1": 0.1}], list(SCORES), "pass1", [0]),
     ValueError, r"rows\[0\] has no column 'lr'"),
    ("sweep_rate: one row, not a list", lambda: compare.sweep_rate(ROWS[0], list(SCORES), "pass1", [0]), TypeError,
     "rows must be a list of dicts"),
]


@pytest.mark.parametrize("label, call, error, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(label, call, error, match):
    assert_refused_by_minirl(call, error, match)


# ---------------------------------------------------------------- legal degenerate input keeps working
def test_equal_values_and_one_run_per_arm():
    same = compare.paired([0.5] * 4, [0.5] * 4)
    assert same.effect == 0 and same.leader is None and same.p == 1.0
    tie = compare.unpaired([0.5, 0.5], [0.5, 0.5])
    assert tie.effect == 0.5 and tie.leader is None
    one = compare.unpaired([1.0], [0.0])
    assert one.leader is None and one.smallest_p == 1.0
    assert compare.iqm([0.3]).value == pytest.approx(0.3)


def test_arrays_ranges_bools_and_a_diverged_run_are_legal():
    """NumPy arrays, tuples and generators are values; a diverged run (NaN) is the worst in unpaired,
    a NaN metric reads NaN at_kl, a NaN value in a window gives a NaN median, and a generator of
    comparisons is a family."""
    assert compare.paired(np.array(A), tuple(B)).effect == pytest.approx(compare.paired(A, B).effect)
    assert compare.unpaired([1.0, math.nan, 2.0], [0.5, 0.6, 0.7]).difference != compare.unpaired(A, B).difference
    assert math.isnan(compare.at_kl(KL, [1.0, math.nan, 2.0, 3.0], [0.5])[0])
    assert compare.at_kl(KL, GOLD, []) == [] and compare.at_kl(KL, GOLD, (3.0,)) == pytest.approx([2.5])
    assert math.isnan(compare.window(range(3), [0.1, math.nan, 0.2], 0).median)
    family = compare.family(compare.paired(A, B, (f"new {i}", "old")) for i in range(2))
    assert len(family) == 2 and all(f.comparisons == 2 for f in family)
    assert compare.holm([]) == [] and compare.family([]) == []


def test_sweep_rate_ignores_rows_off_the_grid():
    """Rows of a rate not on the grid (another run's) need not carry the score; the choice is unchanged."""
    rows = ROWS + [{"lr": 1.0, "seed": 10}]
    assert compare.sweep_rate(rows, list(SCORES), "pass1", range(3)) == 3e-4
    assert compare.choose_rate(SCORES, reported_seeds=range(6)).rate == 3e-4
