"""Reward design under group normalization (minirl.exact.reward_design), against hand-computed
groups, a brute force over every ordered group written from the definitions, and exact math."""
import itertools
import math
import statistics

import pytest
import torch

from minirl.exact import micro
from minirl.exact import reward_design as rd
from minirl.exact.group_updates import FAMILY, moments
from minirl.exact.mdp import MicroMDP
from test_group_updates import brute_force


def policy(mdp, seed, scale=1.0):
    return scale * torch.randn(mdp.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def plain_normalize(values):
    m, s = statistics.mean(values), statistics.stdev(values)
    return [(v - m) / (s + 1e-4) for v in values]


def test_the_two_signals_on_completions_written_out():
    assert rd.correct("x", ("b", micro.EOS)) == 1 and rd.formatted("x", ("b", micro.EOS)) == 1
    assert rd.correct("x", ("a", "b", micro.EOS)) == 1 and rd.formatted("x", ("a", "b", micro.EOS)) == 0
    assert rd.correct("x", ("a", micro.EOS)) == 0 and rd.formatted("x", ("a", micro.EOS)) == 1
    assert rd.correct("x", ("b", "b", "b")) == 0 and rd.formatted("x", ("b", "b", "b")) == 0  # never closed
    # x's correct answers: "b<eos>" and the 9 - 4 two-token prefixes that hold a b, then EOS
    assert sum(rd.correct("x", c) for c in micro.completions()) == 6
    assert rd.with_bonus(0.5)("x", ("b", micro.EOS)) == 1.5


def test_the_combinations_on_a_group_computed_by_hand():
    """Correct [1, 1, 0, 0], formatted [0, 1, 1, 1]: each normalized then summed, the correct but
    unformatted answer falls below the wrong formatted ones; summed first, it ties with them."""
    correct, fmt = [1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]
    r = torch.tensor([correct, fmt], dtype=torch.float64).T
    w = torch.tensor([1.0, 1.0])
    each = [a + b for a, b in zip(plain_normalize(correct), plain_normalize(fmt))]
    assert rd.normalize_then_sum(r, w).tolist() == pytest.approx(each, abs=1e-12)
    assert rd.sum_then_normalize(r, w).tolist() == pytest.approx(plain_normalize([1.0, 2.0, 1.0, 1.0]), abs=1e-12)
    assert each[0] < each[2] == each[3] < 0 < each[1]


def brute_misranking(mdp, logits, group_size, combine, weights):
    """Every ordered group of (correct, formatted) outcomes, each outcome's probability summed over
    the completions plainly, each combination computed from the definitions with plain Python."""
    total = 0.0
    for p in mdp.prompts:
        outcome = {}
        for c, prob in zip(mdp.completions, mdp.completion_probs(logits, p).tolist()):
            key = (rd.correct(p, c), rd.formatted(p, c))
            outcome[key] = outcome.get(key, 0.0) + prob
        for group in itertools.product(outcome, repeat=group_size):
            right, fmt = [x for x, _ in group], [y for _, y in group]
            if combine == "sum then normalize":
                a = plain_normalize([weights[0] * x + weights[1] * y for x, y in group])
            else:
                a = [weights[0] * x + weights[1] * y for x, y in zip(plain_normalize(right), plain_normalize(fmt))]
            wrong_a = [ai for ai, x in zip(a, right) if x == 0]
            right_a = [ai for ai, x in zip(a, right) if x == 1]
            if wrong_a and right_a and max(wrong_a) > min(right_a) + 1e-9:
                total += math.prod(outcome[key] for key in group)
    return total / len(mdp.prompts)


@pytest.mark.parametrize("name", list(rd.COMBINATIONS))
@pytest.mark.parametrize("weights", [(1.0, 1.0), (1.0, 0.3)])
def test_misranking_probability_equals_a_brute_force_over_every_ordered_group(name, weights):
    mdp = MicroMDP()
    logits = policy(mdp, 3, scale=0.5)
    got = rd.misranking_probability(mdp, logits, 4, rd.COMBINATIONS[name], weights)
    assert got == pytest.approx(brute_misranking(mdp, logits, 4, name, weights), abs=1e-12)


def test_summing_first_never_ranks_a_wrong_answer_above_a_right_one_when_correctness_dominates():
    """With weight 1 on correctness and less than 1 on the 0/1 format, a right answer's sum always
    exceeds a wrong one's, and normalizing one scalar keeps the order."""
    mdp = MicroMDP()
    for seed in range(3):
        assert rd.misranking_probability(mdp, policy(mdp, seed), 4, rd.sum_then_normalize, (1.0, 0.5)) == 0.0


@pytest.mark.parametrize("name", ["GRPO", "Dr. GRPO"])
def test_moments_of_a_format_bonus_equal_the_brute_force(name):
    """The exact engine with another reward: horizon 2, groups of 2, every ordered batch."""
    mdp = MicroMDP(horizon=2)
    logits = policy(mdp, 5, scale=0.7)
    reward = rd.with_bonus(0.1)
    got = moments(mdp, logits, FAMILY[name], 2, reward=reward)
    mean, variance = brute_force(mdp, logits, logits, FAMILY[name], reward_of=reward)
    assert torch.allclose(got.mean, mean, atol=1e-12) and got.variance == pytest.approx(variance, rel=1e-9)


def test_group_std_is_blind_to_the_reward_scale_and_group_mean_is_not():
    mdp = MicroMDP()
    logits = policy(mdp, 1, scale=0.5)
    base, scaled = rd.with_bonus(0.1), lambda p, c: 10 * rd.with_bonus(0.1)(p, c)
    a, b = (moments(mdp, logits, FAMILY["GRPO"], 4, reward=r).mean for r in (base, scaled))
    assert float((a - b).norm() / b.norm()) < 0.01  # the same up to the std's eps (1e-4 beside stds of 0.05)
    a, b = (moments(mdp, logits, FAMILY["Dr. GRPO"], 4, reward=r).mean for r in (base, scaled))
    assert torch.allclose(10 * a, b, atol=1e-12)


# ------------------------------------------------------------------ a random reward
def plain_drift(mdp, logits, prompt, group_size, inner_steps, lr, clip_eps):
    """Every ordered group and every draw of the coins, one at a time: GRPO's clipped loss written
    from its definition on the group's completions, SGD on a copy of the logits."""
    probs = mdp.completion_probs(logits, prompt)
    old_log_pi = torch.log_softmax(logits, -1)
    step = torch.zeros_like(logits)
    for group in itertools.product(range(len(mdp.completions)), repeat=group_size):
        p_group = math.prod(float(probs[i]) for i in group)
        for coins in itertools.product((0.0, 1.0), repeat=group_size):
            a = plain_normalize(list(coins))
            theta = logits.clone()
            for _ in range(inner_steps):
                theta.requires_grad_(True)
                log_pi = torch.log_softmax(theta, -1)
                loss = 0.0
                for i, a_i in zip(group, a):
                    steps = mdp.steps(prompt, mdp.completions[i])
                    terms = []
                    for s, t in steps:
                        rho = torch.exp(log_pi[s, t] - old_log_pi[s, t])
                        clipped = rho if clip_eps is None else rho.clamp(1 - clip_eps, 1 + clip_eps)
                        terms.append(torch.minimum(rho * a_i, clipped * a_i))
                    loss = loss - sum(terms) / len(steps) / group_size
                grad, = torch.autograd.grad(loss, theta)
                theta = (theta - lr * grad).detach()
            step += p_group / 2 ** group_size * (theta - logits)
    return step


def test_random_reward_drift_equals_a_plain_loop_over_every_group():
    """Horizon 2, groups of 2, two inner steps large enough that the clip binds."""
    mdp = MicroMDP(horizon=2)
    logits = policy(mdp, 2)
    steps = {}
    for clip_eps in (None, 0.2):
        got = rd.random_reward_drift(mdp, logits, "y", 2, 2, 1.0, clip_eps)
        assert torch.allclose(got.step, plain_drift(mdp, logits, "y", 2, 2, 1.0, clip_eps), atol=1e-12)
        assert float(got.after.sum()) == pytest.approx(1.0, abs=1e-12)
        steps[clip_eps] = got.step
    assert float((steps[None] - steps[0.2]).abs().max()) > 1e-3


@pytest.mark.parametrize("group_size", [2, 3])
def test_one_on_policy_step_on_a_random_reward_has_no_drift(group_size):
    """E[A_i] = 0 and the coins are independent of the completions, so E[A_i f(tau_i)] = 0: one
    step moves the logits by zero in expectation, clip or not (the clip cannot bind at ratio 1)."""
    mdp = MicroMDP()
    d = rd.random_reward_drift(mdp, policy(mdp, 0), "x", group_size, 1, 1.0)
    assert float(d.step.abs().max()) < 1e-15 and d.mean_step_entropy_change == pytest.approx(0.0, abs=1e-15)


def test_bad_input_is_refused():
    mdp = MicroMDP()
    with pytest.raises(ValueError, match="one column per weight"):
        rd.sum_then_normalize(torch.zeros(4, 3), torch.ones(2))
    with pytest.raises(ValueError, match="at least two"):
        rd.normalize_then_sum(torch.zeros(1, 2), torch.ones(2))
    with pytest.raises(ValueError, match="unknown prompt"):
        rd.random_reward_drift(mdp, policy(mdp, 0), "z", 2, 1, 1.0)
    with pytest.raises(ValueError, match="weight must be"):
        rd.with_bonus(-1.0)
