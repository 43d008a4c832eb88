"""Process against outcome supervision (minirl.exact.process) and expert iteration's link to the policy
gradient (minirl.exact.expert_iteration), against a plain second implementation: every episode (or
every batch) walked in a loop, labels and values by recursion, autograd of exact objectives written
out, and a Monte Carlo estimate. Each reference check is shown to catch a planted bug."""
import itertools
import math

import pytest
import torch

from minirl.exact import expert_iteration as ei
from minirl.exact import micro
from minirl.exact import process as pr
from minirl.exact.mdp import MicroMDP

WORLDS = list(pr.WORLDS)


def world_of(name):
    return pr.StepWorld(*pr.WORLDS[name])


def policy(world, seed, skilled):
    """Random logits; skilled ones lean towards the right step (2 on each exact label)."""
    noise = torch.randn(world.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return noise + 2 * world.labels if skilled else noise


# ------------------------------------------------------------------ a plain second implementation
def plain_label(digits, M, prefix, a):
    previous = prefix[-1] if prefix else 0
    return float(a == (previous + digits[len(prefix)]) % M)


def plain_outcome(digits, M, seq):
    return float(seq[-1] == sum(digits) % M)


def log_pi(world, theta, i, prefix, a):
    return torch.log_softmax(theta[world.state_index[(i, prefix)]], -1)[a]


def plain_q(world, theta, i, prefix, a):
    """P(right answer | prefix, a, then theta writes the rest), by recursion over every continuation."""
    digits, M = world.prompts[i], world.modulus
    seq = prefix + (a,)
    if len(seq) == len(digits):
        return plain_outcome(digits, M, seq)
    return sum(float(log_pi(world, theta, i, seq, b).exp()) * plain_q(world, theta, i, seq, b) for b in range(M))


def plain_v(world, theta, i, prefix):
    return sum(float(log_pi(world, theta, i, prefix, a).exp()) * plain_q(world, theta, i, prefix, a)
               for a in range(world.modulus))


def plain_weights(world, theta, estimator, i, seq, labels=None, completer=None):
    digits, M = world.prompts[i], world.modulus
    R = plain_outcome(digits, M, seq)
    if labels is None:
        lab = [plain_label(digits, M, seq[:t], a) for t, a in enumerate(seq)]
    else:
        lab = [float(labels[world.state_index[(i, seq[:t])], a]) for t, a in enumerate(seq)]
    mu = theta if completer is None else completer
    out = []
    for t, a in enumerate(seq):
        out.append({"outcome": R,
                    "outcome_baseline": R - plain_v(world, theta, i, seq[:t]),
                    "step_labels": lab[t],
                    "step_labels_to_go": sum(lab[t:]),
                    "value_labels": plain_q(world, mu, i, seq[:t], a) - plain_v(world, mu, i, seq[:t])}[estimator])
    return out


def plain_updates(world, theta, estimator, labels=None, completer=None):
    """Per prompt: every episode's probability and its update sum_t w_t (onehot(a_t) - pi(. | s_t)), flattened."""
    out = []
    for i in range(len(world.prompts)):
        probs, updates = [], []
        for seq in itertools.product(range(world.modulus), repeat=world.steps):
            w = plain_weights(world, theta, estimator, i, seq, labels, completer)
            g = torch.zeros(world.shape, dtype=torch.float64)
            lp = 0.0
            for t, a in enumerate(seq):
                s = world.state_index[(i, seq[:t])]
                g[s] -= w[t] * torch.softmax(theta[s], -1)
                g[s, a] += w[t]
                lp += float(log_pi(world, theta, i, seq[:t], a))
            probs.append(torch.tensor(math.exp(lp), dtype=torch.float64))
            updates.append(g.flatten())
        out.append((torch.stack(probs).double(), torch.stack(updates)))
    return out


def brute_force_moments(world, theta, estimator, labels=None, completer=None):
    """Every pair (one episode of each prompt), the batch's update their mean: E[g] and E|g - E g|^2."""
    (px, ux), (py, uy) = plain_updates(world, theta, estimator, labels, completer)
    g = (ux[:, None, :] + uy[None, :, :]) / 2
    p = px[:, None] * py[None, :]
    mean = torch.einsum("ij,ijd->d", p, g)
    return mean.view(world.shape), float(torch.einsum("ij,ij->", p, (g * g).sum(-1)) - mean @ mean)


def check_moments(world, theta, estimator, labels=None, completer=None):
    got = pr.moments(world, theta, estimator, labels, completer)
    mean, variance = brute_force_moments(world, theta, estimator, labels, completer)
    assert torch.allclose(got.mean, mean, atol=1e-12), f"{estimator}: E[g] differs from the brute force"
    assert got.variance == pytest.approx(variance, rel=1e-9, abs=1e-12), f"{estimator}: Var g differs"


def plain_objective(world, theta, per_episode):
    """mean over prompts of sum over episodes P(episode) per_episode(i, seq), written as a loop."""
    total = 0.0
    for i in range(len(world.prompts)):
        for seq in itertools.product(range(world.modulus), repeat=world.steps):
            lp = sum(log_pi(world, theta, i, seq[:t], a) for t, a in enumerate(seq))
            total = total + lp.exp() * per_episode(i, seq)
    return total / len(world.prompts)


def autograd(fn, theta):
    x = theta.clone().requires_grad_(True)
    return torch.autograd.grad(fn(x), x)[0]


# ------------------------------------------------------------------ the world
@pytest.mark.parametrize("name", WORLDS)
def test_the_world_matches_a_plain_enumeration(name):
    world = world_of(name)
    theta = policy(world, 0, skilled=False)
    probs = world.episode_probs(theta)
    M, K = world.modulus, world.steps
    for n, (i, seq) in enumerate((i, seq) for i in range(len(world.prompts))
                                 for seq in itertools.product(range(M), repeat=K)):
        digits = world.prompts[i]
        assert tuple(world.actions[n].tolist()) == seq and int(world.prompt[n]) == i
        assert float(world.outcome[n]) == plain_outcome(digits, M, seq)
        assert [float(world.labels[world.state[n, t], a]) for t, a in enumerate(seq)] == \
            [plain_label(digits, M, seq[:t], a) for t, a in enumerate(seq)]
        lp = sum(float(log_pi(world, theta, i, seq[:t], a)) for t, a in enumerate(seq))
        assert float(probs[n]) == pytest.approx(math.exp(lp), rel=1e-12)
    right = [tuple(sum(d[: t + 1]) % M for t in range(len(prefix))) == prefix for d, prefix in
             ((world.prompts[i], prefix) for i, prefix in world.states)]
    assert world.after_mistake().tolist() == [not r for r in right]
    # the disagreements the comparisons rest on: two mistakes that cancel, and a right step after a mistake
    cancel = [(i, seq) for i, seq in itertools.product(range(len(world.prompts)), itertools.product(range(M), repeat=K))
              if plain_outcome(world.prompts[i], M, seq) == 1 and any(
                  plain_label(world.prompts[i], M, seq[:t], a) == 0 for t, a in enumerate(seq))]
    assert cancel
    q = world.q_values(theta)
    for n, (i, prefix) in enumerate(world.states):
        for a in range(M):
            assert float(q[n, a]) == pytest.approx(plain_q(world, theta, i, prefix, a), abs=1e-12)


def test_sampled_episodes_follow_the_exact_probabilities():
    world = world_of("two sums mod 4")
    theta = policy(world, 1, skilled=True)
    rows = world.sample(theta, 40000, torch.Generator().manual_seed(0))
    freq = torch.bincount(rows, minlength=len(world.prompt)).double() / rows.numel()
    exact = world.episode_probs(theta) / len(world.prompts)
    se = (exact * (1 - exact) / rows.numel()).sqrt()
    assert float(((freq - exact).abs() / se.clamp(min=1e-12)).max()) < 5
    assert world.sample(theta, 0).numel() == 0


# ------------------------------------------------------------------ each estimator's moments
@pytest.mark.parametrize("name", WORLDS)
@pytest.mark.parametrize("estimator", pr.ESTIMATORS)
def test_moments_equal_a_brute_force_over_every_pair_of_episodes(name, estimator):
    world = world_of(name)
    for seed, skilled in ((0, False), (1, True)):
        check_moments(world, policy(world, seed, skilled), estimator)
    if estimator.startswith("step_labels"):
        check_moments(world, policy(world, 2, True), estimator, labels=world.lenient_labels(1, steps=[0]))
    if estimator == "value_labels":
        check_moments(world, policy(world, 2, True), estimator, completer=policy(world, 3, False))


@pytest.mark.parametrize("name", WORLDS)
def test_outcome_and_q_labels_are_unbiased_and_q_labels_have_the_lower_variance(name):
    world = world_of(name)
    for seed, skilled in ((0, False), (1, True)):
        theta = policy(world, seed, skilled)
        outcome = lambda i, seq: plain_outcome(world.prompts[i], world.modulus, seq)  # noqa: E731
        grad = autograd(lambda x: plain_objective(world, x, outcome), theta)
        assert torch.allclose(world.exact_gradient(theta), grad, atol=1e-12)
        m = {e: pr.moments(world, theta, e) for e in ("outcome", "outcome_baseline", "value_labels")}
        for e in m:
            assert torch.allclose(m[e].mean, grad, atol=1e-12), f"{e} is biased"
        assert m["value_labels"].variance < m["outcome_baseline"].variance


def test_q_labels_do_not_always_beat_the_outcome_without_a_baseline():
    """The variance claim is against the same estimator with V as its baseline; V is not the best baseline
    for a 0/1 outcome, and here the plain outcome is the quieter one."""
    world = world_of("two sums mod 4")
    theta = policy(world, 0, skilled=True)
    assert pr.moments(world, theta, "value_labels").variance > pr.moments(world, theta, "outcome").variance


@pytest.mark.parametrize("name", WORLDS)
def test_step_labels_ascend_another_objective_and_point_away_after_a_mistake(name):
    world = world_of(name)
    labels = world.labels
    for seed, skilled in ((0, False), (0, True), (1, True)):
        theta = policy(world, seed, skilled)
        count = autograd(lambda x: plain_objective(world, x, lambda i, seq: sum(
            plain_label(world.prompts[i], world.modulus, seq[:t], a) for t, a in enumerate(seq))), theta)
        assert torch.allclose(pr.moments(world, theta, "step_labels_to_go").mean, count, atol=1e-12)
        assert torch.allclose(autograd(lambda x: pr.label_objective(world, x, labels), theta), count, atol=1e-12)
        frozen = autograd(lambda x: pr.frozen_visitation_objective(world, x, labels), theta)
        assert torch.allclose(pr.moments(world, theta, "step_labels").mean, frozen, atol=1e-12)
        rows = pr.compare(world, theta)
        for e in ("step_labels", "step_labels_to_go"):
            assert rows[e]["bias_share"] > 0.2, f"{e} unbiased?"
            if skilled:  # after a mistake the label credits carrying it on, the outcome cancelling it
                assert rows[e]["cosine_after_mistake"] < -0.5


@pytest.mark.parametrize("name", WORLDS)
def test_a_fixed_completer_labels_the_gradient_of_a_frozen_visitation_objective(name):
    world = world_of(name)
    theta, mu = policy(world, 1, True), policy(world, 4, False)
    q_mu = world.q_values(mu)
    frozen = autograd(lambda x: pr.frozen_visitation_objective(world, x, q_mu), theta)
    got = pr.moments(world, theta, "value_labels", completer=mu).mean
    assert torch.allclose(got, frozen, atol=1e-12)
    assert float((got - world.exact_gradient(theta)).norm()) > 0.1 * float(world.exact_gradient(theta).norm())
    assert torch.allclose(pr.moments(world, theta, "value_labels", completer=theta).mean, world.exact_gradient(theta),
                          atol=1e-12)  # the completer is the policy: Q - V, unbiased


@pytest.mark.parametrize("name", ["three sums mod 3", "two sums mod 4"])
def test_a_prm_that_marks_a_slip_right_cannot_tell_it_from_the_right_step(name):
    """Always slip at the first step, then carry on rightly: as many steps marked right as the perfect
    policy, and never the right answer."""
    world = world_of(name)
    lenient = world.lenient_labels(1, steps=[0])
    perfect = 40.0 * world.labels
    slipping = perfect.clone()
    for i in range(len(world.prompts)):
        s0 = world.state_index[(i, ())]
        slipping[s0] = 0.0
        slipping[s0, (world.prompts[i][0] + 1) % world.modulus] = 40.0
    for theta in (perfect, slipping):
        assert float(pr.label_objective(world, theta, lenient)) == pytest.approx(world.steps, abs=1e-9)
    assert float(world.objective(perfect)) == pytest.approx(1.0, abs=1e-9)
    assert float(world.objective(slipping)) == pytest.approx(0.0, abs=1e-9)
    assert float(pr.label_objective(world, slipping, world.labels)) == pytest.approx(world.steps - 1, abs=1e-9)


def monte_carlo_z(world, theta, estimator, mean, n=20000, seed=0):
    """The largest |z| over the parameters of the sample mean of n single-episode updates against `mean`."""
    (_, ux), (_, uy) = plain_updates(world, theta, estimator)
    per_episode = torch.cat([ux, uy])  # in the world's row order: prompt 0's episodes, then prompt 1's
    rows = world.sample(theta, n, torch.Generator().manual_seed(seed))
    g = per_episode[rows]  # one prompt per draw: E = the mean over prompts, as `moments` has it
    se = g.std(0) / n ** 0.5
    live = se > 1e-12
    return float(((g.mean(0) - mean.flatten()).abs()[live] / se[live]).max())


def test_a_monte_carlo_estimate_agrees_within_its_standard_error():
    world = world_of("three sums mod 3")
    theta = policy(world, 1, skilled=True)
    for estimator in ("outcome", "value_labels", "step_labels_to_go"):
        mean = pr.moments(world, theta, estimator).mean
        assert monte_carlo_z(world, theta, estimator, mean) < 5
    assert monte_carlo_z(world, theta, "value_labels", -pr.moments(world, theta, "value_labels").mean) > 5  # a sign


# ------------------------------------------------------------------ the planted bugs
def test_the_checks_catch_planted_bugs(monkeypatch):
    world = world_of("three sums mod 3")
    theta = policy(world, 1, skilled=True)
    real = pr.weights

    def planted(kind):
        def weights(world_, logits, estimator, labels=None, completer=None):
            w = real(world_, logits, estimator, labels, completer)
            if kind == "sign" and estimator == "value_labels":
                return -w
            if kind == "action baseline" and estimator == "outcome_baseline":  # a baseline that reads the action
                return world_.outcome[:, None] - world_.labels[world_.state, world_.actions]
            if kind == "no to-go" and estimator == "step_labels_to_go":
                return real(world_, logits, "step_labels", labels)
            return w
        return weights

    for kind, estimator in (("sign", "value_labels"), ("action baseline", "outcome_baseline"),
                            ("no to-go", "step_labels_to_go")):
        monkeypatch.setattr(pr, "weights", planted(kind))
        with pytest.raises(AssertionError):
            check_moments(world, theta, estimator)
        if estimator != "step_labels_to_go":
            assert not torch.allclose(pr.moments(world, theta, estimator).mean, world.exact_gradient(theta), atol=1e-6)
    monkeypatch.setattr(pr, "weights", real)
    check_moments(world, theta, "value_labels")


# ------------------------------------------------------------------ expert iteration
def every_batch(mdp, theta, n, normalization, verifier=ei.accepted):
    """Every batch of n completions of each prompt; the SFT step's gradient by autograd of the mean
    log-likelihood of the kept completions (per prompt, or pooled). Returns E[g], E|g - E g|^2."""
    per_prompt = []
    for p in mdp.prompts:
        probs = mdp.completion_probs(theta, p)
        grads = [autograd(lambda x: mdp.log_prob(x, p, c), theta).flatten() for c in mdp.completions]
        keep = [verifier(p, c) for c in mdp.completions]
        batches = []
        for idx in itertools.product(range(len(mdp.completions)), repeat=n):
            prob = float(torch.prod(torch.stack([probs[i] for i in idx])))
            kept = [i for i in idx if keep[i]]
            total = sum((grads[i] for i in kept), torch.zeros_like(grads[0]))
            batches.append((prob, total, len(kept)))
        per_prompt.append(batches)
    (px, sx, kx), (py, sy, ky) = [(torch.tensor([b[0] for b in batches], dtype=torch.float64),
                                   torch.stack([b[1] for b in batches]),
                                   torch.tensor([float(b[2]) for b in batches], dtype=torch.float64))
                                  for batches in per_prompt]
    if normalization == "samples":
        gx, gy = sx / n, sy / n
    else:
        gx, gy = sx / kx.clamp(min=1)[:, None], sy / ky.clamp(min=1)[:, None]  # nothing kept: a zero step
    if normalization == "pooled":  # every pair of batches, one mean over all their kept completions
        g = (sx[:, None, :] + sy[None, :, :]) / (kx[:, None] + ky[None, :]).clamp(min=1)[..., None]
    else:
        g = (gx[:, None, :] + gy[None, :, :]) / 2
    p = px[:, None] * py[None, :]
    mean = torch.einsum("ij,ijd->d", p, g)
    return mean.view(mdp.shape), float(torch.einsum("ij,ij->", p, (g * g).sum(-1)) - mean @ mean)


def check_round(mdp, theta, n, normalization, round_moments=ei.round_moments, verifier=ei.accepted):
    got = round_moments(mdp, theta, n, normalization, verifier)
    mean, variance = every_batch(mdp, theta, n, normalization, verifier)
    assert torch.allclose(got.mean, mean, atol=1e-12)
    assert got.variance == pytest.approx(variance, rel=1e-9, abs=1e-14)


def prompt_success(mdp, theta, prompt):
    """p_x = sum over the prompt's completions of pi(tau) * accepted(tau), summed plainly."""
    return sum(mdp.log_prob(theta, prompt, c).exp() * ei.accepted(prompt, c) for c in mdp.completions)


def skilled_micro(mdp, seed):
    """Random logits with EOS and the goal tokens favoured, so that most prompts' p is not tiny."""
    theta = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    for n, (p, prefix) in enumerate(mdp.states):
        theta[n, mdp.actions.index("b" if p == "x" else "a")] += 1.5 if not prefix else 0.0
        theta[n, mdp.actions.index("<eos>")] += 1.5 if prefix else 0.0
    return theta


def holds_goal(prompt, completion):
    """A looser verifier: the goal token anywhere. At horizon 2 it accepts several completions of a prompt, so
    the kept samples vary (the world's verifier accepts one there)."""
    return float(micro.GOAL[prompt] in completion)


@pytest.mark.parametrize("normalization", ei.NORMALIZATIONS)
def test_a_round_of_expert_iteration_equals_every_batch_written_out(normalization):
    mdp = MicroMDP(horizon=2)
    theta = skilled_micro(mdp, 0)
    for n in (1, 2):
        check_round(mdp, theta, n, normalization)
        check_round(mdp, theta, n, normalization, verifier=holds_goal)


def test_expert_iteration_is_a_policy_gradient_step_with_a_0_1_advantage_and_no_baseline():
    mdp = MicroMDP()
    theta = skilled_micro(mdp, 1)
    grad = autograd(lambda x: ei.success(mdp, x), theta)
    for n in (1, 4):  # divided by N: REINFORCE on the verifier's 0/1, exactly
        assert torch.allclose(ei.round_moments(mdp, theta, n, "samples").mean, grad, atol=1e-12)
    one = ei.round_moments(mdp, theta, 1, "kept")  # one sample: kept or not, the same step
    assert torch.allclose(one.mean, grad, atol=1e-12)
    assert one.variance == pytest.approx(ei.round_moments(mdp, theta, 1, "samples").variance, rel=1e-12)
    n = 3  # divided by the number kept: each prompt's gradient rescaled by (1 - (1 - p)^N) / p
    expected = sum(ei.kept_scale(float(prompt_success(mdp, theta, p)), n)
                   * autograd(lambda x: prompt_success(mdp, x, p), theta) for p in mdp.prompts) / len(mdp.prompts)
    assert torch.allclose(ei.round_moments(mdp, theta, n, "kept").mean, expected, atol=1e-12)
    log_success = autograd(lambda x: sum(prompt_success(mdp, x, p).log() for p in mdp.prompts) / len(mdp.prompts),
                           theta)
    many = ei.round_moments(mdp, theta, 400, "kept").mean  # N large: the gradient of mean log p_x
    assert torch.allclose(many, log_success, atol=1e-6)
    assert not torch.allclose(many / many.norm(), grad / grad.norm(), atol=1e-2)


def test_expert_iteration_against_grpo_on_the_same_samples():
    mdp = MicroMDP()
    theta = skilled_micro(mdp, 2)
    rows = ei.compare(mdp, theta, 4)
    assert set(rows) == {"expert iteration (samples)", "expert iteration (kept)", "expert iteration (pooled)", "GRPO",
                         "GRPO, sequences summed"}
    assert rows["expert iteration (samples)"]["bias_share"] < 1e-9
    assert all(r["relative_variance"] > 0 for r in rows.values())


def test_the_expert_iteration_check_catches_a_missing_normalization():
    mdp = MicroMDP(horizon=2)
    theta = skilled_micro(mdp, 0)

    def planted(mdp_, logits, n, normalization, verifier):  # 'kept' divided by N instead of by the number kept
        return ei.round_moments(mdp_, logits, n, "samples" if normalization == "kept" else normalization, verifier)
    with pytest.raises(AssertionError):
        check_round(mdp, theta, 2, "kept", planted)


# ------------------------------------------------------------------ bad input
def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="same number of digits"):
        pr.StepWorld(((1, 2), (1,)), 3)
    with pytest.raises(ValueError, match="residues modulo 3"):
        pr.StepWorld(((1, 3),), 3)
    with pytest.raises(ValueError, match="modulus must be >= 2"):
        pr.StepWorld(((0,),), 1)
    with pytest.raises(ValueError, match="too many to enumerate"):
        pr.StepWorld(((1,) * 8,), 4)
    with pytest.raises(TypeError, match="a list of prompts"):
        pr.StepWorld("121", 3)
    with pytest.raises(TypeError, match="each prompt is a tuple of digits"):
        pr.StepWorld((1, 2), 3)
    world = world_of("three sums mod 3")
    theta = policy(world, 0, False)
    with pytest.raises(ValueError, match="unknown estimator"):
        pr.moments(world, theta, "process")
    with pytest.raises(ValueError, match="labels are the step labels"):
        pr.moments(world, theta, "outcome", labels=world.labels)
    with pytest.raises(ValueError, match="completer writes the rollouts"):
        pr.moments(world, theta, "step_labels", completer=theta)
    with pytest.raises(ValueError, match=r"completer: a tabular policy's logits have shape \(26, 3\)"):
        pr.moments(world, theta, "value_labels", completer=theta[:3])
    with pytest.raises(TypeError, match="floating-point"):
        pr.moments(world, theta.long(), "outcome")
    with pytest.raises(ValueError, match=r"labels: a table over \(state, token\) has shape \(26, 3\)"):
        pr.moments(world, theta, "step_labels", labels=world.labels[:, :2])
    with pytest.raises(ValueError, match="must be finite"):
        pr.moments(world, theta, "step_labels", labels=torch.full(world.shape, float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="no mistake modulo 3"):
        world.lenient_labels(3)
    with pytest.raises(ValueError, match="steps are numbered 0 ... 2"):
        world.lenient_labels(1, steps=[3])
    mdp = MicroMDP()
    with pytest.raises(ValueError, match="unknown normalization 'kep'; did you mean 'kept'"):
        ei.round_moments(mdp, skilled_micro(mdp, 0), 2, "kep")
    with pytest.raises(ValueError, match="n must be >= 1"):
        ei.round_moments(mdp, skilled_micro(mdp, 0), 0)
    with pytest.raises(ValueError, match="must answer 0 or 1"):
        ei.round_moments(mdp, skilled_micro(mdp, 0), 2, verifier=lambda p, c: 0.5)
