"""A checker's verdict: the line a student reads, and the record `course grade` trusts.

Every checker ends with `emit(name, outcome, line)`: it prints `line` (PASS, FAIL, RIGHT or WRONG,
or TODO for an exercise or a prediction not done yet: not a failure, what is left to do; the line
the student reads) and, only while the grader is asking, also displays a record of
(name, outcome) signed with a key the grader made for that request. The grader runs a student's
notebook, and after each cell where the solved lesson calls a checker it runs that call itself,
taken from the solved lesson, through `graded` (course/grading.py). It believes only records that
carry its key, so a printed "PASS name: ..." line, or a notebook that edits the call, earns nothing.
The limit, said plainly: the key lives in this process while the grader's call runs, so student
code that reads minirl's internals during that call could sign a record; such code is in the
notebook for a person to see.
"""
from __future__ import annotations

import hashlib
import hmac

__all__ = ["NOT_DONE", "OUTCOMES", "MIME", "emit", "signature", "graded"]

NOT_DONE = "TODO {name}: not implemented yet (replace `raise NotImplementedError` with your code)"
OUTCOMES = ("pass", "fail", "not done", "package", "right", "wrong")  # 'package': minirl's own function submitted
MIME = "application/vnd.minirl.verdict+json"

_key: bytes | None = None  # set only while `graded` runs the grader's checker calls


def signature(key: bytes, name: str, outcome: str) -> str:
    """HMAC-SHA256 of (name, outcome) under the grader's key, as hex."""
    return hmac.new(key, f"{name}\n{outcome}".encode(), hashlib.sha256).hexdigest()


def emit(name: str, outcome: str, line: str) -> None:
    """Print the verdict's line; while the grader asks, also display its signed record."""
    if outcome not in OUTCOMES:
        raise ValueError(f"a verdict's outcome is one of {OUTCOMES}, not {outcome!r}")
    print(line, flush=True)
    if _key is not None:
        from IPython.display import display
        record = {"name": name, "outcome": outcome, "signature": signature(_key, name, outcome)}
        display({MIME: record, "text/plain": f"(graded: {name} {outcome})"}, raw=True)


def graded(key_hex: str, statements: list[str], scope: dict) -> None:
    """The grader's request: run each checker call (source from the solved lesson) in the student's
    namespace `scope` with the key set, so each verdict's record is signed; a call that raises (the
    student's function was deleted or renamed) prints what it raised and the next one runs."""
    global _key
    _key = bytes.fromhex(key_hex)
    try:
        for source in statements:
            try:
                exec(compile(source, "<the grader's call>", "exec"), scope)
            except Exception as e:  # noqa: BLE001 - a student's notebook must not stop the grading
                print(f"the grader's call raised {type(e).__name__}: {e}", flush=True)
    finally:
        _key = None
