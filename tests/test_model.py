"""The GPT against Hugging Face's GPT-2 on the same weights, and its input handling."""
import pytest
import torch

import minirl
from minirl.lm.model import GPT, GPTConfig
from minirl.lm.sampling import positions_from_mask

CONFIG = GPTConfig(vocab_size=97, n_ctx=32, n_embd=48, n_layer=3, n_head=4)


@pytest.fixture
def model():
    torch.manual_seed(0)
    m = GPT(CONFIG).eval()
    with torch.no_grad():  # O(1) weights and non-zero biases: every term (GELU's form, positions) moves the logits
        for p in m.parameters():
            p.normal_(0.0, 0.3)
    return m


def test_logits_equal_hugging_face_gpt2(model):
    transformers = pytest.importorskip("transformers", reason="transformers is in the dev extra")
    from minirl.lm.export import to_hf_gpt2

    hf = to_hf_gpt2(model, eos_token_id=96, pad_token_id=95)
    assert isinstance(hf, transformers.GPT2LMHeadModel)
    idx = torch.randint(0, CONFIG.vocab_size, (3, CONFIG.n_ctx), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(idx)
        theirs = hf(idx).logits
    assert (ours - theirs).abs().max().item() <= 1e-5


def test_left_padding_does_not_change_a_rows_logits(model):
    row = torch.randint(0, CONFIG.vocab_size, (1, 10), generator=torch.Generator().manual_seed(2))
    padded = torch.cat([torch.zeros(1, 5, dtype=torch.long), row], dim=1)
    key_mask = torch.cat([torch.zeros(1, 5), torch.ones(1, 10)], dim=1).long()
    with torch.no_grad():
        plain = model(row)
        shifted = model(padded, positions=positions_from_mask(key_mask), key_mask=key_mask)[:, 5:]
    assert (plain - shifted).abs().max().item() <= 1e-5


def test_sequence_longer_than_context_is_a_clear_error(model):
    with pytest.raises(ValueError, match="context window"):
        model(torch.zeros(1, CONFIG.n_ctx + 1, dtype=torch.long))


def test_unknown_model_name_lists_known_ones():
    with pytest.raises(ValueError, match="unknown model 'gpt5'; choose one of 'base'"):
        minirl.load_model("gpt5")


def test_base_checkpoint_loads_with_weights_only():
    model = minirl.load_model("base")
    assert not model.training
    assert 1_000_000 <= model.num_parameters() <= 3_000_000
    assert model.config.vocab_size == minirl.load_tokenizer().n_vocab
