"""Reference checks for three cases no other test reached, each against a plain second computation:

- GRPO's loss on a stale batch with beta > 0 and importance weights other than 1: the weights multiply
  each token's policy term and not its KL term (a by-hand loop over rows and tokens);
- `choose_rate` flags a best rate at either end of its grid, in both directions of "better" (hand-computed
  means);
- a diverged (NaN) tuning run counts as the worst score whether higher or lower is better, so it is never
  chosen (hand-computed means with the NaN run at the worst).
"""
import math

import pytest
import torch

from minirl.core import compare, losses


def grpo_loss_by_hand(logprobs, old, ref, advantages, mask, weights, eps, beta, weight_kl=False) -> float:
    """Each completion's mean over its real tokens of -w_t min(r_t A, clip(r_t) A) + beta k3_t, then the mean
    over completions; r_t = exp(logp_t - old_t), k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1.
    weight_kl: the slip of weighting the KL term too, w_t beta k3_t."""
    rows = []
    for i in range(logprobs.size(0)):
        terms = []
        for t in range(logprobs.size(1)):
            if mask[i, t] == 0:
                continue
            lp, o, rf, w, a = (float(x) for x in (logprobs[i, t], old[i, t], ref[i, t], weights[i, t], advantages[i]))
            ratio = math.exp(lp - o)
            surrogate = min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a)
            k3 = math.exp(rf - lp) - (rf - lp) - 1
            terms.append(-w * surrogate + (w if weight_kl else 1.0) * beta * k3)
        rows.append(sum(terms) / len(terms))
    return sum(rows) / len(rows)


def test_grpo_loss_weights_the_policy_term_of_a_stale_batch_and_not_its_kl():
    g = torch.Generator().manual_seed(0)
    B, T = 6, 5
    logprobs = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2 - 0.1
    old = logprobs + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)  # stale: ratios away from 1, some clipped
    ref = logprobs + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    advantages = torch.randn(B, generator=g, dtype=torch.float64)
    weights = torch.rand(B, T, generator=g, dtype=torch.float64) * 1.5 + 0.1  # truncated importance weights, not 1
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 3:], mask[4, 1:] = 0, 0
    ours, diagnostics = losses.grpo_loss(logprobs, old, ref, advantages, mask, clip_eps=0.2, beta=0.04, is_weights=weights)
    assert 0 < diagnostics["clip_fraction"] < 1
    expected = grpo_loss_by_hand(logprobs, old, ref, advantages, mask, weights, eps=0.2, beta=0.04)
    assert ours.item() == pytest.approx(expected, abs=1e-12)
    kl_weighted = grpo_loss_by_hand(logprobs, old, ref, advantages, mask, weights, 0.2, 0.04, weight_kl=True)
    assert abs(expected - kl_weighted) > 1e-4  # the case tells the slip apart


GRID = (1e-4, 3e-4, 1e-3, 3e-3)


def scores_with_means(means: dict[float, float]) -> dict[float, dict[int, float]]:
    """Two tuning seeds per rate, 0.1 either side of the rate's mean."""
    return {lr: {1: m - 0.1, 2: m + 0.1} for lr, m in means.items()}


@pytest.mark.parametrize("higher_is_better", [True, False])
@pytest.mark.parametrize("best_at, at_edge", [(0, True), (1, False), (2, False), (3, True)])
def test_choose_rate_flags_a_best_rate_at_either_end_of_the_grid(best_at, at_edge, higher_is_better):
    good = 1.0 if higher_is_better else -1.0  # the best rate's mean; the others 0.5 or -0.5 worse
    means = {lr: (good if i == best_at else good - 0.5 * (1 if higher_is_better else -1)) for i, lr in enumerate(GRID)}
    choice = compare.choose_rate(scores_with_means(means), reported_seeds=(5, 6), higher_is_better=higher_is_better)
    assert choice.rate == GRID[best_at] and choice.at_edge is at_edge
    assert choice.means == pytest.approx(means)
    assert ("AT THE GRID'S EDGE" in str(choice)) is at_edge
    if at_edge:
        rows = [{"lr": lr, "seed": s, "score": v} for lr, per_seed in scores_with_means(means).items() for s, v in per_seed.items()]
        with pytest.raises(ValueError, match="extend it"):
            compare.sweep_rate(rows, GRID, "score", (5, 6), higher_is_better)


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_a_diverged_run_is_the_worst_score_in_either_direction(higher_is_better):
    """The rate with the best finite scores diverged on one seed: its mean is the worst possible, and the
    runner-up (the middle of the grid) is chosen; by hand, -inf (higher is better) or +inf (lower)."""
    sign = 1.0 if higher_is_better else -1.0
    scores = {1e-4: {1: sign * 0.2, 2: sign * 0.3}, 3e-4: {1: sign * 0.6, 2: sign * 0.7},
              1e-3: {1: sign * 0.9, 2: math.nan}, 3e-3: {1: sign * 0.1, 2: sign * 0.2}}
    choice = compare.choose_rate(scores, higher_is_better=higher_is_better)
    assert choice.rate == 3e-4 and not choice.at_edge
    assert choice.means[1e-3] == -sign * math.inf
    assert choice.means[3e-4] == pytest.approx(sign * 0.65)
