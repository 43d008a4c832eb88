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


def test_one_clipped_step_at_the_old_policy_is_a_policy_gradient_step():
    """At rho = 1 the clip is inactive: one inner step is theta + lr grad J, grad J by enumeration."""
    mdp = MicroMDP()
    for seed in range(2):
        logits = policy(mdp, seed)
        step = entropy.clipped_policy_iteration(mdp, logits, inner_steps=1, lr=0.5)
        assert torch.allclose(step, logits + 0.5 * mdp.exact_gradient(logits), atol=1e-12)


def test_without_a_clip_the_inner_steps_ascend_the_plain_surrogate():
    """eps = 1 below (rho > 0 never reaches 0) and inf above: the clipped objective is the surrogate
    sum_s d_old(s) sum_a pi_theta(a|s) A_old(s, a), ascended here by a plain loop; a clip that binds
    gives another answer, and clip-higher a third."""
    mdp = MicroMDP()
    logits = policy(mdp, 3)
    d, a = state_visitation(mdp, logits), entropy.advantages(mdp, logits)
    theta = logits.clone()
    for _ in range(20):
        x = theta.clone().requires_grad_(True)
        surrogate = sum(d[s] * torch.softmax(x[s], -1)[b] * a[s, b] for s in range(a.size(0)) for b in range(a.size(1)))
        theta = theta + 0.5 * torch.autograd.grad(surrogate, x)[0]
    unclipped = entropy.clipped_policy_iteration(mdp, logits, 1.0, float("inf"), inner_steps=20, lr=0.5)
    assert torch.allclose(unclipped, theta, atol=1e-12)
    symmetric = entropy.clipped_policy_iteration(mdp, logits, 0.2, None, inner_steps=20, lr=0.5)
    higher = entropy.clipped_policy_iteration(mdp, logits, 0.2, 0.28, inner_steps=20, lr=0.5)
    assert float((symmetric - unclipped).abs().max()) > 1e-2 and float((higher - symmetric).abs().max()) > 1e-3


def test_completion_entropy_of_the_uniform_policy():
    """Uniform over 4 actions: each completion of length n has probability 4^-n; the entropy is a finite sum by hand."""
    import math
    from minirl.exact import micro
    mdp = MicroMDP()
    probs = [0.25 ** len(c) for c in micro.completions()]
    want = -sum(p * math.log(p) for p in probs)
    assert float(entropy.completion_entropy(mdp, torch.zeros(mdp.shape, dtype=torch.float64))) == pytest.approx(want, abs=1e-12)
