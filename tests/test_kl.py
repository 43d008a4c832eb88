"""KL estimators on the micro world: expectations against exact KL, and what each does as a loss."""
import pytest
import torch

from minirl.exact.mdp import MicroMDP
from minirl.kl import kl_k1, kl_k2, kl_k3

MDP = MicroMDP()


@pytest.fixture
def policies():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(MDP.shape, generator=g, dtype=torch.float64)
    theta = ref + 0.7 * torch.randn(MDP.shape, generator=g, dtype=torch.float64)
    return theta, ref


def state_kl(p_logits, q_logits):
    """Exact KL(p||q) of the next-token distributions, one per state: (n_states,)."""
    logp, logq = torch.log_softmax(p_logits, -1), torch.log_softmax(q_logits, -1)
    return (logp.exp() * (logp - logq)).sum(-1)


def expected_per_state(k, theta, ref):
    """E_{a ~ p(.|s)} k(log p(a|s), log q(a|s)) for every state, samples held fixed (p detached as weights)."""
    logp, logq = torch.log_softmax(theta, -1), torch.log_softmax(ref, -1)
    return (logp.exp().detach() * k(logp, logq)).sum(-1)


def test_expectations_at_each_state(policies):
    theta, ref = policies
    exact = state_kl(theta, ref)
    assert torch.allclose(expected_per_state(kl_k1, theta, ref), exact, atol=1e-12)
    assert torch.allclose(expected_per_state(kl_k3, theta, ref), exact, atol=1e-12)
    k2 = expected_per_state(kl_k2, theta, ref)
    assert (k2 - exact).abs().max() > 1e-3  # biased ...
    close = expected_per_state(kl_k2, ref + 0.05 * (theta - ref), ref)
    assert torch.allclose(close, state_kl(ref + 0.05 * (theta - ref), ref), rtol=0.05)  # ... but close when p is near q


@pytest.mark.parametrize("k, target", [(kl_k1, None), (kl_k2, "forward"), (kl_k3, "reverse")])
def test_gradients_as_losses_at_each_state(policies, k, target):
    """Samples held fixed: k1 -> 0, k2 -> grad KL(p||q), k3 -> grad KL(q||p), in every state."""
    theta, ref = policies
    t = theta.clone().requires_grad_(True)
    expected_per_state(k, t, ref).sum().backward()
    if target is None:
        want = torch.zeros_like(theta)
    else:
        u = theta.clone().requires_grad_(True)
        (state_kl(u, ref) if target == "forward" else state_kl(ref, u)).sum().backward()
        want = u.grad
    assert torch.allclose(t.grad, want, atol=1e-12)


def sequence_expectation(k, theta, ref):
    """E_{tau ~ p}[sum_t k(log p(a_t|s_t), log q(a_t|s_t))], exact over the micro world."""
    logp, logq = torch.log_softmax(theta, -1), torch.log_softmax(ref, -1)
    total = 0.0
    for prompt in MDP.prompts:
        for c, prob in zip(MDP.completions, MDP.completion_probs(theta.detach(), prompt)):
            steps = MDP.steps(prompt, c)
            lp = torch.stack([logp[s, a] for s, a in steps])
            lq = torch.stack([logq[s, a] for s, a in steps])
            total = total + prob * k(lp, lq).sum()
    return total / len(MDP.prompts)


def sequence_kl(p_logits, q_logits):
    """KL(p||q) between the completion distributions, averaged over prompts."""
    total = 0.0
    for prompt in MDP.prompts:
        p, q = MDP.completion_probs(p_logits, prompt), MDP.completion_probs(q_logits, prompt)
        total = total + (p * (p.log() - q.log())).sum()
    return total / len(MDP.prompts)


def test_per_token_sums_k1_and_k3_are_unbiased_for_the_sequence_kl(policies):
    theta, ref = policies
    exact = sequence_kl(theta, ref).item()
    assert sequence_expectation(kl_k1, theta, ref).item() == pytest.approx(exact, abs=1e-12)
    assert sequence_expectation(kl_k3, theta, ref).item() == pytest.approx(exact, abs=1e-12)
    assert abs(sequence_expectation(kl_k2, theta, ref).item() - exact) > 1e-3


def test_per_token_k1_loss_has_zero_expected_gradient_and_k3_is_not_the_sequence_reverse_kl(policies):
    theta, ref = policies
    t = theta.clone().requires_grad_(True)
    sequence_expectation(kl_k1, t, ref).backward()
    assert t.grad.abs().max().item() < 1e-12
    t = theta.clone().requires_grad_(True)
    sequence_expectation(kl_k3, t, ref).backward()
    u = theta.clone().requires_grad_(True)
    sequence_kl(ref, u).backward()
    assert (t.grad - u.grad).abs().max().item() > 1e-3  # per token, k3 holds each state's distribution fixed


def test_shape_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="does not match"):
        kl_k3(torch.zeros(2, 3), torch.zeros(2, 4))
