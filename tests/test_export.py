"""Exports to Hugging Face against the course's own objects: the fast tokenizer against tiktoken on
every corpus line (ids, round trip, special tokens), and the sequence-classification reward model
against `RewardModel`'s scores on right-padded batches."""
import pytest
import torch

import minirl
from minirl.core.paths import data_dir
from minirl.lm.reward_head import load_reward_model
from minirl.lm.sequences import right_pad, sequence_ids
from minirl.lm.tokenizer import PAD
from minirl.world import datasets

pytest.importorskip("transformers")
from minirl.lm.export import to_hf_reward_model, to_hf_tokenizer  # noqa: E402


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
    chat = [{"role": "user", "content": "q: 12+7= a:"}]  # engines that insist on a chat template get the text back
    assert loaded.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == "q: 12+7= a:"


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


@pytest.fixture(scope="module")
def policy():
    return minirl.load_model("base")


def test_mask_positions_give_a_left_padded_row_its_own_logits(policy):
    """TRL scores the policy without position ids; GPT-2's absolute positions then count the padding."""
    from minirl.lm.export import to_hf_gpt2, use_mask_positions
    enc = minirl.load_tokenizer()
    row = torch.tensor([enc.encode_ordinary("q: 4+17= a: 21")])
    padded = torch.cat([torch.full((1, 3), enc.encode_single_token(PAD)), row], dim=1)
    mask = (padded != enc.encode_single_token(PAD)).long()
    hf = to_hf_gpt2(policy)
    with torch.no_grad():
        plain = hf(input_ids=row).logits
        assert (hf(input_ids=padded, attention_mask=mask).logits[:, 3:] - plain).abs().max() > 1.0  # HF's default
        use_mask_positions(hf)
        assert (hf(input_ids=padded, attention_mask=mask).logits[:, 3:] - plain).abs().max() <= 1e-4
        assert (hf(padded, attention_mask=mask).logits[:, 3:] - plain).abs().max() <= 1e-4  # ids given by position
        assert (hf(input_ids=row).logits - plain).abs().max() == 0  # no mask: nothing to fill


def test_policy_export_has_the_course_special_ids_in_its_vocabulary(policy):
    from minirl.lm.export import to_hf_gpt2
    enc = minirl.load_tokenizer()
    hf = to_hf_gpt2(policy)
    eos, pad = enc.eot_token, enc.encode_single_token(PAD)
    for c in (hf.config, hf.generation_config):
        assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (eos, eos, pad)
    assert max(eos, pad) < hf.config.vocab_size == policy.config.vocab_size


def test_policy_export_refuses_special_ids_outside_the_vocabulary():
    from minirl.lm.export import to_hf_gpt2
    small = minirl.GPT(minirl.GPTConfig(vocab_size=97, n_ctx=8, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="outside the model's vocabulary of 97 tokens"):
        to_hf_gpt2(small)  # the course's ids (504, 505) do not exist in 97 tokens
    assert to_hf_gpt2(small, eos_token_id=96, pad_token_id=95).config.eos_token_id == 96


def rollout_and_critic(policy):
    from minirl.lm.critic import from_reward_model
    prompts = ["q: 4+17= a:", "q: 51+89= a:", "review: the"]
    rollout = minirl.sample(policy, prompts, max_new_tokens=12, generator=torch.Generator().manual_seed(0))
    assert rollout.prompt_mask.min() == 0  # left padding is exercised
    return rollout, from_reward_model(load_reward_model("rm_all"))


def hf_values(hf, rollout):
    """(B, T) the HF critic's values before each completion token, read as `to_hf_critic` says."""
    ids, key_mask, positions = rollout.sequences()
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=key_mask, position_ids=positions).logits.squeeze(-1)  # (B, P+T)
    P = rollout.prompt_tokens.size(1)
    return out[:, P - 1 : -1] * rollout.mask


def test_critic_export_gives_the_same_values(policy):
    from minirl.lm.critic import completion_values
    from minirl.lm.export import to_hf_critic
    rollout, (trunk, head) = rollout_and_critic(policy)
    with torch.no_grad():
        ours = completion_values(trunk, head, rollout)
    assert ours.abs().max() > 0.1  # a critic with something to say
    assert (hf_values(to_hf_critic(trunk, head), rollout) - ours).abs().max() <= 1e-5


def test_saved_folder_loads_offline_with_from_pretrained(policy, tmp_path, monkeypatch):
    from transformers import (AutoModelForCausalLM, AutoModelForSequenceClassification, AutoModelForTokenClassification,
                              AutoTokenizer)

    from minirl.lm.critic import completion_values
    from minirl.lm.export import save
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    enc = minirl.load_tokenizer()
    rm = load_reward_model("rm_all")
    rollout, critic = rollout_and_critic(policy)
    paths = save(tmp_path / "export", policy, reward_model=rm, critic=critic)
    assert set(paths) == {"policy", "reward_model", "critic"}

    hf, tok = AutoModelForCausalLM.from_pretrained(paths["policy"]), AutoTokenizer.from_pretrained(paths["policy"])
    text = "q: 12+7= a: 19"
    ids = tok(text, return_tensors="pt")["input_ids"]  # the tokenizer's defaults: no BOS added
    assert ids[0].tolist() == enc.encode_ordinary(text)
    with torch.no_grad():
        assert (hf(ids).logits - policy(ids)).abs().max() <= 1e-5
    assert (hf.generation_config.eos_token_id, hf.generation_config.pad_token_id) == (enc.eot_token, tok.pad_token_id)
    out = hf.generate(**tok(["q: 12+7= a:"] * 8, return_tensors="pt"), do_sample=True, max_new_tokens=6)
    assert (out == enc.eot_token).any(dim=1).all()  # generate() stops at the course's EOS, no warning needed

    scorer = AutoModelForSequenceClassification.from_pretrained(paths["reward_model"])
    seqs = right_pad([sequence_ids(enc, "q: 12+7= a:", c)[0] for c in (" 19", " 91 9")], rm.pad_token_id)
    with torch.no_grad():
        assert scorer(input_ids=seqs).logits.squeeze(-1).tolist() == pytest.approx(rm(seqs).tolist(), abs=1e-5)
        values = completion_values(*critic, rollout)
    assert (hf_values(AutoModelForTokenClassification.from_pretrained(paths["critic"]), rollout) - values).abs().max() <= 1e-5
