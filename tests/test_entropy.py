"""Entropy under a policy-gradient step (minirl.exact.entropy), against finite differences, the
policy-gradient theorem and exact steps of shrinking size."""
import pytest
import torch

from minirl.exact import entropy
from minirl.exact.imitation import state_visitation
from minirl.exact.mdp import MicroMDP


def policy(mdp, seed):
    return torch.randn(mdp.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_first_order_change_is_the_derivative_of_the_entropy():
    """Central finite differences of H along random directions (error O(eps^2))."""
    mdp = MicroMDP()
    for seed in range(3):
        logits, delta = policy(mdp, seed), policy(mdp, 10 + seed)
        eps = 1e-5
        numeric = (entropy.state_entropy(logits + eps * delta) - entropy.state_entropy(logits - eps * delta)) / (2 * eps)
        assert torch.allclose(entropy.first_order_entropy_change(logits, delta), numeric, atol=1e-8)


def test_exact_gradient_is_visitation_times_pi_times_advantage():
    """The tabular policy-gradient theorem: grad J(s, a) = d(s) pi(a|s) A(s, a), the left side by
    enumeration over completions, the right from backward induction."""
    mdp = MicroMDP()
    for seed in range(3):
        logits = policy(mdp, seed)
        pi = torch.softmax(logits, -1)
        theorem = state_visitation(mdp, logits)[:, None] * pi * entropy.advantages(mdp, logits)
        assert torch.allclose(mdp.exact_gradient(logits), theorem, atol=1e-12)


def test_predicted_change_matches_an_exact_step_to_second_order():
    """Halving the step size quarters the gap between the covariance's prediction and the exact
    step's measured change (the gap is O(lr^2)); the prediction's sign is the measurement's where
    the change is not negligible."""
    mdp = MicroMDP()
    for seed in range(3):
        logits = policy(mdp, seed)
        gaps = []
        for lr in (0.1, 0.05, 0.025):
            predicted, measured = entropy.policy_gradient_entropy_change(mdp, logits, lr)
            gaps.append(float((predicted - measured).abs().max()))
            big = measured.abs() > 10 * gaps[-1]
            assert bool(big.any()) and torch.equal(predicted[big].sign(), measured[big].sign())
        assert gaps[1] / gaps[0] == pytest.approx(0.25, abs=0.05) and gaps[2] / gaps[1] == pytest.approx(0.25, abs=0.05)


def test_bad_input_is_refused():
    mdp = MicroMDP()
    with pytest.raises(ValueError, match="delta shape"):
        entropy.first_order_entropy_change(policy(mdp, 0), torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="lr must be"):
        entropy.policy_gradient_entropy_change(mdp, policy(mdp, 0), 0.0)
