"""Lesson 12's first pieces against references computed apart from them: soft value iteration
against brute-force enumeration of the micro world's completions, the MaxEnt IRL gradient against
autograd of the enumerated log-likelihood, exact IRL recovering the world's reward, importance-
weighted estimates converging to the exact gradient, and GAIL's discriminator loss against its
closed form and its optimum D* = p_E / (p_E + p_pi) against enumeration."""
import math

import pytest
import torch

from minirl import losses
from minirl.exact import irl, micro_gail
from minirl.exact.mdp import MicroMDP


@pytest.fixture(scope="module")
def world():
    mdp = MicroMDP()
    return mdp, irl.micro_features(mdp), irl.expert_distribution(mdp)


def returns(mdp):
    return torch.tensor([mdp.discounted_return(p, c) for p in mdp.prompts for c in mdp.completions], dtype=torch.float64)


def test_soft_value_iteration_matches_enumeration(world):
    mdp, phi, expert = world
    r = returns(mdp)
    for k, prompt in enumerate(mdp.prompts):
        rows = mdp.table.prompt == k
        assert torch.allclose(expert[rows], torch.softmax(r[rows], 0), atol=1e-12)
    theta = 0.3 * torch.randn(phi.size(-1), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    _, log_z = irl.model_distribution(mdp, phi, theta)
    r_theta = irl.episode_features(mdp, phi) @ theta
    want = [math.log(sum(math.exp(x) for x in r_theta[mdp.table.prompt == k].tolist())) for k in range(2)]
    assert torch.allclose(log_z, torch.tensor(want, dtype=torch.float64), atol=1e-12)


def test_features_give_the_true_reward(world):
    mdp, phi, _ = world
    assert torch.allclose(irl.episode_features(mdp, phi) @ irl.true_theta(mdp), returns(mdp), atol=1e-12)


@pytest.mark.parametrize("scale", [0.0, 0.5, 2.0])
def test_maxent_gradient_is_the_likelihood_gradient(world, scale):
    mdp, phi, expert = world
    theta = (scale * torch.randn(phi.size(-1), generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    theta.requires_grad_(True)
    (want,) = torch.autograd.grad(irl.log_likelihood(mdp, phi, theta, expert), theta)
    assert torch.allclose(irl.maxent_gradient(mdp, phi, theta, expert), want, atol=1e-12)


def test_exact_maxent_irl_recovers_the_reward_and_the_expert(world):
    mdp, phi, expert = world
    theta = torch.zeros(phi.size(-1), dtype=torch.float64)
    for _ in range(500):
        theta = theta + 2.0 * irl.maxent_gradient(mdp, phi, theta, expert)
    model, _ = irl.model_distribution(mdp, phi, theta)
    kl = (expert * (expert.log() - model.log())).sum().item() / len(mdp.prompts)
    assert kl < 1e-6
    assert (theta - irl.true_theta(mdp)).abs().max() < 1e-3


def test_importance_weighted_gradient_converges_to_the_exact_one(world):
    mdp, phi, expert = world
    theta = 0.5 * irl.true_theta(mdp)
    counts, rows = irl.episode_features(mdp, phi), torch.nonzero(mdp.table.prompt == 0).flatten()
    model, _ = irl.model_distribution(mdp, phi, theta)
    expert_term = (expert[rows, None] * counts[rows]).sum(0)
    exact = expert_term - (model[rows, None] * counts[rows]).sum(0)
    logq = mdp.episode_log_probs(torch.zeros(mdp.shape, dtype=torch.float64))[rows]  # a uniform-token sampler
    g = torch.Generator().manual_seed(0)
    errors = []
    for m in (100, 10_000):
        draws = [torch.multinomial(logq.exp(), m, replacement=True, generator=g) for _ in range(10)]
        errors.append(sum((irl.importance_weighted_gradient(expert_term[None], counts[rows[d]], logq[d], theta) - exact).norm()
                          for d in draws).item() / 10)
    assert errors[1] < errors[0] / 5 and errors[1] < 0.03


def test_gail_loss_matches_closed_form():
    e = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    p = torch.tensor([0.0, 1.5], dtype=torch.float64)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    want = 0.5 * (sum(-math.log(sig(x)) for x in e.tolist()) / 3 + sum(-math.log(1 - sig(x)) for x in p.tolist()) / 2)
    assert losses.gail_discriminator_loss(e, p).item() == pytest.approx(want, abs=1e-12)
    assert losses.gail_discriminator_loss(torch.zeros(5), torch.zeros(2)).item() == pytest.approx(math.log(2), abs=1e-6)
    assert math.isfinite(losses.gail_discriminator_loss(torch.tensor([-1000.0]), torch.tensor([1000.0])).item())
    with pytest.raises(ValueError, match="non-empty 1-D"):
        losses.gail_discriminator_loss(torch.zeros(0), p)


def test_gail_optimal_discriminator_is_the_density_ratio():
    """A tabular discriminator over 5 outcomes, trained on the exact expected loss, lands on
    D* = p_E / (p_E + p_pi) (expectations written as weighted sums, so the batches are the whole
    distributions)."""
    p_e = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0], dtype=torch.float64)
    p_pi = torch.tensor([0.1, 0.1, 0.2, 0.3, 0.3], dtype=torch.float64)
    logits = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([logits], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14)

    def closure():
        opt.zero_grad()
        # the loss's two means, as expectations: weight each outcome's logit by its probability
        loss = 0.5 * (-(p_e * torch.nn.functional.logsigmoid(logits)).sum()
                      - (p_pi * torch.nn.functional.logsigmoid(-logits)).sum())
        loss.backward()
        return loss
    opt.step(closure)
    d = torch.sigmoid(logits.detach())
    want = p_e / (p_e + p_pi)
    assert torch.allclose(d[:4], want[:4], atol=1e-5) and d[4] < 1e-3  # no expert mass: D -> 0
    # the weighted form is the package's loss on a sample list with those frequencies
    e_logits = torch.cat([logits.detach()[k].repeat(int(10 * p_e[k])) for k in range(5)])
    p_logits = torch.cat([logits.detach()[k].repeat(int(10 * p_pi[k])) for k in range(5)])
    direct = 0.5 * (-(p_e * torch.nn.functional.logsigmoid(logits.detach())).sum()
                    - (p_pi * torch.nn.functional.logsigmoid(-logits.detach())).sum())
    assert losses.gail_discriminator_loss(e_logits, p_logits).item() == pytest.approx(direct.item(), abs=1e-9)


# ---------------------------------------------------------------- plans: every one of the 1,296
@pytest.fixture(scope="module")
def plans():
    from minirl.world import generate
    from minirl.world import rewards
    items, probs = generate.expert_plan_distribution()
    truth = torch.tensor([rewards.plan_reward(p) for p in items], dtype=torch.float64)
    return items, irl.plan_features(items), torch.tensor(probs, dtype=torch.float64), truth


def corr(a, b):
    return torch.corrcoef(torch.stack([a, b]))[0, 1].item()


def test_plan_features_can_express_the_hidden_reward(plans):
    from minirl.world import grammar, rewards
    items, phi, _, truth = plans
    acts = grammar.ACTIVITIES
    theta = torch.tensor([rewards.ACTIVITY_REWARD[a] for a in acts]
                         + [rewards.PAIR_REWARD.get((a, b), 0.0) + (rewards.REPEAT_PENALTY if a == b else 0.0)
                            for a in acts for b in acts], dtype=torch.float64)
    assert torch.allclose(phi @ theta, truth, atol=1e-12)


def test_exact_maxent_irl_on_plans_recovers_the_reward_up_to_a_constant(plans):
    _, phi, expert, truth = plans
    learned = phi @ irl.fit_maxent(phi, expert, steps=10_000)
    model = torch.softmax(learned, 0)
    assert (expert * (expert.log() - model.log())).sum() < 1e-6
    assert corr(learned, truth) > 0.9999
    assert (learned - truth - (learned - truth).mean()).abs().max() < 1e-3  # equal up to one constant


def test_maxent_irl_from_demonstrations_gets_closer_with_more(plans):
    from minirl.world import datasets
    items, phi, expert, truth = plans
    demos = [tuple(d["completion"].split()[:-1]) for d in datasets.load_demos()]
    kls, corrs = [], []
    for n in (100, 500, len(demos)):
        learned = phi @ irl.fit_maxent(phi, irl.empirical_distribution(items, demos[:n]))
        kls.append((expert * (expert.log() - torch.log_softmax(learned, 0))).sum().item())
        corrs.append(corr(learned, truth))
    assert kls[0] > kls[1] > kls[2] and corrs[2] >= 0.95  # measured: KL 0.25, 0.04, 0.010; corr 0.76, 0.97, 0.99


# ---------------------------------------------------------------- GAIL, exact on the micro world
def test_micro_gail_discriminator_reaches_the_density_ratio_then_one_half(world):
    """Against a fixed policy the tabular discriminator's logit converges to log p_E - log p_pi
    (enumerated apart from the trainer); alternating with policy steps, p_pi -> p_E and D -> 1/2."""
    mdp, _, expert = world
    uniform = torch.zeros(mdp.shape, dtype=torch.float64)
    policy = torch.stack([torch.exp(mdp.log_prob(uniform, p, c)) for p in mdp.prompts for c in mdp.completions]).detach()
    first = micro_gail.train(mdp, expert, uniform, steps=1, disc_steps=3000, disc_lr=2.0)[0]
    assert first["logit_error"] < 1e-3
    assert first["disc_loss"] == pytest.approx(
        0.5 * sum(-(e * math.log(e / (e + p)) + p * math.log(p / (e + p))) for e, p in zip(expert.tolist(), policy.tolist())) / 2,
        abs=1e-6)
    history = micro_gail.train(mdp, expert, uniform, steps=300, policy_lr=3.0, disc_steps=50, disc_lr=2.0)
    assert history[0]["kl"] > 0.4 and history[-1]["kl"] < 1e-4 and history[-1]["d_gap"] < 1e-2
    assert history[-1]["disc_loss"] == pytest.approx(math.log(2), abs=1e-4)


def test_generator_step_is_the_kl_regularized_optimum():
    """With the world's own reward table, the step is mdp.optimal_logits (written apart, per prompt
    from the completions' returns)."""
    from minirl.exact import imitation
    mdp = MicroMDP()
    ref = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    step = micro_gail.generator_step(mdp, ref, imitation.reward_table(mdp), beta=0.7)
    for prompt in mdp.prompts:
        assert torch.allclose(mdp.completion_probs(step, prompt), mdp.optimal_completion_probs(ref, 0.7, prompt), atol=1e-12)


def test_prefix_discriminator_is_the_occupancy_ratio():
    mdp = MicroMDP()
    expert, uniform = mdp.soft_value_iteration(torch.zeros(mdp.shape, dtype=torch.float64) + 0.1)[0], torch.zeros(mdp.shape, dtype=torch.float64)
    logits = micro_gail.prefix_logits(mdp, expert, uniform)
    # occupancy by listing completions: the probability of the prefix times the next token's
    s, a = mdp.state_index[("x", ("a",))], mdp.actions.index("b")
    through = [c for c in mdp.completions if c[:2] == ("a", "b")]
    p_e = sum(mdp.completion_probs(expert, "x")[mdp.completions.index(c)].item() for c in through) / 2
    p_u = sum(mdp.completion_probs(uniform, "x")[mdp.completions.index(c)].item() for c in through) / 2
    assert logits[s, a].item() == pytest.approx(math.log(p_e) - math.log(p_u), abs=1e-12)
