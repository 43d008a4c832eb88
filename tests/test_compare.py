"""minirl.core.compare against hand-computed answers: separation verdicts and their chance (exact
combinatorics), KL-matched reads of piecewise-linear trajectories (exact interpolation), late
windows, and rate choices on a grid."""
import math

import pytest

from minirl.core import compare


def test_a_verdict_needs_every_seed_separated():
    ahead = compare.compare_seeds([1.2, 1.3, 1.4], [0.9, 1.0, 1.1], ("ppo", "dpo"))
    assert ahead.leader == "ppo"
    assert ahead.chance == pytest.approx(2 / 20)  # 2 / C(6, 3): either method's three seeds on top
    assert "ppo ahead" in str(ahead) and "+1.20 +1.30 +1.40" in str(ahead)
    overlap = compare.compare_seeds([1.2, 1.3, 1.4], [0.9, 1.0, 1.25], ("ppo", "dpo"))
    assert overlap.leader is None
    assert "no difference that 3 and 3 seeds can detect (ppo +1.20 to +1.40, dpo +0.90 to +1.25)" in str(overlap)
    # a mean gap of 0.22 with one overlapping seed is not a verdict, however large the means' gap
    assert compare.compare_seeds([5.0, 5.0, 0.0], [0.1, 0.1, 0.1]).leader is None


def test_lower_is_better_and_a_diverged_run_counts_as_worst():
    assert compare.compare_seeds([0.1, 0.2], [0.3, 0.4], ("gail", "bc"), higher_is_better=False).leader == "gail"
    v = compare.compare_seeds([1.0, float("nan")], [0.5, 0.6])
    assert v.leader is None and "diverged" in str(v)
    assert compare.compare_seeds([0.1], [float("nan")]).leader == "A"
    assert compare.compare_seeds([1.0, 2.0], [0.0, 0.5]).chance == pytest.approx(2 / 6)


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
    with pytest.raises(ValueError, match="no evaluation between steps 50 and 40"):
        compare.window(steps, valid, start=50)


def test_choose_rate_flags_a_choice_at_the_grid_edge():
    interior = compare.choose_rate({1e-4: {100: 1.0, 101: 1.2}, 3e-4: {100: 1.5, 101: 1.7},
                                    1e-3: {100: 0.2, 101: float("nan")}})
    assert interior.rate == 3e-4 and not interior.at_edge
    assert interior.means[1e-4] == pytest.approx(1.1) and interior.against_runner_up.leader == "0.0003"
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
