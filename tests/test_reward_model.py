"""The reward model: Hugging Face's sequence-classification layout and scores, the score read at the
last real token of ragged batches, the reward-function signature, training that starts at log 2
and learns, and the shipped checkpoints against their cards and the accuracy ceiling."""
import math

import pytest
import torch

import minirl
from minirl.lm import reward_head, sequences
from minirl.lm.model import GPT, GPTConfig
from minirl.lm.tokenizer import PAD
from minirl.train import reward_model as rmod
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.world import datasets, rewards, tasks

CONFIG = GPTConfig(vocab_size=97, n_ctx=32, n_embd=48, n_layer=3, n_head=4)
PAD_ID, EOS_ID = 96, 95


@pytest.fixture
def rm():
    torch.manual_seed(0)
    trunk = GPT(CONFIG).eval()
    model = reward_head.RewardModel(trunk, PAD_ID)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def ragged(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 95, (n - 1,), generator=g).tolist() + [EOS_ID] for n in lengths]


def test_score_is_read_at_the_last_real_token_of_a_ragged_batch(rm):
    """Each row scored in a right-padded batch equals the row scored alone, unpadded; and equals the
    head applied to the hidden state at its EOS (not at the padding after it)."""
    seqs = ragged([3, 9, 6, 1, 12])
    with torch.no_grad():
        batched = rm(sequences.right_pad(seqs, PAD_ID))
        alone = torch.cat([rm(torch.tensor([s])) for s in seqs])
        at_eos = torch.stack([rm.score(rm.transformer.hidden_states(torch.tensor([s]))[0, -1])[0] for s in seqs])
    assert torch.allclose(batched, alone, atol=1e-5)
    assert torch.allclose(batched, at_eos, atol=1e-5)
    assert reward_head.last_token_index(sequences.right_pad(seqs, PAD_ID), PAD_ID).tolist() == [2, 8, 5, 0, 11]


def test_padding_on_the_left_or_a_row_of_padding_is_refused(rm):
    with pytest.raises(ValueError, match="right-padded"):
        rm(torch.tensor([[PAD_ID, 5, 6]]))
    with pytest.raises(ValueError, match="all padding"):
        rm(torch.tensor([[PAD_ID, PAD_ID], [5, 6]]))


def test_layout_and_scores_equal_hugging_faces_gpt2_sequence_classifier(rm):
    """Same weights in transformers' GPT2ForSequenceClassification (pad_token_id set): same scores,
    its own last-token rule included. Our state dict holds its names (Conv1D weights transposed)."""
    transformers = pytest.importorskip("transformers", reason="transformers is in the dev extra")
    from minirl.lm.export import hf_config, hf_state_dict

    names = set(rm.state_dict())
    assert "score.weight" in names and "score.bias" not in names and "transformer.wte.weight" in names
    config = hf_config(rm.transformer, EOS_ID, PAD_ID)
    config.num_labels = 1
    hf = transformers.GPT2ForSequenceClassification(config).eval()
    state = {k: v for k, v in hf_state_dict(rm.transformer).items() if k != "lm_head.weight"}
    state["score.weight"] = rm.score.weight.detach()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith((".attn.bias", ".attn.masked_bias")) for k in missing)
    ids = sequences.right_pad(ragged([4, 10, 7]), PAD_ID)
    with torch.no_grad():
        assert torch.allclose(rm(ids), hf(ids).logits.squeeze(-1), atol=1e-5)


def test_as_reward_fn_scores_what_the_policy_wrote():
    """From completion_ids (what trainers pass) or from text (EOS added unless truncated): the same
    numbers; and every trainer takes it as a reward function."""
    enc = minirl.load_tokenizer()
    rm = reward_head.from_base(tokenizer=enc).eval()
    with torch.no_grad():
        rm.score.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(0))  # not the global RNG: order-free
    fn = rmod.as_reward_fn(rm, enc, normalized=False)
    prompts, completions = ["order:", "order:"], [" one coffee .", " one green tea please"]
    ids = [enc.encode_ordinary(completions[0]) + [enc.eot_token], enc.encode_ordinary(completions[1])]
    from_ids = fn(prompts, completions, completion_ids=ids, truncated=[False, True])
    from_text = fn(prompts, completions, truncated=[False, True])
    assert from_ids == pytest.approx(from_text, rel=1e-6, abs=1e-6)
    assert from_ids[0] == pytest.approx(reward_head.score_texts(rm, ["order: one coffee ."], enc)[0].item(), rel=1e-6, abs=1e-6)
    assert fn(prompts[:1], completions[1:])[0] != pytest.approx(from_ids[1], abs=1e-4)  # EOS is part of the text scored
    policy = minirl.load_model("base")
    history = train_grpo(policy, tasks.orders_task(), GRPOConfig(steps=1, prompts_per_step=2, group_size=2),
                         reward_fn=fn)
    assert math.isfinite(history[0]["reward"])


def test_training_starts_at_log_2_and_learns_the_annotator():
    pairs = datasets.load_preferences("train")[:200]
    rm, history = rmod.train_reward_model(pairs, rmod.RMConfig(steps=40, batch_size=16))
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    report = rmod.order_report(rm)
    assert report["expected_accuracy"] > 0.58 and report["correlation"] > 0.3


def test_imitation_loss_is_the_lm_loss_on_chosen_completions():
    enc = minirl.load_tokenizer()
    pairs = datasets.load_preferences("train")[:4]
    rm = reward_head.from_base(tokenizer=enc)
    batch = sequences.pair_tokens(pairs, enc)
    _, stats = rmod.pair_step_loss(rm, batch, imitation_coef=1.0)
    nll, n = 0.0, 0
    base = minirl.load_model("base")
    with torch.no_grad():
        for r in pairs:
            ids, p = sequences.sequence_ids(enc, r["prompt"], r["chosen"])
            logp = torch.log_softmax(base(torch.tensor([ids[:-1]])), -1)[0]
            nll -= sum(logp[t - 1, ids[t]].item() for t in range(p, len(ids)))
            n += len(ids) - p
    assert stats["imitation_loss"] == pytest.approx(nll / n, abs=1e-4)


def test_normalize_gives_mean_0_sd_1_on_base_samples():
    rm = reward_head.from_base().eval()
    with torch.no_grad():
        rm.score.weight.normal_(0.0, 1.0)
    stats = reward_head.normalize(rm, minirl.load_model("base"), samples=64, seed=3)
    assert stats["std"] > 0
    fn = rmod.as_reward_fn(rm)
    policy = minirl.load_model("base")
    out = minirl.sample(policy, ["order:"], max_new_tokens=16, group_size=64,
                        generator=torch.Generator().manual_seed(3))
    lengths = out.mask.sum(1).long().tolist()
    scores = torch.tensor(fn(out.prompts, out.texts, completion_ids=[r[:n] for r, n in zip(out.tokens.tolist(), lengths)]))
    assert scores.mean().item() == pytest.approx(0.0, abs=1e-5) and scores.std().item() == pytest.approx(1.0, abs=1e-5)


def test_off_support_orders_are_invalid():
    probe = rmod.off_support_orders(50, seed=1)
    assert len(probe) == 50 and all(rewards.order_utility(t) == rewards.INVALID_ORDER_UTILITY for t in probe)


def test_pad_is_not_eos():
    enc = minirl.load_tokenizer()
    assert enc.encode_single_token(PAD) != enc.eot_token


@pytest.mark.parametrize("name", sorted(reward_head.REWARD_MODELS))
def test_shipped_reward_models_match_their_cards(name):
    """The card's metrics are the checkpoint's (re-measured here: exact, no sampling), and the model
    trained on every pair is within 0.03 of the accuracy ceiling."""
    rm, card = reward_head.load_reward_model(name), reward_head.reward_model_card(name)
    report = rmod.order_report(rm)
    for key in ("expected_accuracy", "ceiling", "correlation"):
        assert report[key] == pytest.approx(card["metrics"][key], abs=2e-4), key
    if reward_head.REWARD_MODELS[name]["pairs"] is None:
        assert report["expected_accuracy"] >= report["ceiling"] - 0.03
    assert card["command"] == f"python -m minirl.train.reward_models {name}" and rm.reward_std.item() > 0


@pytest.mark.slow
@pytest.mark.minutes
def test_retraining_on_all_pairs_reaches_the_ceiling_and_the_card():
    """The recorded recipe, re-run: expected accuracy within 0.03 of the ceiling, near the card's."""
    rm, _ = rmod.train_reward_model(datasets.load_preferences("train"), rmod.SHIPPED)
    report = rmod.order_report(rm)
    assert report["expected_accuracy"] >= report["ceiling"] - 0.03
    assert report["expected_accuracy"] == pytest.approx(reward_head.reward_model_card("rm_all")["metrics"]["expected_accuracy"], abs=0.01)


def test_unknown_or_missing_reward_model_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown reward model 'rm_best'.*'rm_100', 'rm_all'"):
        reward_head.load_reward_model("rm_best")
    import shutil
    from minirl.core import paths
    shutil.copytree(paths.data_dir(), tmp_path / "data")
    (tmp_path / "data" / "checkpoints" / "rm_all.pt").unlink()
    monkeypatch.setenv("MINIRL_DATA", str(tmp_path / "data"))
    with pytest.raises(paths.DataError, match="rm_all.pt is missing.*python -m minirl.train.reward_models"):
        reward_head.load_reward_model("rm_all")
