"""Losses: surrogate gradient = estimator (on the micro world), aggregation modes against loops,
value clipping by hand, SFT on response tokens only."""
import pytest
import torch

from minirl import losses
from minirl.mdp import MicroMDP


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
