"""A lesson's size on its main path: what a student must read and run in one sitting.

A section whose Markdown heading ends with "(optional)" is off the main path, with everything
under it up to the next heading of its level or above; the main path never depends on it. The
budget is what a student reads and runs in a sitting of about an hour and a half: 4,500 words of
text and 350 lines of code (blank lines not counted), each line at most 88 characters wide.

A section whose heading ends with "(homework)" is off the sitting too, counted the same way apart:
the work a student does after it (an experiment, a written problem), within a budget of its own,
HOMEWORK_WORDS words and HOMEWORK_CODE_LINES code lines. The main path never depends on it either;
its cells, unlike an optional section's, must fit a screen.

A cell on the main path fits a screen: at most 30 code lines, and at most 10 printed lines (a
longer result is a table, `minirl.table`, or a figure). A slider cell (one that calls `interact`)
may be longer: it holds everything its figure needs, so a student can move the slider after
running only the lesson's first cell.
"""
from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["WORDS", "CODE_LINES", "WIDTH", "CELL_LINES", "PRINTED_LINES", "OPTIONAL", "HOMEWORK", "HOMEWORK_WORDS",
           "HOMEWORK_CODE_LINES", "Size", "lines", "main_path_size", "crowded_cells"]

WORDS, CODE_LINES, WIDTH = 4500, 350, 88
CELL_LINES, PRINTED_LINES = 30, 10
OPTIONAL, HOMEWORK = "(optional)", "(homework)"
HOMEWORK_WORDS, HOMEWORK_CODE_LINES = 1200, 80
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")


class Size(NamedTuple):
    words: int  # Markdown words on the main path
    code_lines: int  # non-blank code lines on the main path
    optional_words: int
    optional_code_lines: int
    homework_words: int = 0
    homework_code_lines: int = 0


def lines(nb: dict):
    """Every line of every cell, in order, as (cell index, cell type, line, off), reading the
    headings as they come: `off` is None on the main path, else OPTIONAL or HOMEWORK, the section
    the line lies in. `nb` is the notebook's JSON (or an nbformat node: the same keys)."""
    off_level, off = None, None  # the level and kind of the off-path heading we are under, if any
    for i, cell in enumerate(nb["cells"]):
        kind, source = cell["cell_type"], cell["source"]
        for line in (source if isinstance(source, str) else "".join(source)).splitlines():
            heading = HEADING.match(line) if kind == "markdown" else None
            if heading:
                level = len(heading.group(1))
                if off_level is not None and level <= off_level:
                    off_level, off = None, None
                title = heading.group(2).lower()
                if off_level is None and title.endswith((OPTIONAL, HOMEWORK)):
                    off_level, off = level, OPTIONAL if title.endswith(OPTIONAL) else HOMEWORK
            yield i, kind, line, off


def main_path_size(nb: dict) -> Size:
    """Count words and code lines on the main path, in optional sections and in homework."""
    counts = [0, 0, 0, 0, 0, 0]
    for _, kind, line, part in lines(nb):
        off = {None: 0, OPTIONAL: 2, HOMEWORK: 4}[part]
        if kind == "markdown":
            heading = HEADING.match(line)
            counts[off] += len((heading.group(2) if heading else line).split())  # a heading's words, not its #s
        elif kind == "code" and line.strip():
            counts[off + 1] += 1
    return Size(*counts)


def crowded_cells(nb: dict) -> list[tuple[int, str]]:
    """The code cells of the main path and homework that do not fit a screen, as (cell index, why): more than CELL_LINES
    code lines (a slider cell excepted), or more than PRINTED_LINES lines of printed text."""
    optional = {i for i, _, _, off in lines(nb) if off == OPTIONAL}
    crowded = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or i in optional:
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        code = sum(1 for line in source.splitlines() if line.strip())
        printed = sum((o["text"] if isinstance(o["text"], str) else "".join(o["text"])).count("\n")
                      for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        if code > CELL_LINES and "interact(" not in source:
            crowded.append((i, f"{code} code lines"))
        if printed > PRINTED_LINES:
            crowded.append((i, f"{printed} printed lines"))
    return crowded
