"""Losses: surrogate gradient = estimator (on the micro world), aggregation modes against loops,
value clipping by hand, SFT on response tokens only."""
import math

import pytest
import torch

from minirl import losses
from minirl.exact.mdp import MicroMDP


def test_surrogate_gradient_equals_the_hand_written_estimator():
    """Autograd of the REINFORCE surrogate on sampled episodes = (1/N) sum R(tau) grad log pi(tau)."""
    mdp = MicroMDP()
    logits = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    episodes = mdp.sample(logits, 64, torch.Generator().manual_seed(1))
    T = max(len(c) for _, c in episodes)
    theta = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, dim=-1)
    rows, mask, adv = [], torch.zeros(len(episodes), T, dtype=torch.float64), torch.zeros(len(episodes), T, dtype=torch.float64)
    for i, (p, c) in enumerate(episodes):
        steps = mdp.steps(p, c)
        rows.append(torch.stack([logp[s, a] for s, a in steps] + [logp.new_zeros(())] * (T - len(steps))))
        mask[i, : len(steps)] = 1
        adv[i, : len(steps)] = mdp.discounted_return(p, c)  # total return on every token
    losses.policy_gradient_loss(torch.stack(rows), adv, mask).backward()
    estimator = torch.stack([mdp.discounted_return(p, c) * mdp.score(logits, p, c) for p, c in episodes]).mean(0)
    assert torch.allclose(-theta.grad, estimator, atol=1e-12)


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    return x, mask


def loop_aggregate(x, mask, mode, max_len=None):
    rows = [[float(v) for v, m in zip(xr, mr) if m] for xr, mr in zip(x, mask)]
    if mode == "sequence_sum":
        return sum(sum(r) for r in rows) / len(rows)
    if mode == "sequence_mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if mode == "token_mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) for r in rows) / (len(rows) * (max_len or x.shape[1]))


@pytest.mark.parametrize("mode", losses.AGGREGATIONS)
def test_aggregations_match_loops(batch, mode):
    x, mask = batch
    assert losses.aggregate(x, mask, mode).item() == pytest.approx(loop_aggregate(x, mask, mode), abs=1e-12)
    assert losses.aggregate(x, mask, "constant", max_len=8).item() == pytest.approx(loop_aggregate(x, mask, "constant", 8))


def test_sequence_level_advantages_broadcast(batch):
    x, mask = batch
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    assert torch.equal(losses.policy_gradient_loss(x, adv, mask), losses.policy_gradient_loss(x, adv[:, None].expand_as(x), mask))


def test_value_loss_clipping_by_hand():
    mask = torch.ones(1, 4, dtype=torch.float64)
    old = torch.tensor([[0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    new = torch.tensor([[0.5, 0.1, -0.5, 0.3]], dtype=torch.float64)
    ret = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    # clip 0.2: clipped values [0.2, 0.1, -0.2, 0.2]
    # errors^2 unclipped [0.25, 0.81, 0.25, 1.69], clipped [0.64, 0.81, 0.64, 1.44]; max -> [0.64, 0.81, 0.64, 1.69]
    got = losses.value_loss(new, ret, mask, old_values=old, clip_range=0.2)
    assert got.item() == pytest.approx(0.5 * (0.64 + 0.81 + 0.64 + 1.69) / 4)
    assert losses.value_loss(new, ret, mask).item() == pytest.approx(0.5 * (0.25 + 0.81 + 0.25 + 1.69) / 4)
    with pytest.raises(ValueError, match="old_values"):
        losses.value_loss(new, ret, mask, clip_range=0.2)


def test_sft_loss_counts_response_tokens_only():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, 7, (2, 4), generator=g)
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 0]], dtype=torch.float64)  # prompt first, padding last
    logp = torch.log_softmax(logits, -1)
    picked = [-float(logp[i, t, tokens[i, t]]) for i in range(2) for t in range(4) if mask[i, t]]
    assert losses.sft_loss(logits, tokens, mask).item() == pytest.approx(sum(picked) / len(picked))


def test_bad_input_is_a_clear_error(batch):
    x, mask = batch
    empty = mask.clone()
    empty[2] = 0
    with pytest.raises(ValueError, match="all zeros"):
        losses.policy_gradient_loss(x, x, empty)
    with pytest.raises(ValueError, match="does not match"):
        losses.policy_gradient_loss(x, x[:, :2], mask)
    with pytest.raises(ValueError, match="unknown aggregation"):
        losses.aggregate(x, mask, "mean")


def test_ppo_clip_loss_each_branch_by_hand():
    # ratios e^{logp - old}: 1.5, 0.5, 1.1, 0.7 with eps 0.2; advantages +1, +1, -1, -1
    old = torch.zeros(1, 4, dtype=torch.float64)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.7]], dtype=torch.float64))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.float64)
    loss, diag = losses.ppo_clip_loss(new, old, adv, mask, clip_eps=0.2)
    # per token min(r A, clip(r) A): A>0,r=1.5 -> 1.2 (clipped); A>0,r=0.5 -> 0.5 (unclipped, pessimistic);
    # A<0,r=1.1 -> -1.1 (inside); A<0,r=0.7 -> min(-0.7, -0.8) = -0.8 (clipped)
    assert loss.item() == pytest.approx(-(1.2 + 0.5 - 1.1 - 0.8) / 4)
    assert diag["clip_fraction"] == pytest.approx(3 / 4)  # 1.5, 0.5 and 0.7 lie outside [0.8, 1.2]
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.7], dtype=torch.float64)
    assert diag["approx_kl"] == pytest.approx(((ratio - 1) - ratio.log()).mean().item())


def test_ppo_at_ratio_one_has_the_policy_gradient():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    a = logp.clone().requires_grad_(True)
    losses.ppo_clip_loss(a, logp.clone(), adv, mask)[0].backward()
    b = logp.clone().requires_grad_(True)
    losses.policy_gradient_loss(b, adv, mask, aggregation="token_mean").backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-12)


def test_ppo_gradient_vanishes_where_clipping_binds():
    old = torch.zeros(1, 2, dtype=torch.float64)
    new = torch.log(torch.tensor([[1.5, 0.5]], dtype=torch.float64)).requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0]], dtype=torch.float64)  # both pushed past the clip in their favoured direction
    losses.ppo_clip_loss(new, old, adv, torch.ones(1, 2, dtype=torch.float64))[0].backward()
    assert new.grad.abs().max().item() == 0.0


def test_ppo_clip_loss_matches_rlax_published_values():
    """google-deepmind/rlax, rlax/_src/policy_gradients_test.py, ClippedSurrogatePGLossTest: three
    one-step episodes with logits over 3 actions, eps 0.2, advantages (0.3, 0.2, 0.1) and their
    negatives; rlax's loss is -mean_t min(r A, clip(r) A) = -0.17117467 and 0.19333333.
    Re-derived: rows 0-1 have ratio 1; row 2's ratio is softmax(-1,-2,-3)[2] / softmax(-3,-2,-1)[2]
    = e^-2 = 0.1353, clipped to 0.8 only where the advantage is negative."""
    logits = torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, 0.0], [-1.0, -2.0, -3.0]], dtype=torch.float64)
    old_logits = torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, 0.0], [-3.0, -2.0, -1.0]], dtype=torch.float64)
    actions = torch.tensor([0, 1, 2])
    logp = torch.log_softmax(logits, -1)[torch.arange(3), actions][None]  # (1, 3): one row of 3 tokens
    old = torch.log_softmax(old_logits, -1)[torch.arange(3), actions][None]
    adv = torch.tensor([[0.3, 0.2, 0.1]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    # rlax computes in float32 and asserts at atol 1e-4; the exact value is (0.5 + 0.1 e^-2) / 3
    assert losses.ppo_clip_loss(logp, old, adv, mask)[0].item() == pytest.approx(-0.17117467, abs=1e-5)
    assert losses.ppo_clip_loss(logp, old, adv, mask)[0].item() == pytest.approx(-(0.5 + 0.1 * math.exp(-2)) / 3, abs=1e-12)
    assert losses.ppo_clip_loss(logp, old, -adv, mask)[0].item() == pytest.approx(0.19333333, abs=1e-7)


def test_ppo_diagnostics_count_action_tokens_only():
    """Two real tokens with ratios 1.5 and 1.1 and two of padding: the clip fraction is 1/2 and the
    approximate KL the mean of k3 over the two real tokens, not over all four."""
    new = torch.log(torch.tensor([[1.5, 1.1, 9.0, 9.0]], dtype=torch.float64))
    old = torch.zeros(1, 4, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    _, diag = losses.ppo_clip_loss(new, old, torch.ones(1, 4, dtype=torch.float64), mask, clip_eps=0.2)
    assert diag["clip_fraction"] == pytest.approx(1 / 2)
    ratio = torch.tensor([1.5, 1.1], dtype=torch.float64)
    assert diag["approx_kl"] == pytest.approx(((ratio - 1) - ratio.log()).mean().item(), abs=1e-12)


def loop_grpo_loss(logp, old, ref, adv, mask, eps, beta, mode, max_len=None, eps_high=None):
    """GRPO's loss token by token in float64 Python floats (the plain second implementation)."""
    rows = []
    for i in range(len(logp)):
        row = []
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            r = math.exp(logp[i][t] - old[i][t])
            a = adv[i]
            surrogate = min(r * a, min(max(r, 1 - eps), 1 + (eps if eps_high is None else eps_high)) * a)
            q_over_p = math.exp(ref[i][t] - logp[i][t])
            row.append(-surrogate + beta * (q_over_p - 1 - math.log(q_over_p)))
        rows.append(row)
    if mode == "sequence_mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if mode == "token_mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) for r in rows) / (len(rows) * max_len)


@pytest.fixture
def grpo_batch():
    g = torch.Generator().manual_seed(3)
    B, T = 6, 5
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)  # ratios on both sides of the clip
    ref = logp + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("mode", ["sequence_mean", "token_mean", "constant"])
def test_grpo_loss_matches_loop(grpo_batch, mode):
    logp, old, ref, adv, mask = grpo_batch
    got, diag = losses.grpo_loss(logp, old, ref, adv, mask, clip_eps=0.2, beta=0.04, aggregation=mode, max_len=8)
    want = loop_grpo_loss(logp.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.04, mode, 8)
    assert got.item() == pytest.approx(want, abs=1e-12)
    assert 0 < diag["clip_fraction"] < 1


def test_grpo_loss_clip_higher_matches_loop(grpo_batch):
    """DAPO's clip-higher: eps_high = 0.28 above, eps = 0.2 below; the loss and clip fraction move."""
    logp, old, ref, adv, mask = grpo_batch
    got, diag = losses.grpo_loss(logp, old, ref, adv, mask, clip_eps=0.2, clip_eps_high=0.28, aggregation="token_mean")
    want = loop_grpo_loss(logp.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.04,
                          "token_mean", eps_high=0.28)
    symmetric, sym_diag = losses.grpo_loss(logp, old, ref, adv, mask, clip_eps=0.2, aggregation="token_mean")
    assert got.item() == pytest.approx(want, abs=1e-12)
    assert abs(got.item() - symmetric.item()) > 1e-5 and diag["clip_fraction"] < sym_diag["clip_fraction"]


def poisoned(x, mask, value):
    """x with `value` (inf or NaN) written on its padding."""
    return torch.where(mask.bool(), x, torch.full_like(x, value))


LOSSES = {
    "policy_gradient": lambda lp, o, r, a, m: losses.policy_gradient_loss(lp, a, m),
    "ppo_clip": lambda lp, o, r, a, m: losses.ppo_clip_loss(lp, o, a, m)[0],
    "grpo": lambda lp, o, r, a, m: losses.grpo_loss(lp, o, r, a[:, 0], m, beta=0.1)[0],
    "value": lambda lp, o, r, a, m: losses.value_loss(lp, a, m, old_values=o, clip_range=0.2),
    "sft": lambda lp, o, r, a, m: losses.aggregate(lp, m, "token_mean"),
}


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("name", LOSSES)
def test_junk_on_padding_reaches_neither_loss_nor_gradient(grpo_batch, name, value):
    """inf or NaN on the padding of *every* input (the one differentiated included) leaves the loss
    and its gradient exactly as with zeros there; the gradient on padding is 0."""
    logp, old, ref, adv, mask = grpo_batch
    per_token_adv = adv[:, None].expand_as(logp).clone()

    def loss_and_grad(fill):
        x = fill(logp).requires_grad_(True)
        loss = LOSSES[name](x, fill(old), fill(ref), fill(per_token_adv), mask)
        loss.backward()
        return loss.item(), x.grad

    clean_loss, clean_grad = loss_and_grad(lambda t: t.clone())
    loss, grad = loss_and_grad(lambda t: poisoned(t, mask, value))
    assert loss == clean_loss and torch.equal(grad, clean_grad)
    assert torch.isfinite(grad).all() and grad[mask == 0].eq(0).all()


def test_grpo_at_ratio_one_without_kl_has_the_policy_gradient(grpo_batch):
    """At the first inner step (old = current) the clip is inactive; with beta 0 the gradient is
    the sequence-mean policy gradient, although the loss value is the mean advantage (about 0 for
    group-normalized advantages)."""
    logp, _, ref, adv, mask = grpo_batch
    a = logp.clone().requires_grad_(True)
    loss, _ = losses.grpo_loss(a, logp.clone(), ref, adv, mask, beta=0.0)
    loss.backward()
    b = logp.clone().requires_grad_(True)
    losses.policy_gradient_loss(b, adv, mask, aggregation="sequence_mean").backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-12)
    assert loss.item() == pytest.approx(-adv.mean().item(), abs=1e-12)


def test_grpo_kl_term_pulls_towards_the_reference(grpo_batch):
    """The k3 term's gradient in log pi_theta is 1 - pi_ref/pi_theta: positive (push down) where the
    policy puts more mass than the reference on the sampled token, negative where less."""
    logp, _, ref, _, mask = grpo_batch
    a = logp.clone().requires_grad_(True)
    losses.grpo_loss(a, logp.clone(), ref, torch.zeros(len(logp), dtype=torch.float64), mask, beta=1.0,
                     aggregation="token_mean")[0].backward()
    expected = (1 - torch.exp(ref - logp)) * mask / mask.sum()
    assert torch.allclose(a.grad, expected, atol=1e-12)
