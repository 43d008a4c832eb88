"""The check every bad-input test file runs on its cases: the call raises the stated error, with
a message matching the regex, from a line of minirl itself (not from torch, tiktoken or Python
deep inside a call)."""
from pathlib import Path

import pytest

import minirl

PACKAGE = Path(minirl.__file__).resolve().parent


def assert_refused_by_minirl(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        call()
    raised_in = Path(str(info.traceback[-1].path)).resolve()
    assert raised_in.is_relative_to(PACKAGE), f"raised outside minirl, in {raised_in}"
