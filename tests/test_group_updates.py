"""The exact moments of the GRPO family's updates (minirl.exact.group_updates), against exact math,
a brute-force enumeration of every batch of completions written plainly, and the gradients of the
package's own losses on sampled batches."""
import itertools
import math

import pytest
import torch

from minirl.core import advantages as adv
from minirl.core import losses
from minirl.exact import micro
from minirl.exact.group_updates import FAMILY, Estimator, moments
from minirl.exact.mdp import MicroMDP

STALE = {
    **FAMILY,
    "token IS, RLOO": Estimator("leave_one_out", "sequence_sum", "token"),
    "sequence IS, RLOO": Estimator("leave_one_out", "sequence_sum", "sequence"),
    "token truncate": Estimator("leave_one_out", "sequence_sum", "token_truncate", cap=1.1),
    "token mask": Estimator("group_std", "token_mean", "token_mask", cap=1.1),
    "sequence truncate": Estimator("leave_one_out", "sequence_sum", "sequence_truncate", cap=1.2),
    "sequence mask": Estimator("group_mean", "constant", "sequence_mask", cap=1.2),
    "GSPO wide clip": Estimator("group_std", "sequence_sum", "geometric", clip_eps=0.05),
    "PPO clip narrow": Estimator("group_std", "sequence_mean", "ppo_clip", clip_eps=0.05),
}


def policy(mdp, seed, scale=0.7):
    return torch.randn(mdp.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


# ------------------------------------------------------------------ a plain second implementation
def token_weights(est, log_rho, advantage):
    """w_t for one completion, written out case by case."""
    rho = [math.exp(x) for x in log_rho]
    high = est.clip_eps if est.clip_eps_high is None else est.clip_eps_high
    seq = math.exp(sum(log_rho))
    if est.ratio == "none":
        return [1.0] * len(rho)
    if est.ratio == "token":
        return rho
    if est.ratio == "ppo_clip":
        return [0.0 if (advantage > 0 and x > 1 + high) or (advantage < 0 and x < 1 - est.clip_eps) else x for x in rho]
    if est.ratio == "geometric":
        s = math.exp(sum(log_rho) / len(rho))
        clipped = (advantage > 0 and s > 1 + high) or (advantage < 0 and s < 1 - est.clip_eps)
        return [0.0 if clipped else s / len(rho)] * len(rho)
    if est.ratio == "sequence":
        return [seq] * len(rho)
    if est.ratio == "token_truncate":
        return [min(x, est.cap) for x in rho]
    if est.ratio == "token_mask":
        return [x if x <= est.cap else 0.0 for x in rho]
    if est.ratio == "sequence_truncate":
        return [min(seq, est.cap)] * len(rho)
    return [seq if seq <= est.cap else 0.0] * len(rho)  # sequence_mask


def plain_update(mdp, logits, behaviour, est, batch):
    """g for one batch [(prompt, completion)] * 2G, groups consecutive, straight from the definitions."""
    log_pi, log_mu = torch.log_softmax(logits, -1), torch.log_softmax(behaviour, -1)
    pi = log_pi.exp()
    r = torch.tensor([micro.total_reward(p, c) for p, c in batch], dtype=torch.float64)
    lengths = [len(c) for _, c in batch]
    a = advantages_of(est, r, len(batch) // 2)
    count = {"sequence_sum": [len(batch)] * len(batch), "sequence_mean": [len(batch) * n for n in lengths],
             "token_mean": [sum(lengths)] * len(batch), "constant": [len(batch) * mdp.horizon] * len(batch)}[est.aggregation]
    g = torch.zeros_like(logits)
    for (p, c), a_i, n in zip(batch, a.tolist(), count):
        steps = mdp.steps(p, c)
        w = token_weights(est, [float(log_pi[s, t] - log_mu[s, t]) for s, t in steps], a_i)
        for (s, t), w_t in zip(steps, w):
            g[s] -= a_i / n * w_t * pi[s]
            g[s, t] += a_i / n * w_t
    return g


def advantages_of(est, r, group_size):
    """Advantages of batches r (..., B) of consecutive groups, from minirl.advantages (batch_std:
    divided by each batch's std)."""
    flat = r.reshape(-1)
    if est.advantage == "group_std":
        return adv.group_normalize(flat, group_size).view_as(r)
    if est.advantage == "leave_one_out":
        return adv.leave_one_out(flat, group_size).view_as(r)
    centred = adv.group_normalize(flat, group_size, scale=False).view_as(r)
    return centred if est.advantage == "group_mean" else centred / (centred.std(-1, keepdim=True) + 1e-4)


def brute_force(mdp, logits, behaviour, est, reward_of=micro.total_reward):
    """Mean and variance of the update over every ordered batch of groups of 2, weighted by mu's
    probabilities: each completion's weighted score f (for either sign of its advantage) from
    token_weights, each batch's coefficients from the definitions, all batches at once."""
    log_pi, log_mu = torch.log_softmax(logits, -1), torch.log_softmax(behaviour, -1)
    pi, n = log_pi.exp(), len(mdp.completions)
    f = torch.zeros(2, 2, n, logits.numel(), dtype=torch.float64)  # (sign, prompt, completion, D)
    for k, sign in enumerate((1.0, -1.0)):
        for j, p in enumerate(mdp.prompts):
            for i, c in enumerate(mdp.completions):
                steps = mdp.steps(p, c)
                w = token_weights(est, [float(log_pi[s, t] - log_mu[s, t]) for s, t in steps], sign)
                score = torch.zeros_like(logits)
                for (s, t), w_t in zip(steps, w):
                    score[s] -= w_t * pi[s]
                    score[s, t] += w_t
                f[k, j, i] = score.flatten()
    idx = torch.tensor(list(itertools.product(range(n), repeat=4)))  # (N, 4): x, x, y, y
    prompt = torch.tensor([0, 0, 1, 1]).expand_as(idx)
    reward = torch.tensor([[reward_of(p, c) for c in mdp.completions] for p in mdp.prompts],
                          dtype=torch.float64)[prompt, idx]
    length = torch.tensor([len(c) for c in mdp.completions], dtype=torch.float64)[idx]
    prob = torch.stack([mdp.completion_probs(log_mu, p) for p in mdp.prompts])[prompt, idx].prod(1)
    a = advantages_of(est, reward, 2)  # (N, 4)
    count = {"sequence_sum": torch.full_like(length, 4.0), "sequence_mean": 4 * length,
             "token_mean": length.sum(1, keepdim=True).expand_as(length),
             "constant": torch.full_like(length, 4.0 * mdp.horizon)}[est.aggregation]
    g = ((a / count)[..., None] * f[(a < 0).long(), prompt, idx]).sum(1)  # (N, D)
    mean = (prob[:, None] * g).sum(0)
    return mean.view(mdp.shape), float((prob * (g * g).sum(1)).sum()) - float((mean * mean).sum())


# ------------------------------------------------------------------ exact math
@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_unbiased_members_have_the_scale_exact_math_gives(group_size):
    mdp, logits = MicroMDP(), policy(MicroMDP(), 1)
    exact = mdp.exact_gradient(logits)
    g = group_size
    expected = {  # RLOO is unbiased; a mean baseline that includes the sample shrinks by (G - 1) / G
        Estimator("leave_one_out", "sequence_sum"): 1.0,
        Estimator("group_mean", "sequence_sum"): (g - 1) / g,
        Estimator("group_mean", "constant"): (g - 1) / g / mdp.horizon,  # Dr. GRPO
    }
    for est, scale in expected.items():
        report = moments(mdp, logits, est, g).against(exact)
        assert report["scale"] == pytest.approx(scale, abs=1e-12)
        assert report["bias_share"] < 1e-10 and report["cosine"] == pytest.approx(1.0, abs=1e-12)


def test_importance_sampling_the_whole_sequence_removes_staleness_bias():
    """Exact math: E_mu[prod rho * score] = E_pi[score], so the full sequence ratio is unbiased under
    any behaviour policy; token ratios (PPO's, without the clip) are not: they ignore that mu reached
    each state with another probability."""
    mdp = MicroMDP()
    logits, behaviour = policy(mdp, 2), policy(mdp, 3)
    exact = mdp.exact_gradient(logits)
    sequence = moments(mdp, logits, Estimator("leave_one_out", "sequence_sum", "sequence"), 4, behaviour).against(exact)
    token = moments(mdp, logits, Estimator("leave_one_out", "sequence_sum", "token"), 4, behaviour).against(exact)
    stale = moments(mdp, logits, Estimator("leave_one_out", "sequence_sum", "none"), 4, behaviour).against(exact)
    assert sequence["scale"] == pytest.approx(1.0, abs=1e-10) and sequence["bias_share"] < 1e-10
    assert token["bias_share"] > 0.01 and stale["bias_share"] > 0.01
    for report in (token, stale):  # the bias share is the tangent of the angle whose cosine is reported
        assert report["bias_share"] == pytest.approx(math.tan(math.acos(report["cosine"])), rel=1e-9)


def test_gspo_and_cispo_equal_grpo_and_dapo_on_policy():
    mdp, logits = MicroMDP(), policy(MicroMDP(), 4)
    for a, b in (("GSPO", "GRPO"), ("CISPO", "DAPO")):
        ma, mb = moments(mdp, logits, FAMILY[a], 3), moments(mdp, logits, FAMILY[b], 3)
        assert torch.allclose(ma.mean, mb.mean, atol=1e-14) and ma.variance == pytest.approx(mb.variance, rel=1e-12)


# ------------------------------------------------------------------ brute force
@pytest.mark.parametrize("name", list(STALE))
def test_moments_equal_a_brute_force_enumeration_of_every_batch(name):
    """Horizon 2 (13 completions a prompt), groups of 2: all 13^4 ordered batches, each update
    written from the definitions, against the enumeration over types that `moments` does."""
    mdp = MicroMDP(horizon=2)
    logits, behaviour = policy(mdp, 5), policy(mdp, 6, scale=0.9)
    got = moments(mdp, logits, STALE[name], 2, behaviour)
    mean, variance = brute_force(mdp, logits, behaviour, STALE[name])
    assert torch.allclose(got.mean, mean, atol=1e-12)
    assert got.variance == pytest.approx(variance, rel=1e-9)


# ------------------------------------------------------------------ the package's losses
def tabular_logprobs(mdp, logits, batch):
    """(B, K) log pi of each batch token under a tabular policy, with its mask."""
    logp = torch.log_softmax(logits, -1)
    rows, mask = torch.zeros(len(batch), mdp.horizon, dtype=logits.dtype), torch.zeros(len(batch), mdp.horizon)
    for i, (p, c) in enumerate(batch):
        for t, (s, a) in enumerate(mdp.steps(p, c)):
            rows = rows.index_put((torch.tensor(i), torch.tensor(t)), logp[s, a])
            mask[i, t] = 1
    return rows, mask


LOSSES = {  # estimator -> the package's loss with its settings, returning -gradient's surrogate
    "GRPO": lambda lp, old, a, m, k: losses.grpo_loss(lp, old, old, a, m, beta=0.0, aggregation="sequence_mean")[0],
    "DAPO": lambda lp, old, a, m, k: losses.grpo_loss(lp, old, old, a, m, beta=0.0, aggregation="token_mean",
                                                      clip_eps_high=0.28)[0],
    "Dr. GRPO": lambda lp, old, a, m, k: losses.grpo_loss(lp, old, old, a, m, beta=0.0, aggregation="constant",
                                                          max_len=k)[0],
    "GSPO": lambda lp, old, a, m, k: losses.gspo_loss(lp, old, a, m)[0],
    "CISPO": lambda lp, old, a, m, k: losses.cispo_loss(lp, old, a, m, weight_cap=5.0)[0],
    "RLOO": lambda lp, old, a, m, k: losses.policy_gradient_loss(lp, a, m, aggregation="sequence_sum"),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_one_batch_update_is_the_gradient_of_the_package_loss(name):
    """On sampled stale batches, -grad of minirl's loss (pi_old = the behaviour policy) equals the
    plain update the enumeration averages."""
    mdp = MicroMDP()
    logits, behaviour = policy(mdp, 7), policy(mdp, 7) + 0.3 * policy(mdp, 8)
    est = FAMILY[name]
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        batch = []
        for p in mdp.prompts:  # one group of 4 of each prompt, from mu
            group = []
            while len(group) < 4:
                e = mdp.sample(behaviour, 1, gen)[0]
                if e[0] == p:
                    group.append(e)
            batch += group
        theta = logits.clone().requires_grad_(True)
        lp, mask = tabular_logprobs(mdp, theta, batch)
        old, _ = tabular_logprobs(mdp, behaviour, batch)
        r = torch.tensor([micro.total_reward(p, c) for p, c in batch], dtype=torch.float64)
        a = advantages_of(est, r, 4)
        LOSSES[name](lp, old.detach(), a, mask, mdp.horizon).backward()
        expected = plain_update(mdp, logits, behaviour if est.ratio != "none" else logits, est, batch)
        assert torch.allclose(-theta.grad, expected, atol=1e-12), name
