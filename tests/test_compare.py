"""minirl.core.compare against answers computed another way: permutation p-values against closed
forms and a plain enumeration of every sign pattern or split, the probability of improvement against
a double loop and scipy's Mann-Whitney U, intervals against a plain bootstrap, Holm's adjustment and
the interquartile mean by hand; KL-matched reads of piecewise-linear trajectories (exact
interpolation), late windows, and rate choices on a grid. Three tests plant the mistakes the module
exists to prevent: pairing ignored, a verdict from 1 v 1, rounding before comparing."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from minirl.core import compare


def plain_sign_flip_p(d):
    """Two-sided sign-flip p by enumerating every sign pattern (a second implementation, in loops)."""
    observed = abs(sum(d) / len(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d)) / len(d)) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def plain_improvement(a, b):
    return sum((x > y) + 0.5 * (x == y) for x in a for y in b) / (len(a) * len(b))


def plain_split_p(a, b):
    """Two-sided permutation p on P(a > b), every split of the pooled runs enumerated. The statistic's
    null distribution is symmetric about 1/2, so two-sided means at least as far from 1/2."""
    pooled, n = list(a) + list(b), len(a)
    observed = abs(plain_improvement(a, b) - 0.5)
    splits = list(itertools.combinations(range(len(pooled)), n))
    hits = 0
    for idx in splits:
        x = [pooled[i] for i in idx]
        y = [pooled[i] for i in range(len(pooled)) if i not in idx]
        hits += abs(plain_improvement(x, y) - 0.5) >= observed - 1e-12
    return hits / len(splits)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 8])
def test_a_paired_p_value_of_n_same_sign_differences_is_two_over_two_to_the_n(n):
    d = [0.1 * (i + 1) for i in range(n)]
    c = compare.paired(d, [0.0] * n)
    assert c.exact and c.p == pytest.approx(2 / 2 ** n) and c.smallest_p == pytest.approx(2 / 2 ** n)
    assert (c.leader == "A") == (2 / 2 ** n <= 0.05)   # 5 pairs cannot reach 0.05 (0.0625); 6 can (0.031)


def test_paired_p_and_interval_against_a_plain_enumeration_and_bootstrap():
    rng = np.random.default_rng(7)
    for _ in range(5):
        a, b = rng.normal(0.3, 1, 7), rng.normal(0, 1, 7)
        c = compare.paired(a, b)
        assert c.p == pytest.approx(plain_sign_flip_p(list(a - b)))
        assert c.effect == pytest.approx(float(np.mean(a - b)))
        # a plain percentile bootstrap of the mean difference, its own generator: the same interval
        # within a tenth of its width (both estimate the same quantiles from 10,000 resamples)
        d = a - b
        means = rng.choice(d, size=(20_000, len(d))).mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        assert c.interval == pytest.approx((lo, hi), abs=0.1 * (hi - lo))


def test_unpaired_effect_and_p_against_a_double_loop_mann_whitney_and_every_split():
    a, b = [0.3, 0.5, 0.5, 0.9, 0.2], [0.1, 0.5, 0.0, 0.4]
    c = compare.unpaired(a, b)
    assert c.effect == pytest.approx(plain_improvement(a, b))
    u = stats.mannwhitneyu(a, b).statistic            # U counts ties one half, as P(a > b) does
    assert c.effect == pytest.approx(u / (len(a) * len(b)))
    assert c.exact and c.p == pytest.approx(plain_split_p(a, b))
    assert c.difference == pytest.approx(np.mean(a) - np.mean(b))
    assert c.smallest_p == pytest.approx(2 / math.comb(9, 5))
    # 5 v 5 with every run of one arm ahead: the most extreme of C(10, 5) = 252 splits, either way
    sep = compare.unpaired([1.0, 1.1, 1.2, 1.3, 1.4], [0.0, 0.1, 0.2, 0.3, 0.4], ("new", "old"))
    assert sep.p == pytest.approx(2 / 252) and sep.effect == 1.0 and sep.leader == "new"
    assert "P(new > old) = 1.00" in str(sep) and "difference of means +1.00" in str(sep) and "-> new ahead" in str(sep)


def test_lower_is_better_and_a_diverged_run_in_each_kind_of_comparison():
    low = compare.unpaired([0.1, 0.2, 0.3, 0.4, 0.5], [0.6, 0.7, 0.8, 0.9, 1.0], ("gail", "bc"), higher_is_better=False)
    assert low.leader == "gail" and low.effect == 1.0 and "P(gail < bc)" in str(low)
    paired_low = compare.paired([0.1] * 6, [0.2, 0.3, 0.4, 0.5, 0.6, 0.7], ("gail", "bc"), higher_is_better=False)
    assert paired_low.leader == "gail"
    diverged = compare.unpaired([1.0, float("nan"), 2.0], [0.5, 0.6, 0.7])
    assert diverged.effect == pytest.approx(6 / 9) and math.isnan(diverged.difference)
    assert "diverged" in str(diverged) and "undefined (a diverged run)" in str(diverged)
    with pytest.raises(ValueError, match="a diverged run has no difference; compare the arms with unpaired"):
        compare.paired([1.0, float("nan")], [0.5, 0.6])
    with pytest.raises(ValueError, match="one value per seed in each arm, got 2 and 3"):
        compare.paired([1.0, 2.0], [0.5, 0.6, 0.7])
    with pytest.raises(ValueError, match="a is empty"):
        compare.unpaired([], [1.0])


def test_planted_pairing_ignored():
    """Seeds that differ far more from each other than the arms do: paired, six same-sign differences
    (p = 2/64) give a verdict; compared as independent runs they overlap (P(a > b) near 1/2). An
    implementation that ignores the pairing finds nothing."""
    b = [0.1, 0.9, 0.4, 1.6, 0.2, 1.2]
    a = [x + 0.02 for x in b]
    assert compare.paired(a, b, ("a", "b")).leader == "a"
    assert compare.paired(a, b).p == pytest.approx(2 / 64)
    assert compare.unpaired(a, b).leader is None and 0.5 < compare.unpaired(a, b).effect < 0.65


def test_planted_a_verdict_from_one_v_one():
    """One run each gives no verdict, however far apart; nor does 2 v 2 fully separated (chance 1/3)."""
    for c in (compare.unpaired([1.0], [0.0]), compare.paired([1.0], [0.0])):
        assert c.leader is None and c.p == 1.0 and "the smallest possible p is 1.000" in str(c)
    two = compare.unpaired([1.0, 1.1], [0.0, 0.1])
    assert two.leader is None and two.p == pytest.approx(2 / 6) and "2 v 2 runs cannot reach p <= 0.05" in str(two)


def test_planted_rounding_before_comparing():
    """Every run of a ahead of every run of b at the third decimal: at two decimals all ten read 0.67.
    Compared as recorded, 5 v 5 separate (p = 2/252); the line prints enough decimals to show it."""
    a, b = [0.6712, 0.6721, 0.6733, 0.6744, 0.6708], [0.6701, 0.6689, 0.6695, 0.6702, 0.6692]
    c = compare.unpaired(a, b, ("a", "b"))
    assert c.leader == "a" and c.p == pytest.approx(2 / 252)
    assert "0.6712" in str(c) and "0.6701" in str(c)


def test_a_family_of_comparisons_is_holm_adjusted_and_says_how_many():
    assert compare.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert compare.holm([0.5]) == [0.5] and compare.holm([0.4, 0.6]) == pytest.approx([0.8, 0.8])
    six = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    alone = compare.paired(six, [0.0] * 6)
    assert alone.leader == "A"                              # p = 2/64 = 0.031
    both = compare.family([alone, compare.paired(six, [0.0] * 6, ("C", "D"))])
    assert [c.p for c in both] == pytest.approx([4 / 64, 4 / 64]) and all(c.leader is None for c in both)
    assert "Holm-adjusted over 2 comparisons" in str(both[0])
    assert "6 pairs cannot reach p <= 0.05 (the smallest possible p is 0.062)" in str(both[0])
    raw = compare.family([alone, alone], adjust=False)
    assert [c.leader for c in raw] == ["A", "A"] and "one of 2 comparisons here, unadjusted" in str(raw[0])


def test_iqm_is_the_mean_of_the_middle_half():
    runs = [0.9, 0.1, 0.5, 0.6, 0.7, -1.0, 0.8, 0.4]      # sorted: -1, .1, .4, .5, .6, .7, .8, .9
    est = compare.iqm(runs)
    assert est.value == pytest.approx((0.4 + 0.5 + 0.6 + 0.7) / 4)
    assert est.interval[0] <= est.value <= est.interval[1]
    assert compare.iqm([0.3] * 5).interval == pytest.approx((0.3, 0.3))
    with pytest.raises(ValueError, match="finite"):
        compare.iqm([1.0, float("nan")])


def test_at_kl_reads_each_run_on_its_own_trajectory():
    # gold = 1 + 0.5 kl along the first run, evaluated at uneven KLs: exact at every level
    kl = [0.0, 0.3, 1.7, 2.0, 4.5]
    gold = [1 + 0.5 * k for k in kl]
    assert compare.at_kl(kl, gold, [0.0, 1.0, 2.0, 3.0]) == pytest.approx([1.0, 1.5, 2.0, 2.5])
    # a run that overshoots and comes back is read where it first reaches the level, not where it settles
    kl2, gold2 = [0.0, 2.0, 6.0, 3.0, 3.0], [0.0, 1.0, -1.0, 0.5, 0.5]
    assert compare.at_kl(kl2, gold2, [1.0, 3.0, 7.0])[:2] == pytest.approx([0.5, 0.5])
    assert math.isnan(compare.at_kl(kl2, gold2, [7.0])[0])


def test_matched_kl_is_not_a_pooled_bin():
    # two runs with the same frontier gold = kl; one evaluated densely at low KL, one at high KL.
    # A bin [0, 4) pooling both would compare means of different KLs; read at KL 2 they are level.
    dense, sparse = [0.0, 0.5, 1.0, 1.5, 3.9], [0.0, 3.0, 3.5, 3.9]
    a = compare.at_kl(dense, dense, [2.0])[0]
    b = compare.at_kl(sparse, sparse, [2.0])[0]
    assert a == pytest.approx(2.0) and b == pytest.approx(2.0)


def test_a_window_judges_an_oscillating_run_over_its_late_steps():
    steps = list(range(0, 45, 5))
    valid = [1.0, 0.9, 0.2, 0.95, 0.1, 0.9, 0.3, 0.97, 0.99]  # ends on a good snapshot
    w = compare.window(steps, valid, start=20)
    assert w.steps == (20, 25, 30, 35, 40)
    assert w.median == pytest.approx(0.9) and w.worst == pytest.approx(0.1)
    assert w.share_at_least(0.9) == pytest.approx(3 / 5)
    assert compare.window([0, 1, 2, 3], [4.0, 1.0, 3.0, 2.0], start=0).median == pytest.approx(2.5)
    assert math.isnan(compare.window([0, 1, 2], [-0.2, float("nan"), -0.1], start=0).median)  # diverged: never a middle value
    with pytest.raises(ValueError, match="no evaluation between steps 50 and 40"):
        compare.window(steps, valid, start=50)


def test_choose_rate_flags_a_choice_at_the_grid_edge():
    interior = compare.choose_rate({1e-4: {100: 1.0, 101: 1.2}, 3e-4: {100: 1.5, 101: 1.7},
                                    1e-3: {100: 0.2, 101: float("nan")}})
    assert interior.rate == 3e-4 and not interior.at_edge
    assert interior.means[1e-4] == pytest.approx(1.1)
    versus = interior.against_runner_up            # the two tuning seeds are shared: paired, and 2 pairs decide nothing
    assert versus.is_paired and versus.effect == pytest.approx(0.5) and versus.leader is None
    edge = compare.choose_rate({1e-5: {1: 0.3, 2: 0.2}, 3e-5: {1: 0.2, 2: 0.1}, 1e-4: {1: 0.0, 2: 0.1}},
                               higher_is_better=True)
    assert edge.rate == 1e-5 and edge.at_edge and "extend it" in str(edge)
    lowest = compare.choose_rate({1e-4: {1: 0.3}, 3e-4: {1: 0.1}, 1e-3: {1: 0.2}}, higher_is_better=False)
    assert lowest.rate == 3e-4 and not lowest.at_edge


def test_choose_rate_refuses_reported_seeds_and_short_grids():
    with pytest.raises(ValueError, match=r"tuning seeds \[0\] are also reported seeds"):
        compare.choose_rate({1e-4: {0: 1.0}, 3e-4: {0: 1.0}, 1e-3: {0: 1.0}}, reported_seeds=(0, 1, 2))
    with pytest.raises(ValueError, match="at least three rates"):
        compare.choose_rate({1e-4: {100: 1.0}, 3e-4: {100: 1.0}})



def test_sweep_rate_stops_a_sweep_whose_choice_is_at_the_edge():
    rows = [{"lr": lr, "seed": seed, "gold": g} for lr, g in ((1e-4, 1.0), (3e-4, 2.0), (1e-3, 1.5)) for seed in (100, 101)]
    assert compare.sweep_rate(rows, (1e-4, 3e-4, 1e-3), "gold", reported_seeds=(0, 1, 2)) == 3e-4
    with pytest.raises(ValueError, match="extend it"):  # judged by lowest gold, the best rate is the grid's bottom
        compare.sweep_rate(rows, (1e-4, 3e-4, 1e-3), "gold", reported_seeds=(0, 1, 2), higher_is_better=False)


def test_a_comparisons_row_shows_the_numbers_its_printed_line_shows(capsys):
    """`row` (and so `compare.table`) formats each number as `str` does: every field of the row,
    verdict included, is read back from the printed line."""
    a, b = [0.745, 0.740, 0.750, 0.734, 0.754, 0.738], [0.693, 0.656, 0.693, 0.680, 0.692, 0.693]
    close = [x + d for x, d in zip(a, (0.01, -0.01, 0.02, -0.02, 0.0, 0.005))]
    for c in compare.family([compare.paired(a, b, ("on", "stale")), compare.paired(close, a, ("close", "on")),
                             compare.unpaired(a, b, ("on", "stale"))], adjust=False):
        name, seeds, effect, interval, p, verdict = c.row()
        line = str(c)
        assert seeds.replace(" | ", " | stale: ") in line and effect in line and f"p = {p}" in line
        assert f"{effect} [95% CI {interval}]" in line and line.endswith(verdict.split(" (")[0])
    compare.table(compare.family([compare.paired(a, b, ("on", "stale"))] * 2, adjust=False), title="pass@1")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "pass@1; p unadjusted, each one of 2 comparisons" and out[1].split() == [
        "comparison", "by", "seed", "effect", "95%", "CI", "p", "verdict"]
    assert len(out) == 5 and out[3].split()[:5] == ["on", "-", "stale", "+0.052", "+0.084"]
    assert out[3].endswith("+0.059  +0.051, +0.070  0.031  on ahead")
    compare.table([compare.paired(a, b, ("on", "stale"))], labels=["pass@1 at step 60"])
    assert capsys.readouterr().out.splitlines()[2].startswith("pass@1 at step 60  on - stale  +0.052")
    with pytest.raises(ValueError, match="2 labels for 1 comparisons"):
        compare.table([compare.paired(a, b)], labels=["x", "y"])
