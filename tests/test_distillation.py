"""Distillation toward a teacher (minirl.exact.distillation), against autograd of the KLs written
from their definitions, the policy-gradient theorem and a brute force over every batch."""
import itertools

import pytest
import torch

from minirl.exact import distillation as di
from minirl.exact.imitation import state_visitation
from minirl.exact.mdp import MicroMDP


def policies(mdp, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(mdp.shape, generator=g, dtype=torch.float64), 2 * torch.randn(mdp.shape, generator=g, dtype=torch.float64)


def sequence_kl(mdp, p_logits, q_logits):
    """KL(p || q) of whole completions, mean over prompts, from log pi(tau) summed by hand."""
    total = 0.0
    for prompt in mdp.prompts:
        for c in mdp.completions:
            lp = sum(torch.log_softmax(p_logits, -1)[s, a] for s, a in mdp.steps(prompt, c))
            lq = sum(torch.log_softmax(q_logits, -1)[s, a] for s, a in mdp.steps(prompt, c))
            total = total + lp.exp() * (lp - lq)
    return total / len(mdp.prompts)


def grad(fn, x):
    x = x.clone().requires_grad_(True)
    return torch.autograd.grad(fn(x), x)[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_each_expected_update_is_the_gradient_of_its_objective(seed):
    mdp = MicroMDP(horizon=2)
    student, teacher = policies(mdp, seed)
    reverse = grad(lambda x: sequence_kl(mdp, x, teacher), student)
    forward = grad(lambda x: sequence_kl(mdp, teacher, x), student)
    assert torch.allclose(di.expected_update(mdp, student, teacher, "on_policy"), -reverse, atol=1e-12)
    assert torch.allclose(di.expected_update(mdp, student, teacher, "sft"), -forward, atol=1e-12)
    assert torch.allclose(di.expected_update(mdp, student, teacher, "reward"), mdp.exact_gradient(student), atol=1e-12)


def test_per_token_descends_each_states_kl_with_the_visitation_held_fixed():
    mdp = MicroMDP()
    student, teacher = policies(mdp, 2)
    d = state_visitation(mdp, student)

    def per_state(x):
        lp, lt = torch.log_softmax(x, -1), torch.log_softmax(teacher, -1)
        return (d * (lp.exp() * (lp - lt)).sum(-1)).sum()
    assert torch.allclose(di.expected_update(mdp, student, teacher, "per_token"), -grad(per_state, student), atol=1e-12)
    reverse = grad(lambda x: mdp.kl(x, teacher), student)  # and it is not the reverse KL's gradient
    assert float((di.expected_update(mdp, student, teacher, "per_token") + reverse).norm()) > 0.1 * float(reverse.norm())


@pytest.mark.parametrize("estimator", di.ESTIMATORS)
def test_single_sample_moments_equal_a_brute_force_over_every_pair(estimator):
    """One completion of each prompt: every ordered pair, its update written with mdp.score."""
    mdp = MicroMDP(horizon=2)
    student, teacher = policies(mdp, 3)
    sampler = teacher if estimator == "sft" else student
    lp_s, lp_t = torch.log_softmax(student, -1), torch.log_softmax(teacher, -1)
    per_prompt = []
    for p in mdp.prompts:
        probs = mdp.completion_probs(sampler, p)
        updates = []
        for c in mdp.completions:
            steps = mdp.steps(p, c)
            g = torch.zeros_like(student)
            for t, (s, a) in enumerate(steps):
                rewards = [mdp.reward(p, c[:k], c[k]) for k in range(len(c))]
                delta = [float(lp_s[s2, a2] - lp_t[s2, a2]) for s2, a2 in steps]
                w = {"on_policy": -sum(delta[t:]), "per_token": -delta[t], "sft": 1.0, "reward": sum(rewards[t:])}[estimator]
                score = -torch.softmax(student, -1)[s]
                score[a] += 1.0
                g[s] += w * score
            updates.append(g)
        per_prompt.append((probs, updates))
    mean, second = torch.zeros_like(student), 0.0
    for (px, ux), (py, uy) in itertools.product(*[[(pr, u) for pr, u in zip(*pp)] for pp in per_prompt]):
        g = (ux + uy) / 2
        mean += px * py * g
        second += float(px * py * (g * g).sum())
    got = di.single_sample_moments(mdp, student, teacher, estimator)
    assert torch.allclose(got.mean, mean, atol=1e-12)
    assert got.variance == pytest.approx(second - float((mean * mean).sum()), rel=1e-9)


def test_at_the_teacher_the_distillation_updates_vanish():
    mdp = MicroMDP()
    _, teacher = policies(mdp, 4)
    for estimator in ("on_policy", "per_token", "sft"):
        assert float(di.expected_update(mdp, teacher, teacher, estimator).abs().max()) < 1e-12


def test_bad_input_is_refused():
    mdp = MicroMDP()
    student, teacher = policies(mdp, 0)
    with pytest.raises(ValueError, match="unknown estimator"):
        di.expected_update(mdp, student, teacher, "forward")
    with pytest.raises(ValueError, match="shape"):
        di.expected_update(mdp, student, teacher[:3], "on_policy")
