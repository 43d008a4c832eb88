"""pass@k against exact combinatorics, and the base model's measured usefulness."""
import itertools
import math
from fractions import Fraction

import pytest

from minirl.world.evaluate import pass_at_k


@pytest.mark.parametrize("n, c, k", [(16, 0, 1), (16, 4, 1), (16, 4, 8), (16, 10, 8), (16, 16, 16), (200, 3, 100), (5, 2, 3)])
def test_pass_at_k_equals_exact_combinatorics(n, c, k):
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)


def test_pass_at_k_is_the_fraction_of_k_subsets_with_a_correct_sample():
    samples = [1, 0, 0, 1, 0, 0, 0]  # brute force over every subset of size k
    for k in range(1, len(samples) + 1):
        subsets = list(itertools.combinations(samples, k))
        assert pass_at_k(len(samples), sum(samples), k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
