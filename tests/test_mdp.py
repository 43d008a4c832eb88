"""The micro world's exact answers, and the derivations of lessons 02 and 04 as tests."""
import math

import pytest
import torch

from minirl.exact import micro
from minirl.exact.mdp import MicroMDP


@pytest.fixture
def logits():
    return torch.randn(MicroMDP().shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


@pytest.mark.parametrize("gamma", [1.0, 0.8])
def test_probabilities_sum_to_one_and_j_is_the_mean_root_value(logits, gamma):
    mdp = MicroMDP(gamma)
    for p in mdp.prompts:
        assert mdp.completion_probs(logits, p).sum().item() == pytest.approx(1.0, abs=1e-12)
    roots = [mdp.state_index[(p, ())] for p in mdp.prompts]
    assert mdp.objective(logits).item() == pytest.approx(mdp.values(logits)[roots].mean().item(), abs=1e-12)


def test_uniform_policy_j_by_hand():
    mdp = MicroMDP()
    by_hand = 0.0
    for p in mdp.prompts:
        for c in micro.completions():
            by_hand += 0.25 ** len(c) * micro.total_reward(p, c) / len(mdp.prompts)
    assert mdp.objective(torch.zeros(mdp.shape, dtype=torch.float64)).item() == pytest.approx(by_hand, abs=1e-12)


@pytest.mark.parametrize("gamma", [1.0, 0.8])
def test_exact_gradient_by_enumeration_equals_autograd_of_exact_j(logits, gamma):
    mdp = MicroMDP(gamma)
    theta = logits.clone().requires_grad_(True)
    mdp.objective(theta).backward()
    assert torch.allclose(mdp.exact_gradient(logits), theta.grad, atol=1e-12)


def test_q_and_v_are_consistent(logits):
    mdp = MicroMDP(0.9)
    q, v = mdp.q_values(logits), mdp.values(logits)
    pi = torch.softmax(logits, dim=-1)
    assert torch.allclose((pi * q).sum(-1), v, atol=1e-12)
    # the advantage has mean zero under the policy in every state
    assert torch.allclose((pi * (q - v[:, None])).sum(-1), torch.zeros_like(v), atol=1e-12)


def test_monte_carlo_gradient_is_within_its_standard_error_of_the_exact_gradient(logits):
    mdp = MicroMDP()
    episodes = mdp.sample(logits, 4000, torch.Generator().manual_seed(1))
    terms = torch.stack([mdp.discounted_return(p, c) * mdp.score(logits, p, c) for p, c in episodes])
    mean, stderr = terms.mean(0), terms.std(0) / math.sqrt(len(episodes))
    error = mean - mdp.exact_gradient(logits)
    # E|error|^2 = sum of the entries' variances / N; rare states make single entries' standard
    # errors unreliable, so the test is on the whole vector, then on the typical entry
    assert error.norm().item() < 3 * stderr.pow(2).sum().sqrt().item()
    assert ((error.abs() / stderr.clamp_min(1e-12)) < 2).float().mean().item() > 0.8  # 0.885 or more over 12 seeds tried


def test_baseline_lemma_exactly(logits):
    """E_tau[ sum_t grad log pi(a_t|s_t) b(s_t) ] = 0 for any state-dependent baseline b."""
    mdp = MicroMDP()
    b = torch.randn(len(mdp.states), generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 5
    pi = torch.softmax(logits, dim=-1)
    total = torch.zeros_like(logits)
    for p in mdp.prompts:
        for c, prob in zip(mdp.completions, mdp.completion_probs(logits, p)):
            for s, a in mdp.steps(p, c):
                g = -pi[s].clone()
                g[a] += 1.0
                total[s] += prob * b[s] * g
    assert total.abs().max().item() < 1e-12


def test_sampling_frequencies_match_exact_probabilities(logits):
    mdp = MicroMDP()
    n = 8000
    episodes = mdp.sample(logits, n, torch.Generator().manual_seed(3))
    for p in mdp.prompts:
        probs = mdp.completion_probs(logits, p)
        count = sum(1 for q, _ in episodes if q == p)
        freq = torch.tensor([sum(1 for q, c in episodes if q == p and c == comp) / count for comp in mdp.completions],
                            dtype=torch.float64)
        stderr = (probs * (1 - probs) / count).sqrt().clamp_min(1e-6)
        assert ((freq - probs).abs() / stderr).max().item() < 4.5


def test_bad_gamma_is_a_clear_error():
    with pytest.raises(ValueError, match="gamma"):
        MicroMDP(gamma=1.2)


def test_bias_and_variance_of_a_two_point_estimator():
    from minirl.exact.mdp import bias_and_variance

    terms = torch.tensor([[0.0, 2.0], [4.0, 2.0]], dtype=torch.float64)  # g = (0, 2) or (4, 2), each w.p. 1/2
    probs = torch.tensor([0.5, 0.5], dtype=torch.float64)
    bias, var = bias_and_variance(terms, probs, torch.tensor([2.0, 1.0], dtype=torch.float64))
    assert bias == pytest.approx(1.0) and var == pytest.approx(4.0)  # E g = (2, 2); Var = E (g1 - 2)^2 = 4


def test_kl_regularized_optimum_in_closed_form():
    """pi_ref * exp(R / beta) / Z maximizes J - beta KL: the soft-value tabular policy produces it
    exactly, gradient ascent on the exact objective converges to it, and no other policy beats it."""
    mdp = MicroMDP()
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(mdp.shape, generator=g, dtype=torch.float64)
    beta = 0.5
    star = mdp.optimal_logits(ref, beta)
    for p in mdp.prompts:
        closed = mdp.optimal_completion_probs(ref, beta, p)
        assert closed.sum().item() == pytest.approx(1.0)
        assert torch.allclose(mdp.completion_probs(star, p), closed, atol=1e-12)
    best = mdp.regularized_objective(star, ref, beta).item()
    # the optimum's value is beta * log Z, averaged over prompts
    assert best == pytest.approx(sum(beta * mdp.partition(ref, beta, p).log().item() for p in mdp.prompts) / 2, abs=1e-12)
    theta = ref.clone().requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=0.2)
    for _ in range(150):
        opt.zero_grad()
        (-mdp.regularized_objective(theta, ref, beta)).backward()
        opt.step()
    assert mdp.regularized_objective(theta.detach(), ref, beta).item() == pytest.approx(best, abs=1e-5)
    for _ in range(5):
        other = star + 0.3 * torch.randn(mdp.shape, generator=g, dtype=torch.float64)
        assert mdp.regularized_objective(other, ref, beta).item() < best


def test_the_episode_table_gives_the_loops_log_probs_scores_and_gradient(logits):
    """episode_log_probs and weighted_scores, one pass over all 80 episodes, equal the per-episode
    loops; with R(tau) on every step the probability-weighted scores sum to the exact gradient."""
    mdp = MicroMDP()
    episodes = [(p, c) for p in mdp.prompts for c in mdp.completions]
    loop = torch.stack([mdp.log_prob(logits, p, c) for p, c in episodes])
    assert torch.allclose(mdp.episode_log_probs(logits), loop, atol=1e-12)
    t = mdp.table
    ones = mdp.weighted_scores(logits, torch.ones_like(t.mask))
    assert torch.allclose(ones, torch.stack([mdp.score(logits, p, c) for p, c in episodes]), atol=1e-12)
    returns = (t.rewards * t.mask).sum(1, keepdim=True).expand_as(t.mask)
    probs = mdp.episode_log_probs(logits).exp() / len(mdp.prompts)
    grad = (probs[:, None, None] * mdp.weighted_scores(logits, returns)).sum(0)
    assert torch.allclose(grad, mdp.exact_gradient(logits), atol=1e-12)


@pytest.mark.parametrize("gamma", [1.0, 0.8])
def test_monte_carlo_values_are_the_mean_return_seen_and_converge_to_exact_v(logits, gamma):
    mdp = MicroMDP(gamma)
    v_hat, visits = mdp.monte_carlo_values(logits, 40, torch.Generator().manual_seed(2))
    seen = {}  # a plain second implementation: forward sums of the discounted rewards after t
    for p, c in mdp.sample(logits, 40, torch.Generator().manual_seed(2)):
        rs = micro.step_rewards(p, c)
        for t in range(len(c)):
            seen.setdefault(mdp.state_index[(p, c[:t])], []).append(sum(gamma ** k * r for k, r in enumerate(rs[t:])))
    for s in range(len(mdp.states)):
        returns = seen.get(s, [])
        assert visits[s] == len(returns)
        assert v_hat[s].item() == pytest.approx(sum(returns) / len(returns) if returns else 0.0, abs=1e-12)
    many, visits = mdp.monte_carlo_values(logits, 20000, torch.Generator().manual_seed(3))
    exact, busy = mdp.values(logits), visits >= 400  # 400 returns within +-2: standard error under 0.1
    assert busy.sum() >= 6 and (many - exact)[busy].abs().max() < 0.15
