"""minirl.ops against plain float64 loops, with edge cases and bad input."""
import math

import pytest
import torch

from minirl import ops


def loop_masked_sum(x, mask):
    return sum(float(a) * float(m) for a, m in zip(x.flatten().double(), mask.flatten().double()))


def loop_row_means(x, mask):
    out = []
    for row_x, row_m in zip(x.double(), mask.double()):
        n = float(row_m.sum())
        out.append(sum(float(a) * float(m) for a, m in zip(row_x, row_m)) / n if n else math.nan)
    return out


def loop_logprob(logits_row, token):
    m = max(float(v) for v in logits_row)
    log_z = m + math.log(sum(math.exp(float(v) - m) for v in logits_row))
    return float(logits_row[token]) - log_z


def loop_entropy(logits_row):
    m = max(float(v) for v in logits_row)
    w = [math.exp(float(v) - m) for v in logits_row]
    z = sum(w)
    return -sum(p / z * math.log(p / z) for p in w if p > 0)


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=g)
    mask = (torch.rand(5, 7, generator=g) > 0.3).float()
    mask[0] = 1.0
    mask[3] = 0.0  # an all-masked row
    return x, mask


def test_masked_sum_and_mean_match_loops(batch):
    x, mask = batch
    assert ops.masked_sum(x, mask).item() == pytest.approx(loop_masked_sum(x, mask), abs=1e-5)
    assert ops.masked_mean(x, mask).item() == pytest.approx(loop_masked_sum(x, mask) / float(mask.sum()), abs=1e-6)
    got = ops.masked_mean(x, mask, dim=1)
    want = loop_row_means(x, mask)
    for g, w in zip(got.tolist(), want):
        assert (math.isnan(g) and math.isnan(w)) or g == pytest.approx(w, abs=1e-6)


def test_all_masked_slice_is_nan(batch):
    x, mask = batch
    assert math.isnan(ops.masked_mean(x, mask, dim=1)[3])
    assert math.isnan(ops.masked_mean(x, torch.zeros_like(x)))


def test_masked_entries_never_leak_even_if_inf(batch):
    x, mask = batch
    poisoned = torch.where(mask.bool(), x, torch.full_like(x, math.inf))
    assert ops.masked_sum(poisoned, mask).item() == pytest.approx(loop_masked_sum(x, mask), abs=1e-5)


def test_bool_mask_equals_float_mask(batch):
    x, mask = batch
    assert torch.equal(ops.masked_sum(x, mask.bool(), dim=1), ops.masked_sum(x, mask, dim=1))


def test_masked_whiten_matches_loop(batch):
    x, mask = batch
    vals = [float(a) for a, m in zip(x.flatten(), mask.flatten()) if m]
    mean = sum(vals) / len(vals)
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    w = ops.masked_whiten(x, mask)
    for a, m, got in zip(x.flatten(), mask.flatten(), w.flatten()):
        want = (float(a) - mean) / math.sqrt(var + 1e-8) if m else 0.0
        assert float(got) == pytest.approx(want, abs=1e-5)
    scale_only = ops.masked_whiten(x, mask, shift_mean=False)
    assert ops.masked_mean(scale_only, mask).item() == pytest.approx(mean, abs=1e-5)


def test_masked_whiten_needs_two_entries():
    with pytest.raises(ValueError, match="at least two"):
        ops.masked_whiten(torch.ones(3), torch.tensor([0.0, 1.0, 0.0]))


def test_token_logprobs_and_entropy_match_loops():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 4, 11, generator=g) * 3
    tokens = torch.randint(0, 11, (3, 4), generator=g)
    lp = ops.token_logprobs(logits, tokens)
    ent = ops.entropy_from_logits(logits)
    for i in range(3):
        for j in range(4):
            assert float(lp[i, j]) == pytest.approx(loop_logprob(logits[i, j], int(tokens[i, j])), abs=1e-5)
            assert float(ent[i, j]) == pytest.approx(loop_entropy(logits[i, j]), abs=1e-5)


def test_large_and_infinite_logits_stay_finite():
    logits = torch.tensor([[1e4, 0.0, -1e4], [30.0, 30.0, -math.inf]])
    lp = ops.token_logprobs(logits, torch.tensor([0, 1]))
    assert torch.isfinite(lp).all()
    assert lp[0].item() == pytest.approx(0.0, abs=1e-6)
    assert lp[1].item() == pytest.approx(math.log(0.5), abs=1e-6)
    ent = ops.entropy_from_logits(logits)
    assert torch.isfinite(ent).all()
    assert ent[1].item() == pytest.approx(math.log(2), abs=1e-6)


def test_shape_mismatch_is_a_clear_error(batch):
    x, mask = batch
    with pytest.raises(ValueError, match="does not match"):
        ops.masked_mean(x, mask[:, :3])
    with pytest.raises(ValueError, match="tokens.shape"):
        ops.token_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


def test_non_binary_mask_is_a_clear_error(batch):
    x, mask = batch
    with pytest.raises(ValueError, match="only 0 and 1"):
        ops.masked_mean(x, mask * 0.5)


@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_junk_on_padding_reaches_neither_values_nor_gradients(batch, value):
    """masked_sum, masked_mean, masked_var and masked_whiten with inf or NaN on the padding give the
    values and gradients they give with zeros there (masked_var's mean made a NaN gradient before)."""
    x, mask = batch
    mask = mask.clone()
    mask[3] = 1.0  # whiten and var reduce over everything: no all-masked row needed here
    junk = torch.where(mask.bool(), x, torch.full_like(x, value))

    def run(inp):
        a = inp.clone().requires_grad_(True)
        out = torch.stack([ops.masked_sum(a, mask), ops.masked_mean(a, mask), ops.masked_var(a, mask),
                           (ops.masked_whiten(a, mask) * torch.arange(a.numel()).view_as(a)).sum()])
        out.sum().backward()
        return out.detach(), a.grad

    for want, got in zip(run(x * mask), run(junk)):
        assert torch.allclose(want, got, atol=1e-6) and torch.isfinite(got).all()
