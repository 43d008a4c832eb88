"""Work a person reads: an experiment's findings and a written problem's derivation.

The question is asked in the Markdown above; the answer is a Markdown cell of its own that the
student writes in, marked for the grader by a comment on its first line: the kind, a name unique
in the course, and the points a person gives it.

    <!-- experiment: group_size_sweep, 3 points -->
    <!-- BEGIN SOLUTION -->
    **The course's answer.** ... (what a good answer says, from the course's own run)

    *Rubric.* One point each: ...
    <!-- END SOLUTION -->

The solved lesson holds a worked answer and its rubric between the solution markers (nbgrader's);
the student version replaces them with STUB (`commands.student_version`), and nbgrader sees a
manually graded answer of that many points (`commands.nbgrader_metadata`). `course grade` reads
such a cell as 'done' once the stub is gone and at least MIN_WORDS words stand in its place, and
'not done' otherwise: whether the answer is right is for the person with the rubric. The rubric
stays with the solved lesson (and nbgrader's source version), out of the students' copies.
"""
from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["KINDS", "STUB", "MIN_WORDS", "MARKER", "Written", "written_task", "is_done"]

KINDS = ("experiment", "written")
STUB = "*Your answer here: replace this line with your own.*"
MIN_WORDS = 10  # fewer is not an answer a person can grade (an experiment asks for two or three sentences)
MARKER = re.compile(r"^\s*<!--\s*(experiment|written):\s*(\w+),\s*(\d+)\s+points?\s*-->", re.M)
BLOCK = re.compile(r"<!-- BEGIN SOLUTION -->.*?<!-- END SOLUTION -->", re.S)


class Written(NamedTuple):
    kind: str  # 'experiment' or 'written'
    name: str
    points: int


def written_task(source: str) -> Written | None:
    """The task a Markdown cell's marker names, or None for any other cell."""
    m = MARKER.match(source)
    return Written(m.group(1), m.group(2), int(m.group(3))) if m else None


def is_done(source: str) -> bool:
    """Has the student answered? The stub gone and at least MIN_WORDS words besides the marker
    (the solved lesson's worked answer counts as done)."""
    words = re.sub(r"<!--.*?-->", " ", source, flags=re.S).split()
    return STUB not in source and len(words) >= MIN_WORDS
