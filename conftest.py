"""nbval's sanitize file for every `pytest --nbval` run in this tree, from whichever folder it starts
(a relative path in pyproject's addopts would be read from the folder pytest starts in: from lessons/
it would miss). A `--nbval-sanitize-with` given on the command line wins."""
from pathlib import Path

SANITIZE = Path(__file__).resolve().parent / "lessons" / "sanitize.cfg"


def pytest_configure(config):
    if hasattr(config.option, "nbval_sanitize_with") and not config.option.nbval_sanitize_with:
        config.option.nbval_sanitize_with = str(SANITIZE)
