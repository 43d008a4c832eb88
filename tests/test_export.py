"""Exports to Hugging Face against the course's own objects: the fast tokenizer against tiktoken on
every corpus line (ids, round trip, special tokens), and the sequence-classification reward model
against `RewardModel`'s scores on right-padded batches."""
import pytest
import torch

import minirl
from minirl import datasets
from minirl.paths import data_dir
from minirl.reward_model import load_reward_model, right_pad, sequence_ids
from minirl.tokenizer import PAD

pytest.importorskip("transformers")
from minirl.export import to_hf_reward_model, to_hf_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def hf_tok():
    return to_hf_tokenizer()


@pytest.mark.slow
def test_tokenizer_gives_tiktokens_ids_on_every_corpus_line(hf_tok):
    enc = minirl.load_tokenizer()
    lines = [line for f in sorted((data_dir() / "world").glob("corpus_*.txt")) for line in f.read_text().splitlines()]
    assert len(lines) > 100_000
    ours = enc.encode_ordinary_batch(lines)
    theirs = hf_tok(lines, add_special_tokens=False)["input_ids"]
    assert theirs == ours
    assert hf_tok.batch_decode(theirs) == lines


def test_tokenizer_special_tokens(hf_tok):
    enc = minirl.load_tokenizer()
    assert hf_tok.eos_token_id == hf_tok.bos_token_id == enc.eot_token
    assert hf_tok.pad_token_id == enc.encode_single_token(PAD) != enc.eot_token
    assert len(hf_tok) == enc.n_vocab
    text = "a review <|endoftext|> and <|pad|> inside"  # typed by a user: text, not the special ids
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == enc.encode(text, disallowed_special=())
    assert enc.eot_token not in hf_tok(text, add_special_tokens=False)["input_ids"]
    assert hf_tok.decode([enc.eot_token, enc.encode_single_token(PAD)]) == "<|endoftext|><|pad|>"


def test_tokenizer_survives_save_and_load(hf_tok, tmp_path):
    from transformers import AutoTokenizer
    hf_tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "plan: run nap <|endoftext|> 12+7="
    assert loaded(text, add_special_tokens=False)["input_ids"] == hf_tok(text, add_special_tokens=False)["input_ids"]
    assert (loaded.eos_token_id, loaded.pad_token_id) == (hf_tok.eos_token_id, hf_tok.pad_token_id)


def test_reward_model_gives_the_same_scores():
    enc = minirl.load_tokenizer()
    rm = load_reward_model("rm_all")
    hf = to_hf_reward_model(rm)
    pairs = datasets.load_preferences("train")[:24]
    seqs = [sequence_ids(enc, p["prompt"], p[k])[0] for p in pairs for k in ("chosen", "rejected")]
    assert len({len(s) for s in seqs}) > 1  # right padding is exercised
    ids = right_pad(seqs, rm.pad_token_id)
    with torch.no_grad():
        ours = rm(ids)
        theirs = hf(input_ids=ids).logits.squeeze(-1)
    assert theirs.tolist() == pytest.approx(ours.tolist(), abs=1e-5)
    normalized = (theirs - hf.config.reward_mean) / hf.config.reward_std
    assert normalized.tolist() == pytest.approx(rm.normalized(ours).tolist(), abs=1e-5)
    assert hf.config.pad_token_id == enc.encode_single_token(PAD)
