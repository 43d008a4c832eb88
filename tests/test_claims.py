"""`minirl.claim`: one line that states a lesson's claim and its number, and stops the cell when it fails."""
import pytest

import minirl


def test_a_claim_that_holds_prints_its_number_and_bound(capsys):
    minirl.claim("SFT raises gold by more than 0.1", 0.2345, above=0.1)
    minirl.claim("the share stays in range", 0.62, at_least=0.5, at_most=0.9)
    assert capsys.readouterr().out.splitlines() == [
        "claim: SFT raises gold by more than 0.1 (measured 0.23 > 0.1)",
        "claim: the share stays in range (measured 0.62 >= 0.5 and <= 0.9)"]


def test_rounding_noise_is_printed_as_its_bound(capsys):
    """An identity checked to 1e-6 prints "below 1e-6", whatever the last digits were on this CPU."""
    for noise in (0.0, 3e-12, 4e-9):
        minirl.claim("the identity holds", noise, below=1e-6)
    assert capsys.readouterr().out.splitlines() == ["claim: the identity holds (measured below 1e-6)"] * 3


@pytest.mark.parametrize("measured, bounds, needed", [
    (0.05, {"above": 0.1}, "> 0.1"), (0.1, {"above": 0.1}, "> 0.1"), (0.1, {"below": 0.1}, "< 0.1"),
    (0.09, {"at_least": 0.1}, ">= 0.1"), (0.11, {"at_most": 0.1}, "<= 0.1"), (2e-6, {"below": 1e-6}, "< 1e-6"),
    (float("nan"), {"at_least": 0.0}, ">= 0"), (0.95, {"at_least": 0.5, "at_most": 0.9}, "<= 0.9")])
def test_a_claim_that_fails_stops_the_cell_saying_what_was_needed(measured, bounds, needed):
    with pytest.raises(AssertionError, match=r"claim failed: a claim \(measured .*, needs " + needed.replace(".", r"\.") + r"\)"):
        minirl.claim("a claim", measured, **bounds)


def test_strict_and_inclusive_bounds_differ_at_the_bound(capsys):
    minirl.claim("inclusive", 0.1, at_least=0.1)
    minirl.claim("inclusive", 0.1, at_most=0.1)
    with pytest.raises(AssertionError):
        minirl.claim("strict", 0.1, above=0.1)
    with pytest.raises(AssertionError):
        minirl.claim("strict", 0.1, below=0.1)


def test_a_bool_claim_holds_or_stops(capsys):
    minirl.claim("every exact KL is under its bound", True)
    assert capsys.readouterr().out == "claim: every exact KL is under its bound (holds)\n"
    with pytest.raises(AssertionError, match="claim failed: every exact KL is under its bound"):
        minirl.claim("every exact KL is under its bound", False)


def test_a_claim_without_a_bound_or_with_a_bound_on_a_bool_is_refused():
    with pytest.raises(ValueError, match="give a bound"):
        minirl.claim("no bound", 0.3)
    with pytest.raises(ValueError, match="takes no bound"):
        minirl.claim("a bool", True, above=0.5)
