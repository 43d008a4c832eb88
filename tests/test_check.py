"""The exercise checkers: PASS on a right answer, FAIL (never an exception) on a wrong one."""
import math

import torch

from minirl import check, ops
from minirl.evaluate import pass_at_k


def not_done(*args):
    raise NotImplementedError("exercise: write your solution here")


def verdict(capsys, checker, fn) -> str:
    checker(fn)
    return capsys.readouterr().out


def test_pass_at_k_checker(capsys):
    assert verdict(capsys, check.pass_at_k, pass_at_k).startswith("PASS pass_at_k: 8 cases")
    biased = verdict(capsys, check.pass_at_k, lambda n, c, k: 1 - (1 - c / n) ** k)
    assert biased.startswith("FAIL pass_at_k") and "largest difference" in biased
    assert "not implemented yet" in verdict(capsys, check.pass_at_k, not_done)


def test_masked_mean_checker(capsys):
    assert verdict(capsys, check.masked_mean, ops.masked_mean).startswith("PASS masked_mean")
    unmasked = lambda x, m, dim=None: (x * m).mean() if dim is None else (x * m).mean(dim)  # noqa: E731
    hides_empty_rows = lambda x, m, dim=None: torch.nan_to_num(ops.masked_mean(x, m, dim))  # noqa: E731
    assert verdict(capsys, check.masked_mean, unmasked).startswith("FAIL masked_mean")
    assert verdict(capsys, check.masked_mean, hides_empty_rows).startswith("FAIL masked_mean: 2 of 4")


def test_a_crashing_student_function_prints_fail(capsys):
    assert "raised ZeroDivisionError" in verdict(capsys, check.pass_at_k, lambda n, c, k: 1 / 0)


def test_max_difference_treats_matching_nans_as_equal():
    assert check.max_difference([1.0, math.nan], [1.0, math.nan]) == 0.0
    assert check.max_difference([1.0, 0.0], [1.0, math.nan]) == math.inf


def test_lesson_05_06_checkers(capsys):
    from minirl import advantages, kl, losses
    assert verdict(capsys, check.clipped_objective, losses.clipped_objective).startswith("PASS clipped_objective: 7 cases")
    clip_on_advantage = lambda r, a, eps: torch.minimum(r * a, r * a.clamp(1 - eps, 1 + eps))  # noqa: E731
    assert verdict(capsys, check.clipped_objective, clip_on_advantage).startswith("FAIL clipped_objective")
    assert verdict(capsys, check.group_advantages,
                   lambda r, g, eps: advantages.group_normalize(r, g, eps)).startswith("PASS group_advantages: 6 cases")
    population_std = lambda r, g, eps: ((r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True))  # noqa: E731
                                        / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + eps)).reshape(-1)
    assert verdict(capsys, check.group_advantages, population_std).startswith("FAIL group_advantages")
    assert verdict(capsys, check.kl_k3, kl.kl_k3).startswith("PASS kl_k3: 5 cases")
    assert verdict(capsys, check.kl_k3, lambda p, q: kl.kl_k3(q, p)).startswith("FAIL kl_k3")  # sign of log ratio flipped
