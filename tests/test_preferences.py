"""Bradley-Terry pieces against independent references: the loss against closed forms, a float64
loop and TRL's RewardTrainer; strengths against the optimality condition (observed wins = expected
wins) and a plain Zermelo/MM iteration; Elo against SGD on the same loss; the accuracy ceiling and
expected accuracy against double loops over every pair."""
import math
import random
import types
from collections import defaultdict

import pytest
import torch

from minirl import losses

from minirl.core import preferences
from minirl.world import generate, rewards


# ---------------------------------------------------------------- the loss
def loop_bt_loss(chosen, rejected, labels, margin):
    """-[y log sigmoid(d - m) + (1 - y) log sigmoid(-d - m)], pair by pair, in float64."""
    total = 0.0
    for c, r, y, m in zip(chosen, rejected, labels, margin):
        d = float(c) - float(r)
        total += -(float(y) * -math.log1p(math.exp(-(d - m))) + (1 - float(y)) * -math.log1p(math.exp(-(-d - m))))
    return total / len(chosen)


def test_bt_loss_closed_forms():
    c, r = torch.tensor([2.0, 0.0, -0.5]), torch.tensor([0.0, 0.0, 1.0])
    want = torch.log1p(torch.exp(-(c - r))).mean()  # Askell et al.: log(1 + exp(r_r - r_c))
    assert losses.bradley_terry_loss(c, r).item() == pytest.approx(want.item(), abs=1e-6)
    assert losses.bradley_terry_loss(c, r).item() == pytest.approx(-torch.nn.functional.logsigmoid(c - r).mean().item(), abs=1e-6)
    # log 2 at equal rewards, whatever the labels
    z = torch.zeros(4)
    assert losses.bradley_terry_loss(z, z, torch.tensor([1.0, 0.5, 0.0, 0.3])).item() == pytest.approx(math.log(2), abs=1e-6)
    # a tie (y = 1/2) is minimized at equal rewards, where its gradient is 0
    d = torch.tensor([0.0], requires_grad=True)
    losses.bradley_terry_loss(d, torch.zeros(1), torch.tensor([0.5])).backward()
    assert d.grad.item() == pytest.approx(0.0, abs=1e-7)


def test_bt_loss_matches_a_float64_loop_with_ties_and_margins():
    g = torch.Generator().manual_seed(0)
    c, r = torch.randn(64, generator=g, dtype=torch.float64), torch.randn(64, generator=g, dtype=torch.float64)
    y = torch.tensor([1.0, 0.5, 0.0, 0.8] * 16, dtype=torch.float64)
    m = torch.rand(64, generator=g, dtype=torch.float64)
    for margin in (0.0, 0.7, m):
        mm = margin.tolist() if isinstance(margin, torch.Tensor) else [margin] * 64
        got = losses.bradley_terry_loss(c, r, y, margin).item()
        assert got == pytest.approx(loop_bt_loss(c, r, y, mm), abs=1e-12)
    # gradient: d/d r_c = -(y sigmoid(-(d - m)) - (1 - y) sigmoid(-(-d - m))) / B, checked by finite differences
    cc = c.clone().requires_grad_(True)
    losses.bradley_terry_loss(cc, r, y, 0.3).backward()
    eps = 1e-6
    for i in (0, 1, 2, 3):
        up, down = c.clone(), c.clone()
        up[i] += eps
        down[i] -= eps
        fd = (loop_bt_loss(up, r, y, [0.3] * 64) - loop_bt_loss(down, r, y, [0.3] * 64)) / (2 * eps)
        assert cc.grad[i].item() == pytest.approx(fd, abs=1e-8)


def test_bt_loss_matches_trls_reward_trainer():
    """TRL's RewardTrainer.compute_loss on the same rewards (margin and none), through a stand-in model."""
    trl = pytest.importorskip("trl", reason="TRL is not installed: `pip install -c constraints.txt -e .[dev]` pins it")
    g = torch.Generator().manual_seed(1)
    chosen, rejected, margin = torch.randn(8, generator=g), torch.randn(8, generator=g), torch.rand(8, generator=g)
    logits = torch.cat([chosen, rejected])[:, None]  # TRL stacks chosen then rejected

    def fake_model(**inputs):
        return types.SimpleNamespace(logits=logits)
    fake_model.training = True
    identity = types.SimpleNamespace(gather=lambda x: x, gather_for_metrics=lambda x: x)
    trainer = types.SimpleNamespace(model=fake_model, args=types.SimpleNamespace(center_rewards_coefficient=None),
                                    accelerator=identity, _total_train_tokens=0, _tp_size=1,
                                    _metrics=defaultdict(lambda: defaultdict(list)))
    compute_loss = trl.RewardTrainer.compute_loss
    for extra, m in (({}, 0.0), ({"margin": margin}, margin)):
        inputs = {"input_ids": torch.zeros(16, 3, dtype=torch.long), "attention_mask": torch.ones(16, 3), **extra}
        want = compute_loss(trainer, fake_model, inputs)
        assert losses.bradley_terry_loss(chosen, rejected, margin=m).item() == pytest.approx(want.item(), abs=1e-6)


@pytest.mark.parametrize("bad, match", [
    (dict(labels=torch.tensor([1.5, 0.0])), "labels must be probabilities"),
    (dict(labels=torch.tensor([1.0])), "labels shape"),
    (dict(margin=-1.0), "margin must be finite and >= 0"),
])
def test_bt_loss_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        losses.bradley_terry_loss(torch.zeros(2), torch.zeros(2), **bad)
    with pytest.raises(TypeError, match="floating-point"):
        losses.bradley_terry_loss(torch.zeros(2, dtype=torch.long), torch.zeros(2))
    with pytest.raises(ValueError, match="one shape"):
        losses.bradley_terry_loss(torch.zeros(2), torch.zeros(3))


# ---------------------------------------------------------------- rankings
def test_ranking_to_pairs_with_a_tie():
    assert preferences.ranking_to_pairs("B > C = D > A") == [
        ("B", "C", 1.0), ("B", "D", 1.0), ("B", "A", 1.0), ("C", "D", 0.5), ("C", "A", 1.0), ("D", "A", 1.0)]
    with pytest.raises(ValueError, match="appears twice"):
        preferences.parse_ranking("A > B > A")
    with pytest.raises(ValueError, match="needs a name"):
        preferences.parse_ranking("A > > B")


# ---------------------------------------------------------------- strengths
def games(theta, n_games, seed):
    rng = random.Random(seed)
    w, l = [], []
    for _ in range(n_games):
        i, j = rng.sample(range(len(theta)), 2)
        won = rng.random() < 1 / (1 + math.exp(theta[j] - theta[i]))
        w.append(i if won else j)
        l.append(j if won else i)
    return w, l


def loop_mm_fit(w, l, n, labels=None, iters=5000):
    """Zermelo's iteration (Hunter's MM): pi_i <- wins_i / sum_games(i) 1 / (pi_i + pi_opponent)."""
    labels = labels or [1.0] * len(w)
    wins = [0.0] * n
    for a, b, y in zip(w, l, labels):
        wins[a] += y
        wins[b] += 1 - y
    pi = [1.0] * n
    for _ in range(iters):
        denom = [0.0] * n
        for a, b in zip(w, l):
            denom[a] += 1 / (pi[a] + pi[b])
            denom[b] += 1 / (pi[a] + pi[b])
        pi = [wins[i] / denom[i] for i in range(n)]
        g = math.exp(sum(math.log(p) for p in pi) / n)
        pi = [p / g for p in pi]
    return [math.log(p) for p in pi]


def test_fit_satisfies_observed_wins_equal_expected_wins_and_matches_a_plain_mm_fit():
    theta = [1.0, 0.5, 0.0, -0.3, -1.2]
    w, l = games(theta, 400, 0)
    labels = [0.5 if k % 7 == 0 else 1.0 for k in range(len(w))]  # some games were ties
    fit = preferences.fit_bradley_terry(w, l, 5, labels)
    assert fit.mean().item() == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(preferences.win_counts(w, l, 5, labels), preferences.expected_wins(fit, w, l, 5), atol=1e-9)
    assert torch.allclose(fit, torch.tensor(loop_mm_fit(w, l, 5, labels), dtype=torch.float64), atol=1e-6)


def test_fit_recovers_the_strengths_that_made_the_games():
    theta = torch.tensor([1.0, 0.5, 0.0, -0.3, -1.2], dtype=torch.float64)
    w, l = games(theta.tolist(), 20000, 1)
    assert torch.allclose(preferences.fit_bradley_terry(w, l, 5), theta - theta.mean(), atol=0.06)


def test_fit_refuses_an_unbeaten_item_unless_given_a_prior():
    w, l = [0, 0, 1], [1, 2, 2]  # 0 never loses
    with pytest.raises(ValueError, match="do not exist"):
        preferences.fit_bradley_terry(w, l, 3)
    fit = preferences.fit_bradley_terry(w, l, 3, l2=0.1)
    assert fit[0] > fit[1] > fit[2]


def test_elo_scale_and_online_elo_is_sgd_on_the_bt_loss():
    assert preferences.elo(torch.tensor([0.0, math.log(10)])).tolist() == pytest.approx([1000.0, 1400.0])
    assert preferences.elo_expected(1400.0, 1000.0) == pytest.approx(10 / 11)
    a, b = preferences.elo_update(1100.0, 1000.0, 1.0, k=32)
    assert a - 1100 == pytest.approx(32 * (1 - 1 / (1 + 10 ** (-100 / 400)))) and a + b == pytest.approx(2100.0)
    # the same step as one SGD step on -log P(game) in theta units, learning rate K ln 10 / 400
    theta = torch.tensor([100 * math.log(10) / 400, 0.0], dtype=torch.float64, requires_grad=True)
    losses.bradley_terry_loss(theta[:1], theta[1:]).backward()
    lr = 32 * math.log(10) / 400
    new = theta.detach() - lr * theta.grad
    assert preferences.elo(new - new.mean()).tolist() == pytest.approx([a - 50, b - 50], abs=1e-9)


# ---------------------------------------------------------------- scorers against the label model
def loop_expected_accuracy(scores, u, p):
    num = norm = 0.0
    for i in range(len(u)):
        for j in range(len(u)):
            if i == j:
                continue
            w = p[i] * p[j]
            p_first = 1 / (1 + math.exp(u[j] - u[i]))
            says = 1.0 if scores[i] > scores[j] else 0.0 if scores[i] < scores[j] else 0.5
            num += w * (says * p_first + (1 - says) * (1 - p_first))
            norm += w
    return num / norm


def test_expected_accuracy_and_ceiling_match_a_double_loop():
    rng = random.Random(0)
    u = [rng.gauss(0, 1) for _ in range(12)] + [0.5, 0.5]  # a tie in utility
    p = [rng.random() for _ in u]
    p = [x / sum(p) for x in p]
    s = [x + rng.gauss(0, 0.7) for x in u]
    s[0] = s[1]  # a tie in score
    assert preferences.expected_accuracy(s, u, p) == pytest.approx(loop_expected_accuracy(s, u, p), abs=1e-12)
    assert preferences.accuracy_ceiling(u, p) == pytest.approx(loop_expected_accuracy(u, u, p), abs=1e-12)
    assert preferences.expected_accuracy([0.0] * len(u), u, p) == pytest.approx(0.5)


def test_orders_ceiling_by_enumerating_every_pair():
    texts, probs = generate.order_distribution()
    u = [rewards.order_utility(t) for t in texts]
    total = norm = 0.0
    for i in range(len(texts)):
        for j in range(len(texts)):
            if i != j:
                total += probs[i] * probs[j] / (1 + math.exp(-abs(u[i] - u[j])))
                norm += probs[i] * probs[j]
    assert preferences.accuracy_ceiling(u, probs) == pytest.approx(total / norm, abs=1e-10)
    assert 0.68 < total / norm < 0.70


def test_reliability_of_a_calibrated_forecaster_is_zero():
    q = torch.linspace(0.01, 0.99, 99)
    out = preferences.reliability(q, q, bins=10)
    assert out["ece"] == pytest.approx(0.0, abs=1e-12) and out["weight"].sum().item() == pytest.approx(1.0)
    assert preferences.reliability(q, 1 - q, bins=10)["ece"] > 0.4
