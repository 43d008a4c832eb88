"""Lesson 05's two PPO checkers, rlhf_rewards and clipped_value_loss: PASS on a right answer, a
named FAIL on each trap, NOT_DONE on an unfinished exercise; and their loop references agree with
minirl's own functions, while a bug planted in a copy of minirl's function is caught."""
import math

import pytest
import torch

from minirl import check, losses
from minirl.course.check import _loop_rlhf_rewards, _loop_value_loss
from minirl.train import ppo

from test_check import own


def not_done(*args):
    raise NotImplementedError("exercise: write your solution here")


def verdict(capsys, checker, fn) -> str:
    checker(fn)
    return capsys.readouterr().out


# ---------------------------------------------------------------- rlhf_rewards
def rewards_written_here(score, logprobs, ref_logprobs, mask, beta, sign=-1.0, penalty_mask=True,
                         score_at="last", score_weight=1.0, kl_at_end=False):
    """The per-token reward, vectorized (a second implementation); the keywords plant the traps."""
    penalty = sign * beta * (logprobs - ref_logprobs)
    if penalty_mask:
        penalty = torch.where(mask.bool(), penalty, torch.zeros_like(penalty))
    rows = torch.arange(len(score))
    last = mask.sum(dim=1).long() - 1  # padding comes after each completion in these cases
    r = torch.zeros_like(penalty)
    if kl_at_end:
        r[rows, last] = penalty.sum(dim=1)
    else:
        r = r + penalty
    s = score_weight * score
    if score_at == "last":
        r[rows, last] += s
    elif score_at == "end":
        r[:, -1] += s
    else:  # every real token
        r = r + s[:, None] * mask
    return r


def test_rlhf_rewards_passes_a_right_answer_and_minirls_function(capsys):
    assert verdict(capsys, check.rlhf_rewards, rewards_written_here).startswith("PASS rlhf_rewards: 6 cases")
    assert verdict(capsys, check.rlhf_rewards,
                   own(ppo.rlhf_rewards)).startswith("PASS rlhf_rewards: 6 cases")
    assert verdict(capsys, check.rlhf_rewards, ppo.rlhf_rewards).startswith(
        "FAIL rlhf_rewards: this is the package's own minirl.train.ppo.rlhf_rewards")
    assert verdict(capsys, check.rlhf_rewards, not_done) == check.NOT_DONE.format(name="rlhf_rewards") + "\n"


@pytest.mark.parametrize("mistake, keywords", [
    ("The penalty's sign", dict(sign=1.0)),
    ("The penalty is on the padding too", dict(penalty_mask=False)),
    ("The whole KL penalty sits on the last token", dict(kl_at_end=True)),
    ("The score is on every token", dict(score_at="every")),
    ("The score is at the tensor's last position (T - 1)", dict(score_at="end")),
])
def test_rlhf_rewards_names_each_mistake(capsys, mistake, keywords):
    out = verdict(capsys, check.rlhf_rewards, lambda *args: rewards_written_here(*args, **keywords))
    assert out.startswith("FAIL rlhf_rewards") and mistake in out, out


def test_rlhf_rewards_names_beta_on_the_score_and_the_forgotten_mask(capsys):
    beta_on_score = verdict(capsys, check.rlhf_rewards,
                            lambda s, lp, ref, m, b: rewards_written_here(s, lp, ref, m, b, score_weight=b))
    assert "beta scales the score too" in beta_on_score
    ignores_mask = verdict(capsys, check.rlhf_rewards,
                           lambda s, lp, ref, m, b: rewards_written_here(s, lp, ref, torch.ones_like(m), b))
    assert ignores_mask.startswith("FAIL rlhf_rewards") and "The mask is ignored" in ignores_mask


def random_rollout(seed):
    """Random log-probs and scores, and a 0/1 mask whose rows end at random lengths (at least 1)."""
    g = torch.Generator().manual_seed(seed)
    B, T = 6, 9
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).double()
    logp = -3 * torch.rand(B, T, generator=g, dtype=torch.float64)
    ref = -3 * torch.rand(B, T, generator=g, dtype=torch.float64)
    return torch.randn(B, generator=g, dtype=torch.float64), logp, ref, mask


@pytest.mark.parametrize("seed", range(5))
def test_the_rlhf_rewards_reference_is_minirls_function(seed):
    score, logp, ref, mask = random_rollout(seed)
    for beta in (0.0, 0.05, 0.3):
        want = ppo.rlhf_rewards(score, logp, ref, mask, beta)
        assert torch.allclose(_loop_rlhf_rewards(score, logp, ref, mask, beta), want, atol=1e-12)


def test_a_bug_planted_in_a_copy_of_minirls_rlhf_rewards_is_caught(capsys):
    """minirl's rlhf_rewards, copied with the penalty's sign flipped: the checker says so."""
    from minirl.core.kl import kl_k1
    from minirl.core.ops import zero_padding

    def planted(score, logprobs, ref_logprobs, mask, beta):
        r = +beta * zero_padding(kl_k1(logprobs, ref_logprobs), mask)  # the bug: + for -
        last = mask.size(1) - 1 - mask.flip(1).argmax(dim=1)
        r[torch.arange(r.size(0)), last] += score
        return r
    score, logp, ref, mask = random_rollout(0)
    assert not torch.allclose(_loop_rlhf_rewards(score, logp, ref, mask, 0.1), planted(score, logp, ref, mask, 0.1))
    out = verdict(capsys, check.rlhf_rewards, planted)
    assert out.startswith("FAIL rlhf_rewards") and "The penalty's sign" in out


# ---------------------------------------------------------------- clipped_value_loss
def value_loss_written_here(values, returns, mask, old_values, clip_range, pick=torch.maximum, centre="old",
                            denominator="real", half=0.5):
    """PPO's clipped value loss, vectorized (a second implementation); the keywords plant the traps."""
    if centre == "old":
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    elif centre == "returns":
        clipped = returns + (values - returns).clamp(-clip_range, clip_range)
    else:  # the clipped change alone, V_old not added back
        clipped = (values - old_values).clamp(-clip_range, clip_range)
    err = pick((values - returns) ** 2, (clipped - returns) ** 2)
    err = torch.where(mask.bool(), err, torch.zeros_like(err))
    if denominator == "rows":
        return half * (err.sum(1) / mask.sum(1)).mean()
    return half * err.sum() / (mask.sum() if denominator == "real" else mask.numel())


def test_clipped_value_loss_passes_a_right_answer_and_minirls_function(capsys):
    out = verdict(capsys, check.clipped_value_loss, value_loss_written_here)
    assert out.startswith("PASS clipped_value_loss: 7 cases")
    minirls = lambda v, r, m, o, c: losses.value_loss(v, r, m, old_values=o, clip_range=c)  # noqa: E731
    assert verdict(capsys, check.clipped_value_loss, minirls).startswith("PASS clipped_value_loss: 7 cases")
    assert verdict(capsys, check.clipped_value_loss, not_done) == check.NOT_DONE.format(name="clipped_value_loss") + "\n"


@pytest.mark.parametrize("mistake, keywords", [
    ("The smaller of the two errors (min)", dict(pick=torch.minimum)),
    ("The clip changes nothing", dict(centre="returns")),
    ("The old value is not added back", dict(centre="change")),
    ("The padding is counted in the mean", dict(denominator="all")),
    ("Each row averaged first", dict(denominator="rows")),
    ("the 1/2 is missing", dict(half=1.0)),
])
def test_clipped_value_loss_names_each_mistake(capsys, mistake, keywords):
    out = verdict(capsys, check.clipped_value_loss, lambda *args: value_loss_written_here(*args, **keywords))
    assert out.startswith("FAIL clipped_value_loss") and mistake in out, out


def test_clipped_value_loss_names_the_forgotten_mask(capsys):
    ignores_mask = lambda v, r, m, o, c: value_loss_written_here(v, r, torch.ones_like(m), o, c)  # noqa: E731
    assert "The mask is ignored" in verdict(capsys, check.clipped_value_loss, ignores_mask)


@pytest.mark.parametrize("seed", range(5))
def test_the_value_loss_reference_is_minirls_function(seed):
    _, values, returns, mask = random_rollout(seed)
    old = values + 0.4 * torch.randn(values.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    for clip in (0.0, 0.1, 0.2, 1.0, math.inf):
        want = losses.value_loss(values, returns, mask, old_values=old, clip_range=clip).item()
        assert _loop_value_loss(values, returns, mask, old, clip) == pytest.approx(want, abs=1e-12)


def test_a_bug_planted_in_a_copy_of_minirls_value_loss_is_caught(capsys):
    """minirl's value_loss with value clipping, copied with min for max: the checker says so."""
    from minirl.core.losses import aggregate, per_token_inputs

    def planted(values, returns, mask, old_values, clip_range):
        m, values, returns, old_values = per_token_inputs(mask, values=values, returns=returns, old_values=old_values)
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        err = torch.minimum((values - returns) ** 2, (clipped - returns) ** 2)  # the bug: min for max
        return 0.5 * aggregate(err, m, "token_mean")
    out = verdict(capsys, check.clipped_value_loss, planted)
    assert out.startswith("FAIL clipped_value_loss") and "The smaller of the two errors (min)" in out
