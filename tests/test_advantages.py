"""Returns and GAE against plain float64 loops and against tianshou's published values."""
import pytest
import torch

from minirl import advantages
from minirl.advantages import gae, prompt_mean_baseline, reward_to_go


def loop_reward_to_go(rewards, lengths, gamma):
    out = []
    for row, n in zip(rewards, lengths):
        row = [float(x) for x in row[:n]]
        out.append([sum(gamma ** (j - t) * row[j] for j in range(t, n)) for t in range(n)])
    return out


def loop_gae(rewards, values, lengths, gamma, lam):
    adv_rows = []
    for r, v, n in zip(rewards, values, lengths):
        r, v = [float(x) for x in r[:n]], [float(x) for x in v[:n]]
        deltas = [r[t] + gamma * (v[t + 1] if t + 1 < n else 0.0) - v[t] for t in range(n)]
        adv_rows.append([sum((gamma * lam) ** (j - t) * deltas[j] for j in range(t, n)) for t in range(n)])
    return adv_rows


def padded(rows, T):
    x = torch.zeros(len(rows), T, dtype=torch.float64)
    m = torch.zeros(len(rows), T, dtype=torch.float64)
    for i, row in enumerate(rows):
        x[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
        m[i, : len(row)] = 1
    return x, m


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    lengths = [5, 3, 1, 5]
    rewards = torch.randn(4, 5, generator=g, dtype=torch.float64)
    values = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1.0] * n + [0.0] * (5 - n) for n in lengths], dtype=torch.float64)
    rewards[mask == 0] = 99.0  # garbage on padding must not leak in
    values[mask == 0] = -99.0
    return rewards, values, mask, lengths


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.0])
def test_reward_to_go_matches_loop(batch, gamma):
    rewards, _, mask, lengths = batch
    got = reward_to_go(rewards, mask, gamma)
    want, _ = padded(loop_reward_to_go(rewards, lengths, gamma), 5)
    assert torch.allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0), (1.0, 0.5)])
def test_gae_matches_loop(batch, gamma, lam):
    rewards, values, mask, lengths = batch
    adv, ret = gae(rewards, values, mask, gamma, lam)
    want, _ = padded(loop_gae(rewards, values, lengths, gamma, lam), 5)
    assert torch.allclose(adv, want, atol=1e-12)
    assert torch.allclose(ret, (want + values * mask) * mask, atol=1e-12)


def test_gae_with_lambda_one_is_reward_to_go_minus_value(batch):
    rewards, values, mask, _ = batch
    adv, _ = gae(rewards, values, mask, gamma=0.9, lam=1.0)
    assert torch.allclose(adv, (reward_to_go(rewards, mask, 0.9) - values) * mask, atol=1e-12)


# tianshou, test/base/test_returns.py (thu-ml/tianshou): three 4-step episodes, gamma 0.99,
# lambda 0.95, published returns (= advantage + value). tianshou passes the value of the *next*
# state; re-derived, the value of the state before each token is [V(s0), v0, v1, v2] with V(s0)
# the batch's last entry rolled round: hence the rows below.
TIANSHOU_REWARDS = [[101, 102, 103, 200], [104, 105, 106, 201], [107, 108, 109, 202]]
TIANSHOU_VALUES = [[-3, 2, 3, 4], [-1, 5, 6, 7], [-2, 8, 9, 10]]
TIANSHOU_RETURNS = [
    [454.8344, 376.1143, 291.298, 200.0],
    [464.5610, 383.1085, 295.387, 201.0],
    [474.2876, 390.1027, 299.476, 202.0],
]


def test_gae_matches_tianshou_published_returns():
    rewards = torch.tensor(TIANSHOU_REWARDS, dtype=torch.float64)
    values = torch.tensor(TIANSHOU_VALUES, dtype=torch.float64)
    _, ret = gae(rewards, values, torch.ones_like(rewards), gamma=0.99, lam=0.95)
    assert torch.allclose(ret, torch.tensor(TIANSHOU_RETURNS, dtype=torch.float64), atol=1e-3)


def test_reward_to_go_matches_tianshou_published_returns():
    # rewards 0..7 in episodes [0], [1, 2, 3], [4, 5], [6, 7]; gamma 0.1
    rewards, mask = padded([[0], [1, 2, 3], [4, 5], [6, 7]], 3)
    want, _ = padded([[0], [1.23, 2.3, 3], [4.5, 5], [6.7, 7]], 3)
    assert torch.allclose(reward_to_go(rewards, mask, 0.1), want, atol=1e-12)


def test_truncated_and_eos_rows_both_end_at_their_last_token():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 0 hit the limit, row 1 ended by EOS
    adv, _ = gae(rewards, values, mask, gamma=1.0, lam=0.0)
    assert torch.allclose(adv, torch.tensor([[0.0, 0.0, 0.5], [0.0, 0.5, 0.0]]))  # no bootstrap past either end


def test_prompt_mean_baseline():
    r = torch.tensor([1.0, 2.0, 3.0, 10.0, 10.0, 10.0])
    assert torch.equal(prompt_mean_baseline(r, 3), torch.tensor([2.0, 2.0, 2.0, 10.0, 10.0, 10.0]))
    with pytest.raises(ValueError, match="divide"):
        prompt_mean_baseline(r, 4)


@pytest.mark.parametrize("kwargs, match", [
    ({"gamma": 1.5}, "gamma must be a finite number in \\[0, 1\\]"),
    ({"gamma": 0.9, "lam": -0.1}, "lam must be a finite number in \\[0, 1\\]"),
])
def test_bad_discounts_are_clear_errors(batch, kwargs, match):
    rewards, values, mask, _ = batch
    with pytest.raises(ValueError, match=match):
        gae(rewards, values, mask, **{"gamma": 1.0, "lam": 0.95, **kwargs})


def test_bad_shapes_and_empty_rows_are_clear_errors(batch):
    rewards, values, mask, _ = batch
    with pytest.raises(ValueError, match="values shape"):
        gae(rewards, values[:, :3], mask)
    with pytest.raises(ValueError, match="does not match"):
        reward_to_go(rewards, mask[:, :3])
    empty = mask.clone()
    empty[1] = 0
    with pytest.raises(ValueError, match="all zeros"):
        reward_to_go(rewards, empty)


def loop_group_normalize(r, G, eps, scale):
    out = []
    for i in range(0, len(r), G):
        grp = [float(x) for x in r[i:i + G]]
        mean = sum(grp) / G
        std = (sum((x - mean) ** 2 for x in grp) / (G - 1)) ** 0.5
        out += [(x - mean) / (std + eps) if scale else x - mean for x in grp]
    return out


@pytest.mark.parametrize("scale", [True, False])
def test_group_normalize_matches_loop(scale):
    from minirl.advantages import group_normalize

    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 3.0, -1.0, 2.0, 0.0], dtype=torch.float64)
    got = group_normalize(r, 4, eps=1e-4, scale=scale)
    assert torch.allclose(got, torch.tensor(loop_group_normalize(r, 4, 1e-4, scale), dtype=torch.float64), atol=1e-12)
    assert torch.equal(got[4:8], torch.zeros(4, dtype=torch.float64))  # equal rewards: zero advantage, not NaN


def test_leave_one_out_by_hand_and_its_scaling():
    from minirl.advantages import group_normalize, leave_one_out

    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0], dtype=torch.float64)
    got = leave_one_out(r, 3)
    want = [1 - 0.0, 0 - 0.5, 0 - 0.5, 1 - 2.0, 2 - 1.5, 2 - 1.5]
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(got, 1.5 * group_normalize(r, 3, scale=False), atol=1e-12)  # G/(G-1) * (r - mean)


def test_group_of_one_and_bad_grouping_raise():
    from minirl.advantages import group_normalize, leave_one_out

    with pytest.raises(ValueError, match="at least 2"):
        group_normalize(torch.ones(4), 1)
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out(torch.ones(4), 1)
    with pytest.raises(ValueError, match="does not divide"):
        group_normalize(torch.ones(5), 2)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_junk_on_padding_reaches_neither_returns_nor_gradients(batch, value):
    """inf or NaN on padding, in rewards and values: returns and advantages equal those with zeros
    there, and their gradients stay finite (the inputs are cleaned before any arithmetic)."""
    rewards, values, mask, _ = batch
    clean_r, clean_v = rewards * mask, values * mask

    def run(fill_r, fill_v):
        r, v = fill_r.clone().requires_grad_(True), fill_v.clone().requires_grad_(True)
        a, ret = gae(r, v, mask, 0.9, 0.8)
        g = reward_to_go(r, mask, 0.9)
        (a.sum() + ret.sum() + g.sum()).backward()
        return a.detach(), ret.detach(), g.detach(), r.grad, v.grad

    junk_r = torch.where(mask.bool(), rewards, torch.full_like(rewards, value))
    junk_v = torch.where(mask.bool(), values, torch.full_like(values, value))
    for want, got in zip(run(clean_r, clean_v), run(junk_r, junk_v)):
        assert torch.equal(want, got)
        assert torch.isfinite(got).all()


def turn_returns_loop(rewards, turns, gamma):
    """Per row: each turn's summed reward, then G_k = sum_{j>=k} gamma^(j-k) R_j, in plain Python."""
    out = []
    for r_row, t_row in zip(rewards.tolist(), turns.tolist()):
        n = max(t_row) + 1
        R = [sum(r for r, t in zip(r_row, t_row) if t == k) for k in range(n)]
        out.append([sum(gamma ** (j - k) * R[j] for j in range(k, n)) for k in range(n)])
    K = max(len(row) for row in out)
    return torch.tensor([row + [0.0] * (K - len(row)) for row in out], dtype=torch.float64)


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.0])
def test_turn_returns_equal_a_plain_loop_and_ignore_padding(gamma):
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(4, 9, generator=g, dtype=torch.float64)
    turns = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2, 2], [0, 0, 1, 1, -1, -1, -1, -1, -1],
                          [0, -1, -1, -1, -1, -1, -1, -1, -1], [0, 0, 0, 0, 0, 1, 1, -1, -1]])
    rewards[turns < 0] = 100.0  # junk on the padding must not count
    got = advantages.turn_returns(rewards, turns, gamma)
    assert got.shape == (4, 3) and torch.allclose(got, turn_returns_loop(rewards, turns, gamma), atol=1e-12)
    one_turn = torch.zeros_like(turns)
    assert torch.allclose(advantages.turn_returns(rewards, one_turn, gamma)[:, 0], rewards.sum(1))


def test_turn_returns_refuse_what_is_not_a_turn_index():
    r = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="integer tensor"):
        advantages.turn_returns(r, torch.zeros(1, 3))
    with pytest.raises(ValueError, match=">= 0"):
        advantages.turn_returns(r, torch.tensor([[-1, -1, -1]]))
