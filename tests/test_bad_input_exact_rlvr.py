"""Bad input to the exact RLVR modules (group_updates, entropy, reward_design, distillation, micro_env):
each gets an error from minirl itself, of a stated type, whose message names what was wrong. And legal
degenerate input (a -inf logit for an action never taken, an integer reward, a combination named by its
key) keeps working, with the same numbers as before where it worked before.

Each case is (id, call, exception type, a regex the message must match), as in tests/test_bad_input.py.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

from bad_input import assert_refused_by_minirl

from minirl.exact import distillation, entropy, micro, reward_design
from minirl.exact.group_updates import FAMILY, Moments, completion_scores, moments
from minirl.exact.imitation import greedy_expert
from minirl.exact.mdp import MicroMDP
from minirl.exact.micro_env import VOCAB, MicroEnvMDP


@functools.cache
def mdp():
    return MicroMDP()


@functools.cache
def env():
    return MicroEnvMDP()


def zeros():
    return torch.zeros(mdp().shape, dtype=torch.float64)


def with_entry(x: torch.Tensor, index: tuple, value: float) -> torch.Tensor:
    x = x.clone()
    x[index] = value
    return x


def theta():
    return torch.zeros(env().shape, dtype=torch.float64)


GROUP = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)  # (G, K): correct, formatted
W = torch.tensor([1.0, 1.0], dtype=torch.float64)
GRPO = FAMILY["GRPO"]

CASES = [
    # ------------------------------------------------------------ group_updates
    ("moments: a recipe's name for the estimator", lambda: moments(mdp(), zeros(), "GRPO", 2), TypeError,
     r"estimator must be an Estimator.*FAMILY\['GRPO'\]"),
    ("moments: a NaN logit", lambda: moments(mdp(), with_entry(zeros(), (0, 0), math.nan), GRPO, 2), ValueError,
     "logits must be finite"),
    ("moments: a -inf logit", lambda: moments(mdp(), with_entry(zeros(), (3, 1), -math.inf), GRPO, 2), ValueError,
     "logits must be finite.*-30"),
    ("moments: a NaN in the behaviour policy", lambda: moments(mdp(), zeros(), GRPO, 2,
                                                               behaviour=with_entry(zeros(), (1, 2), math.nan)),
     ValueError, "behaviour must be finite"),
    ("moments: a reward returning None", lambda: moments(mdp(), zeros(), GRPO, 2, reward=lambda p, c: None), TypeError,
     "reward must return a number.*NoneType"),
    ("moments: a reward returning NaN", lambda: moments(mdp(), zeros(), GRPO, 2, reward=lambda p, c: math.nan),
     ValueError, "reward must return a finite number"),
    ("moments: a reward table for the reward function", lambda: moments(mdp(), zeros(), GRPO, 2,
                                                                        reward=torch.zeros(3)), TypeError,
     "reward must be a function"),
    ("moments: no mdp", lambda: moments(None, zeros(), GRPO, 2), TypeError, "mdp must be a MicroMDP"),
    ("moments: group of one", lambda: moments(mdp(), zeros(), GRPO, 1), ValueError, "group_size must be >= 2"),
    ("completion_scores: an unknown prompt", lambda: completion_scores(mdp(), zeros(), zeros(), "z", GRPO), ValueError,
     "unknown prompt 'z'"),
    ("Moments.against: a gradient of the wrong shape", lambda: Moments(zeros(), 1.0).against(torch.ones(4, dtype=torch.float64)),
     ValueError, "exact must have the expected update's shape"),
    ("Moments.against: a NaN gradient", lambda: Moments(zeros() + 1, 1.0).against(with_entry(zeros(), (0, 0), math.nan)),
     ValueError, "exact must be finite"),
    # ------------------------------------------------------------ entropy
    ("state_entropy: a row of -inf", lambda: entropy.state_entropy(torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])),
     ValueError, "-inf for every action in 1 rows"),
    ("state_entropy: a NaN logit", lambda: entropy.state_entropy(torch.tensor([[0.0, math.nan]])), ValueError,
     r"NaN or \+inf"),
    ("state_entropy: a list", lambda: entropy.state_entropy([[0.0, 1.0]]), TypeError, "logits must be a torch.Tensor"),
    ("first_order_entropy_change: logits as a list", lambda: entropy.first_order_entropy_change(
        [[0.0, 1.0]], torch.zeros(1, 2)), TypeError, "logits must be a torch.Tensor"),
    ("first_order_entropy_change: a NaN step", lambda: entropy.first_order_entropy_change(
        torch.zeros(1, 2), torch.tensor([[0.0, math.nan]])), ValueError, "delta must be finite"),
    ("entropy_covariance: a NaN logit", lambda: entropy.entropy_covariance(mdp(), with_entry(zeros(), (2, 2), math.nan)),
     ValueError, "logits holds NaN"),
    ("policy_gradient_entropy_change: a -inf logit", lambda: entropy.policy_gradient_entropy_change(
        mdp(), with_entry(zeros(), (0, 0), -math.inf), 0.5), ValueError, "logits must be finite"),
    ("clipped_policy_iteration: a negative clip", lambda: entropy.clipped_policy_iteration(mdp(), zeros(), -0.2),
     ValueError, "clip_eps must be"),
    ("completion_entropy: no mdp", lambda: entropy.completion_entropy(zeros(), zeros()), TypeError,
     "mdp must be a MicroMDP"),
    # ------------------------------------------------------------ reward_design
    ("sum_then_normalize: weights as a list", lambda: reward_design.sum_then_normalize(GROUP, [1.0, 1.0]), TypeError,
     r"weights must be a torch.Tensor.*torch.tensor\(\[1.0, 1.0\]"),
    ("normalize_then_sum: a NaN reward", lambda: reward_design.normalize_then_sum(with_entry(GROUP, (0, 0), math.nan), W),
     ValueError, "rewards must be finite"),
    ("sum_then_normalize: integer rewards", lambda: reward_design.sum_then_normalize(GROUP.long(), W), TypeError,
     "rewards must be a floating-point"),
    ("normalize_then_sum: weights 2-D", lambda: reward_design.normalize_then_sum(GROUP, W[None]), ValueError,
     "weights must be 1-D"),
    ("misranking_probability: a key it does not know", lambda: reward_design.misranking_probability(
        mdp(), zeros(), 2, "sum first"), ValueError, "unknown combine 'sum first'.*'sum then normalize'"),
    ("misranking_probability: combine not a function", lambda: reward_design.misranking_probability(
        mdp(), zeros(), 2, 3), TypeError, "combine must be a function"),
    ("misranking_probability: three weights", lambda: reward_design.misranking_probability(
        mdp(), zeros(), 2, reward_design.sum_then_normalize, (1.0, 1.0, 1.0)), ValueError, "weights must be a pair"),
    ("random_reward_drift: a negative clip", lambda: reward_design.random_reward_drift(
        mdp(), zeros(), "x", 2, 1, 1.0, clip_eps=-0.1), ValueError, "clip_eps must be"),
    ("random_reward_drift: a NaN logit", lambda: reward_design.random_reward_drift(
        mdp(), with_entry(zeros(), (0, 0), math.nan), "x", 2, 1, 1.0), ValueError, "logits must be finite"),
    ("formatted: a string for the completion", lambda: reward_design.formatted("x", "a<eos>"), TypeError,
     "completion must be a non-empty tuple"),
    # ------------------------------------------------------------ distillation
    ("expected_update: a NaN in the student", lambda: distillation.expected_update(
        mdp(), with_entry(zeros(), (0, 1), math.nan), zeros(), "on_policy"), ValueError, "student must be finite"),
    ("expected_update: a NaN in the teacher, SFT", lambda: distillation.expected_update(
        mdp(), zeros(), with_entry(zeros(), (0, 1), math.nan), "sft"), ValueError, "teacher holds NaN"),
    ("expected_update: an unknown estimator", lambda: distillation.expected_update(mdp(), zeros(), zeros(), "kl"),
     ValueError, "unknown estimator 'kl'"),
    ("single_sample_moments: an Estimator for the name", lambda: distillation.single_sample_moments(
        mdp(), zeros(), zeros(), GRPO), TypeError, "estimator must be a name"),
    ("token_log_ratios: a teacher that never takes an action", lambda: distillation.token_log_ratios(
        mdp(), zeros(), with_entry(zeros(), (0, 0), -math.inf)), ValueError, "teacher must be finite"),
    # ------------------------------------------------------------ micro_env
    ("exact_gradient: a nested list", lambda: env().exact_gradient([[0.0] * len(VOCAB)] * env().shape[0]), TypeError,
     "theta must be a torch.Tensor"),
    ("estimator_bias: a NaN in theta", lambda: env().estimator_bias(with_entry(theta(), (0, 0), math.nan)), ValueError,
     "theta must be finite"),
    ("estimator_bias: an inf in w", lambda: env().estimator_bias(theta(), with_entry(torch.zeros(len(VOCAB), dtype=torch.float64),
                                                                                       (2,), math.inf)),
     ValueError, "w must be finite"),
    ("train: an unknown which", lambda: env().train("world", 1.0, 1), ValueError, "unknown which 'world'"),
    ("q_by_observation: q of the wrong shape", lambda: env().q_by_observation(torch.zeros(3, 3), "x", "a"), ValueError,
     "q must have shape"),
]


@pytest.mark.parametrize("call, error, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_by_minirl(call, error, match):
    assert_refused_by_minirl(call, error, match)


# ---------------------------------------------------------------- legal input keeps working

def test_state_entropy_of_an_action_never_taken_is_computed_by_hand():
    h = entropy.state_entropy(torch.tensor([[0.0, 0.0, -math.inf], [0.0, -math.inf, -math.inf]], dtype=torch.float64))
    assert h.tolist() == pytest.approx([math.log(2), 0.0], abs=1e-15)
    assert not torch.isnan(h).any()


def test_a_minus_inf_logit_acts_as_the_action_left_out():
    """first_order_entropy_change with an action at -inf equals it on the row without that action (no NaN)."""
    z = torch.tensor([[0.3, -1.0, -math.inf], [2.0, 0.5, -math.inf]], dtype=torch.float64)
    d = torch.tensor([[1.0, -0.5, 7.0], [0.2, 0.4, -3.0]], dtype=torch.float64)
    got = entropy.first_order_entropy_change(z, d)
    assert torch.allclose(got, entropy.first_order_entropy_change(z[:, :2], d[:, :2]), atol=1e-15)
    assert torch.allclose(entropy.state_entropy(z), entropy.state_entropy(z[:, :2]), atol=1e-15)


def test_the_gradient_of_the_entropy_stays_finite_at_minus_inf():
    z = torch.tensor([[0.0, 0.0, -math.inf]], dtype=torch.float64, requires_grad=True)
    entropy.state_entropy(z).sum().backward()
    assert torch.isfinite(z.grad).all()


def test_finite_logits_give_the_same_numbers_as_before():
    g = torch.Generator().manual_seed(0)
    z, d = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, 4, generator=g, dtype=torch.float64)
    logp = torch.log_softmax(z, -1)
    assert torch.equal(entropy.state_entropy(z), -(logp.exp() * logp).sum(-1))
    pi = logp.exp()
    old = -(pi * (logp - (pi * logp).sum(-1, keepdim=True)) * (d - (pi * d).sum(-1, keepdim=True))).sum(-1)
    assert torch.equal(entropy.first_order_entropy_change(z, d), old)
    q = [mdp().completion_probs(z.new_zeros(mdp().shape) + 0.1 * torch.arange(4.0, dtype=torch.float64), p)
         for p in mdp().prompts]
    want = torch.stack([-(x * x.log()).sum() for x in q]).mean()
    assert torch.equal(entropy.completion_entropy(mdp(), zeros() + 0.1 * torch.arange(4.0, dtype=torch.float64)), want)


def test_a_deterministic_policy_has_zero_completion_entropy_and_finite_covariance():
    expert = greedy_expert(mdp())  # -inf on every action it never takes
    assert float(entropy.completion_entropy(mdp(), expert)) == 0.0
    assert torch.isfinite(entropy.entropy_covariance(mdp(), expert)).all()
    assert torch.isfinite(entropy.advantages(mdp(), expert)).all()


def test_an_integer_or_bool_reward_is_a_number():
    as_float = moments(mdp(), zeros(), GRPO, 2, reward=reward_design.correct)
    as_bool = moments(mdp(), zeros(), GRPO, 2, reward=lambda p, c: reward_design.correct(p, c) == 1.0)
    assert torch.equal(as_float.mean, as_bool.mean) and as_float.variance == as_bool.variance


def test_a_combination_by_its_key_and_weights_as_a_tensor():
    logits = torch.randn(mdp().shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    by_function = reward_design.misranking_probability(mdp(), logits, 4, reward_design.normalize_then_sum, (1.0, 0.5))
    assert reward_design.misranking_probability(mdp(), logits, 4, "normalize then sum", (1.0, 0.5)) == by_function
    assert reward_design.misranking_probability(mdp(), logits, 4, reward_design.normalize_then_sum,
                                                torch.tensor([1.0, 0.5])) == by_function
    assert reward_design.misranking_probability(mdp(), logits, 4, "sum then normalize") == 0.0


def test_sft_and_reward_accept_a_teacher_that_never_takes_an_action():
    expert = greedy_expert(mdp())
    for estimator in ("sft", "reward"):
        assert torch.isfinite(distillation.expected_update(mdp(), zeros(), expert, estimator)).all()
    assert torch.isfinite(distillation.expected_update(mdp(), expert, zeros(), "reward")).all()


def test_degenerate_training_and_groups_still_run():
    run = env().train("policy", 1.0, 0)  # no steps: J at the start only
    assert run.objectives.shape == (1,) and torch.equal(run.theta, theta())
    w_only = env().train("all", 1.0, 1, w=torch.zeros(len(VOCAB), dtype=torch.float64))
    assert w_only.objectives.shape == (2,)
    two = reward_design.sum_then_normalize(GROUP[:2], W)  # a group of two
    assert two.shape == (2,) and torch.isfinite(two).all()
    same = reward_design.normalize_then_sum(torch.ones(3, 2, dtype=torch.float64), W)  # a group all alike: 0
    assert torch.equal(same, torch.zeros(3, dtype=torch.float64))
    drift = reward_design.random_reward_drift(mdp(), zeros(), "x", 2, 1, 1.0, clip_eps=None)
    assert abs(drift.mean_step_entropy_change) < 1e-12
    assert micro.EOS in VOCAB and reward_design.formatted("x", ("a", micro.EOS)) == 1.0
