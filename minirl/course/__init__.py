"""The course's tooling: exercise checkers, and the instructor's commands.

    check         exercise checkers: minirl.check.<name>(student_fn)
    training_loop  write the loop: minirl.check.reinforce_loop, a student's loop against minirl's, part by part
    verdicts      a checker's verdict: the line the student reads, and the signed record the grader trusts
    predictions   predict, then run: minirl.check.prediction's RIGHT / WRONG line and the markers
    size          a lesson's main path in words and code lines, against the budget of a sitting and of homework
    sweeps        a lesson's recorded sweeps, found beside the notebook or in the repository: load_sweep, sweep_rows

  Commands, imported by name only (they need the [instructor] extra: nbformat, nbclient, nbconvert):
    commands      open the course, hand it out, check it, grade it (python -m minirl.course)
    grading       grade submissions: a row for each, verdicts asked of the checkers, Gradescope's format
    site          the lessons and guides as a static site (python -m minirl.course.site)
    capstone      the capstone: a private test set, the evaluator and leaderboard, the baseline (python -m minirl.course capstone)
    written       an experiment's findings and a written problem: the answer cell's marker, done or not done
"""
from . import check, predictions, size, sweeps

__all__ = ["check", "predictions", "size", "sweeps"]
