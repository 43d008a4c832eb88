"""The KV-cache sampler against uncached forward passes, and its RL tensors."""
import pytest
import torch

import minirl
from minirl.lm.model import GPT, GPTConfig, KVCache
from minirl.lm.sampling import completion_hidden, completion_logprobs, left_pad, positions_from_mask, sample_tokens

CONFIG = GPTConfig(vocab_size=13, n_ctx=40, n_embd=32, n_layer=2, n_head=4)
EOS, PAD = 11, 12
PROMPTS = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10]]  # ragged on purpose: left padding is exercised


@pytest.fixture
def model():
    torch.manual_seed(0)
    m = GPT(CONFIG).eval()
    with torch.no_grad():  # O(1) weights, so positions and cache slots visibly change the logits
        for p in m.parameters():
            p.normal_(0.0, 0.3)
    return m


def uncached_logits(model, prompt, completion):
    """Logits of the last position of prompt + completion, from a plain forward pass."""
    with torch.no_grad():
        return model(torch.tensor([prompt + completion]))[0, -1]


def test_cached_logits_equal_uncached_for_diverging_group_rows(model):
    G, steps = 3, 6
    ids, pmask = left_pad(PROMPTS, PAD, "cpu")
    N, P = ids.shape
    cache = KVCache.empty(CONFIG, N, P + steps)
    with torch.no_grad():
        logits = model(ids, positions=positions_from_mask(pmask), key_mask=pmask, cache=cache)[:, -1]
    cache = cache.repeat_interleave(G)
    logits = logits.repeat_interleave(G, dim=0)
    key_mask = torch.cat([pmask.repeat_interleave(G, dim=0), torch.ones(N * G, steps, dtype=torch.long)], dim=1)
    position = pmask.repeat_interleave(G, dim=0).sum(1)
    gen = torch.Generator().manual_seed(3)
    completions = [[] for _ in range(N * G)]
    for t in range(steps):
        for row in range(N * G):  # every step, every row against an uncached pass of its own history
            want = uncached_logits(model, PROMPTS[row // G], completions[row])
            assert (logits[row] - want).abs().max().item() <= 1e-5
        tok = torch.randint(0, CONFIG.vocab_size, (N * G,), generator=gen)  # rows of a group diverge
        for row in range(N * G):
            completions[row].append(int(tok[row]))
        with torch.no_grad():
            logits = model(tok[:, None], positions=(position + t)[:, None],
                           key_mask=key_mask[:, : cache.length + 1], cache=cache)[:, -1]


def test_group_cache_copy_is_real(model):
    cache = KVCache.empty(CONFIG, 1, 4)
    cache.kv.zero_()
    copy = cache.repeat_interleave(2)
    copy.kv[:, :, 0] += 1.0  # a write to row 0 of the group ...
    assert copy.kv[:, :, 1].abs().sum() == 0 and cache.kv.abs().sum() == 0  # ... reaches neither its sibling nor the original


def test_temperature_zero_is_greedy_and_deterministic(model):
    a = sample_tokens(model, PROMPTS, max_new_tokens=8, eos_token_id=None, temperature=0)
    b = sample_tokens(model, PROMPTS, max_new_tokens=8, eos_token_id=None, temperature=0)
    assert torch.equal(a.tokens, b.tokens)
    for row, prompt in enumerate(PROMPTS):
        completion = []
        for _ in range(8):
            completion.append(int(uncached_logits(model, prompt, completion).argmax()))
        assert a.tokens[row].tolist() == completion


def test_same_generator_seed_gives_same_samples(model):
    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return sample_tokens(model, PROMPTS, max_new_tokens=10, eos_token_id=EOS, group_size=4, generator=g).tokens

    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 4)])
def test_returned_logprobs_equal_a_fresh_forward_pass(model, temperature, top_k):
    g = torch.Generator().manual_seed(7)
    out = sample_tokens(model, PROMPTS, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD, group_size=3,
                        temperature=temperature, top_k=top_k, generator=g)
    with torch.no_grad():
        fresh = completion_logprobs(model, out, temperature=temperature, top_k=top_k)
    assert (out.logprobs - fresh).abs().max().item() <= 1e-5
    assert (out.logprobs[out.mask == 0] == 0).all()


def test_mask_and_truncation_flags(model):
    g = torch.Generator().manual_seed(0)
    out = sample_tokens(model, PROMPTS, max_new_tokens=6, eos_token_id=EOS, pad_token_id=PAD, group_size=20, generator=g)
    assert out.tokens.shape == out.logprobs.shape == out.mask.shape == (60, out.tokens.size(1))
    saw_eos = saw_truncated = False
    for tokens, mask, truncated in zip(out.tokens.tolist(), out.mask.tolist(), out.truncated.tolist()):
        if EOS in tokens:
            end = tokens.index(EOS)
            assert mask == [1.0] * (end + 1) + [0.0] * (len(tokens) - end - 1)  # 1 up to and including EOS
            assert all(t == PAD for t in tokens[end + 1 :])
            assert not truncated
            saw_eos = True
        else:
            assert truncated and len(tokens) == 6 and mask == [1.0] * 6
            saw_truncated = True
    assert saw_eos and saw_truncated  # both kinds of ending occurred


def test_stops_early_when_every_row_has_ended(model):
    with torch.no_grad():
        model.wte.weight[EOS] += 50 * model.ln_f.weight  # make EOS overwhelmingly likely
    out = sample_tokens(model, PROMPTS, max_new_tokens=20, eos_token_id=EOS, pad_token_id=PAD)
    assert out.tokens.shape[1] < 20 and not out.truncated.any()


def test_prompt_longer_than_context_is_a_clear_error(model):
    with pytest.raises(ValueError, match="exceeds the context window"):
        sample_tokens(model, [[1] * 35], max_new_tokens=10, eos_token_id=EOS)


def test_sample_on_text_prompts_returns_texts():
    model = minirl.load_model("base")
    out = minirl.sample(model, ["q: 1+2= a:", "plan:"], max_new_tokens=8, group_size=2,
                        generator=torch.Generator().manual_seed(0))
    assert out.prompts == ["q: 1+2= a:", "q: 1+2= a:", "plan:", "plan:"]
    assert len(out.texts) == 4 and all(isinstance(t, str) and "<|" not in t for t in out.texts)
    with pytest.raises(TypeError, match="list of strings"):
        minirl.sample(model, "q: 1+2= a:", max_new_tokens=4)


@pytest.mark.parametrize("max_new_tokens", [1, 12])
def test_shared_prompt_pass_equals_one_pass_per_row_with_gradients(model, max_new_tokens):
    """completion_hidden runs each group's prompt once; values and parameter gradients equal the
    plain pass over every row (ragged prompts, so the left padding is exercised)."""
    out = sample_tokens(model, PROMPTS, max_new_tokens=max_new_tokens, eos_token_id=EOS, pad_token_id=PAD, group_size=3,
                        generator=torch.Generator().manual_seed(3))
    weights = torch.randn(out.tokens.shape, generator=torch.Generator().manual_seed(4))

    def value_and_grads(rollout):
        model.zero_grad()
        hidden = completion_hidden(model, rollout)
        (hidden.sum(-1) * weights * rollout.mask).sum().backward()
        return hidden.detach(), [p.grad.clone() for p in model.parameters()]

    shared, shared_grads = value_and_grads(out)
    plain, plain_grads = value_and_grads(out.select(torch.arange(out.tokens.size(0))))  # group_size 1: one pass per row
    assert (shared - plain)[out.mask.bool()].abs().max().item() <= 1e-5
    for a, b in zip(shared_grads, plain_grads):
        assert torch.allclose(a, b, atol=1e-4)
