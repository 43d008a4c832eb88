"""A lesson's checked claim: one readable line instead of a bare `assert`.

    minirl.claim("SFT raises gold by more than 0.1", gain, above=0.1)
    # prints: claim: SFT raises gold by more than 0.1 (measured 0.23 > 0.1)

The line states the claim and the number that supports it, so a student reads what was checked
and by how much; if the number does not support it, the cell stops with the same line, saying
what was needed. nbval compares the printed line like any other output, so the number is shown
to `digits` decimals (two by default: fewer than a run's last digits, which change from one CPU
to another), and a measurement smaller than those decimals can show is printed as "below" its
bound, never as rounding noise.
"""
from __future__ import annotations

import math
import operator

__all__ = ["claim"]

RELATIONS = {"above": (operator.gt, ">"), "below": (operator.lt, "<"),
             "at_least": (operator.ge, ">="), "at_most": (operator.le, "<=")}


def shown(value: float, digits: int) -> str:
    return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits or value == 0 else f"{value:.1e}".replace("e-0", "e-")


def bound_text(bound: float) -> str:
    return f"{bound:g}".replace("e-0", "e-")


def claim(statement: str, measured, *, above: float | None = None, below: float | None = None,
          at_least: float | None = None, at_most: float | None = None, digits: int = 2) -> None:
    """Print "claim: <statement> (measured <m> <relation> <bound>)" and raise AssertionError, with
    the same words, where `measured` does not meet every bound given. A bool `measured` with no
    bound is a claim that holds or not ("(holds)"). A measurement that meets an upper bound smaller
    than `digits` decimals show is printed as "below <bound>", not as its rounding noise."""
    bounds = {name: value for name, value in
              (("above", above), ("below", below), ("at_least", at_least), ("at_most", at_most)) if value is not None}
    if isinstance(measured, bool):
        if bounds:
            raise ValueError("claim: a bool measurement takes no bound; pass the number the bound is on")
        if not measured:
            raise AssertionError(f"claim failed: {statement}")
        print(f"claim: {statement} (holds)")
        return
    if not bounds:
        raise ValueError("claim: give a bound (above=, below=, at_least= or at_most=), or a bool that says whether it holds")
    value = float(measured)
    failed = [name for name, bound in bounds.items() if not (math.isfinite(value) and RELATIONS[name][0](value, bound))]
    if failed:
        needed = " and ".join(f"{RELATIONS[name][1]} {bound_text(bounds[name])}" for name in failed)
        raise AssertionError(f"claim failed: {statement} (measured {shown(value, digits)}, needs {needed})")
    tiny = [name for name in ("below", "at_most") if name in bounds and abs(bounds[name]) < 10 ** -digits]
    if tiny:  # the number itself would be rounding noise
        words = f"below {bound_text(bounds[tiny[0]])}" if tiny[0] == "below" else f"at most {bound_text(bounds[tiny[0]])}"
    else:
        words = shown(value, digits) + " " + " and ".join(f"{RELATIONS[name][1]} {bound_text(b)}" for name, b in bounds.items())
    print(f"claim: {statement} (measured {words})")
