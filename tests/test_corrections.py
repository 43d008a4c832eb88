"""Importance weights for off-policy tokens (minirl.core.corrections), GSPO's and CISPO's losses, and the
GRPO trainer's stale rollouts and corrections."""
import dataclasses
import math

import pytest
import torch

import minirl
from minirl.core import corrections, losses
from minirl.train.grpo import GRPOConfig, old_logprobs_and_weights, stale_batches, train_grpo
from minirl.world import tasks

# two rows: three tokens, then two and padding (NaN there must not leak)
LOG_PI = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.6, 0.3, float("nan")]], dtype=torch.float64))
LOG_MU = torch.log(torch.tensor([[0.25, 0.4, 0.3], [0.2, 0.6, 0.5]], dtype=torch.float64))
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
RHO = [[2.0, 0.5, 3.0], [3.0, 0.5]]  # pi / mu by hand
SEQ = [3.0, 1.5]  # their products


def by_hand(mode, cap):
    rows = []
    for rho, seq in zip(RHO, SEQ):
        if mode == "token_truncate":
            w = [min(x, cap) for x in rho]
        elif mode == "token_mask":
            w = [x if x <= cap else 0.0 for x in rho]
        elif mode == "sequence_truncate":
            w = [min(seq, cap)] * len(rho)
        else:
            w = [seq if seq <= cap else 0.0] * len(rho)
        rows.append(w + [0.0] * (3 - len(w)))
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("mode", corrections.CORRECTIONS)
@pytest.mark.parametrize("cap", [1.0, 2.0, 2.5, math.inf])
def test_importance_weights_by_hand(mode, cap):
    """Ratios below 1 pass untouched under every cap; sequence modes weigh every token of a row by
    the row's product of ratios (3 = 2 * 0.5 * 3), not by its own."""
    w = corrections.importance_weights(LOG_PI.clone().requires_grad_(True), LOG_MU, MASK, mode, cap)
    assert torch.allclose(w, by_hand(mode, cap), atol=1e-12) and not w.requires_grad  # a weight, not a path


def test_a_cap_below_one_is_refused_and_the_mode_named():
    with pytest.raises(ValueError, match="cap must be >= 1"):
        corrections.importance_weights(LOG_PI, LOG_MU, MASK, "token_truncate", 0.8)
    with pytest.raises(ValueError, match="did you mean 'token_mask'"):
        corrections.importance_weights(LOG_PI, LOG_MU, MASK, "token_masked", 2.0)
    with pytest.raises(ValueError, match="weight_cap must be a number >= 1"):
        losses.cispo_loss(LOG_PI, LOG_MU, torch.ones(2), MASK, weight_cap=0.5)
    with pytest.raises(ValueError, match="correction_cap must be a number >= 1"):
        GRPOConfig(correction_cap=0.9)


def test_geometric_sequence_ratio_is_the_mean_log_ratio():
    s = corrections.geometric_sequence_ratio(LOG_PI, LOG_MU, MASK)
    assert torch.allclose(s, torch.tensor([3.0 ** (1 / 3), 1.5 ** (1 / 2)], dtype=torch.float64), atol=1e-12)


def test_gspo_and_cispo_gradients_on_policy_are_grpos_and_dapos():
    """At ratio 1, GSPO's gradient is GRPO's under sequence_mean and CISPO's is the token-mean policy
    gradient; off-policy GSPO's is s_i A_i times the mean score, by hand."""
    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 5, generator=gen, dtype=torch.float64).clamp(max=-0.1)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    a = torch.tensor([1.0, -0.5, 0.3, -0.8], dtype=torch.float64)

    def grad(fn):
        x = logp.clone().requires_grad_(True)
        fn(x).backward()
        return x.grad

    old = logp.detach()
    gspo = grad(lambda x: losses.gspo_loss(x, old, a, mask)[0])
    grpo = grad(lambda x: losses.grpo_loss(x, old, old, a, mask, beta=0.0, aggregation="sequence_mean")[0])
    cispo = grad(lambda x: losses.cispo_loss(x, old, a, mask)[0])
    pg = grad(lambda x: losses.policy_gradient_loss(x, a, mask, aggregation="token_mean"))
    assert torch.allclose(gspo, grpo, atol=1e-14) and torch.allclose(cispo, pg, atol=1e-14)
    stale = old - 0.05 * mask  # pi_old lower by 0.05 per token: s_i = e^0.05, inside no clip of 0.2
    gspo = grad(lambda x: losses.gspo_loss(x, stale, a, mask, clip_eps=0.2, clip_eps_high=0.2)[0])
    lengths = mask.sum(1, keepdim=True)
    assert torch.allclose(gspo, -math.exp(0.05) * a[:, None] * mask / lengths / 4, atol=1e-14)


def test_stale_batches_hand_out_each_batch_k_updates_after_it_was_sampled():
    """A lazy sampler that records the policy version it sampled with; the consumer updates after
    each batch. Batch j is sampled by version max(0, j - k) and trained on at update j."""
    for k in (0, 1, 3):
        version = [0]

        def sampler():
            for step in range(7):
                yield step, version[0]

        seen = []
        for step, sampled_by in stale_batches(sampler(), k):
            seen.append((step, sampled_by))
            version[0] += 1
        assert seen == [(j, max(0, j - k)) for j in range(7)], k


def test_corrections_agree_on_a_fresh_batch_and_differ_on_a_stale_one():
    logp = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.2]]))
    mask = torch.ones(2, 2)
    for correction in ("ppo_clip", "none", "token_truncate", "sequence_mask"):
        config = GRPOConfig(correction=correction)
        old, w = old_logprobs_and_weights(logp, logp, mask, config)
        assert torch.equal(old, logp) and (w is None or torch.allclose(w, torch.ones(2, 2)))
    stale = torch.log(torch.tensor([[0.25, 0.4], [0.3, 0.4]]))
    old, w = old_logprobs_and_weights(logp, stale, mask, GRPOConfig(correction="token_truncate", correction_cap=1.5))
    assert torch.equal(old, logp) and torch.allclose(w, torch.tensor([[1.5, 1.0], [1.0, 0.5]]))
    old, w = old_logprobs_and_weights(logp, stale, mask, GRPOConfig(correction="ppo_clip"))
    assert torch.equal(old, stale) and w is None


def test_grpo_trains_on_stale_rollouts_with_a_correction():
    """Batch 0 is fresh, batches 1 and 2 one update stale; the correction changes the loss only on
    stale batches (the same seed samples the same first batches)."""
    config = GRPOConfig(steps=3, prompts_per_step=2, group_size=4, stale_steps=1, correction="token_truncate",
                        correction_cap=1.0, clip_eps_high=0.28)
    history = train_grpo(minirl.load_model("base"), tasks.arithmetic_task(), config)
    plain = train_grpo(minirl.load_model("base"), tasks.arithmetic_task(), dataclasses.replace(config, correction="none"))
    assert history[0]["sampler_kl"] == pytest.approx(0.0, abs=1e-6)  # the first batch is fresh
    assert history[1]["sampler_kl"] > 1e-6 and history[2]["sampler_kl"] > 1e-6  # sampled one update ago
    assert history[0]["loss_first"] == pytest.approx(plain[0]["loss_first"], abs=1e-6)
    assert history[1]["loss_first"] != pytest.approx(plain[1]["loss_first"], abs=1e-6)  # capped at 1: weights < 1 bite
    with pytest.raises(ValueError, match="stale_steps"):
        GRPOConfig(steps=3, stale_steps=3)
    with pytest.raises(ValueError, match="correction"):
        GRPOConfig(correction="tis")
