"""Bad input to (prompt, response) sequences, the reward model, SFT and the Hugging Face export: each
gets an error from minirl itself, of a stated type, whose message names what was wrong. And legal
degenerate input (a single pair, identical chosen and rejected, an empty completion) keeps working.

Each case is (id, call, exception type, a regex the message must match), as in test_bad_input.py.
"""
from __future__ import annotations

import functools
import math
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from bad_input import assert_refused_by_minirl

import minirl
from minirl.lm import export, reward_head, sequences
from minirl.lm.critic import ValueHead
from minirl.lm.model import GPT, GPTConfig
from minirl.lm.tokenizer import PAD
from minirl.train import reward_model as rmod, reward_models, sft

TINY = GPTConfig(n_ctx=64, n_embd=32, n_layer=1, n_head=2)
PAIR = {"prompt": "order:", "chosen": " one tea please .", "rejected": " tea tea ."}
DEMO = {"prompt": "order:", "completion": " one tea please ."}
SCORED = {"prompt": "order:", "completion": " one tea please .", "score": 1.0}
NEVER = Path(tempfile.gettempdir()) / "minirl-export-never-written"  # a refused export writes nothing here
STEP = rmod.RMConfig(steps=1, batch_size=2)
SFT_STEP = sft.SFTConfig(steps=1, batch_size=2)


@functools.cache
def enc():
    return minirl.load_tokenizer()


@functools.cache
def rm():
    return reward_head.load_reward_model("rm_100")


def tiny(seed=0):
    torch.manual_seed(seed)
    return GPT(TINY).eval()


def eos_padded():
    """A reward model whose pad id was set to EOS after construction (what export must refuse)."""
    model = reward_head.from_base(tiny())
    model.pad_token_id = enc().eot_token
    return model


def ids_of(text):
    return enc().encode_ordinary(text) + [enc().eot_token]


CASES = [
    # ------------------------------------------------------------ preference pairs
    ("pair_tokens: a pair without 'rejected'", lambda: sequences.pair_tokens([{"prompt": "order:", "chosen": " tea ."}], enc()),
     ValueError, r"pairs\[0\] has no 'rejected'.*'prompt', 'chosen', 'rejected'"),
    ("pair_tokens: no pairs", lambda: sequences.pair_tokens([], enc()), ValueError, "pairs must be a non-empty list"),
    ("pair_tokens: one pair, not a list", lambda: sequences.pair_tokens(PAIR, enc()), ValueError, "pairs must be a non-empty list"),
    ("pair_tokens: a prompt that is None", lambda: sequences.pair_tokens([{**PAIR, "prompt": None}], enc()), TypeError,
     r"pairs\[0\]\['prompt'\] must be a string, got None"),
    ("pair_tokens: a tuple where a pair goes", lambda: sequences.pair_tokens([("order:", " tea .", " tea tea .")], enc()),
     TypeError, r"pairs\[0\] must be a dict"),
    ("pair_tokens: a label of 2", lambda: sequences.pair_tokens([{**PAIR, "label": 2}], enc()), ValueError,
     r"pairs\[0\]\['label'\] must be a finite number in \[0, 1\]"),
    ("pair_tokens: a label as text", lambda: sequences.pair_tokens([{**PAIR, "label": "chosen"}], enc()), TypeError,
     r"pairs\[0\]\['label'\] must be a number"),
    ("train_reward_model: a pair without 'rejected'",
     lambda: rmod.train_reward_model([PAIR, {"prompt": "order:", "chosen": " tea ."}], STEP, base=tiny()), ValueError,
     r"pairs\[1\] has no 'rejected'"),
    ("train_reward_model: no pairs", lambda: rmod.train_reward_model([], STEP, base=tiny()), ValueError, "non-empty list"),
    ("train_reward_model: one pair, not a list", lambda: rmod.train_reward_model(PAIR, STEP, base=tiny()), ValueError,
     "non-empty list"),
    ("train_reward_model: a config of SFT", lambda: rmod.train_reward_model([PAIR], SFT_STEP, base=tiny()), TypeError,
     "config must be an RMConfig"),
    ("train_reward_model: base a name", lambda: rmod.train_reward_model([PAIR], STEP, base="base"), TypeError,
     "base must be a minirl GPT"),
    ("pair_metrics: a pair without 'rejected'", lambda: rmod.pair_metrics(rm(), [{"prompt": "order:", "chosen": " tea ."}]),
     ValueError, r"pairs\[0\] has no 'rejected'"),
    ("pair_metrics: no pairs", lambda: rmod.pair_metrics(rm(), []), ValueError, "non-empty list"),
    ("pair_metrics: a GPT for the reward model", lambda: rmod.pair_metrics(tiny(), [PAIR]), TypeError,
     "rm must be a minirl RewardModel"),
    ("chosen_demos: a pair without 'chosen'", lambda: sft.chosen_demos([{"prompt": "order:", "rejected": " tea ."}]),
     ValueError, r"pairs\[0\] has no 'chosen'"),
    # ------------------------------------------------------------ demonstrations (SFT)
    ("train_sft: {'prompt', 'response'} demonstrations",
     lambda: sft.train_sft(tiny(), [{"prompt": "order:", "response": " tea ."}], SFT_STEP), ValueError,
     r"demos\[0\] has no 'completion'.*'prompt' and 'completion'"),
    ("train_sft: a prompt that is None", lambda: sft.train_sft(tiny(), [{**DEMO, "prompt": None}], SFT_STEP), TypeError,
     r"demos\[0\]\['prompt'\] must be a string, got None"),
    ("train_sft: a completion as token ids", lambda: sft.train_sft(tiny(), [{**DEMO, "completion": [1, 2]}], SFT_STEP),
     TypeError, r"demos\[0\]\['completion'\] must be a string"),
    ("heldout_loss: {'prompt', 'response'} demonstrations",
     lambda: sft.heldout_loss(tiny(), [{"prompt": "order:", "response": " tea ."}]), ValueError, r"demos\[0\] has no 'completion'"),
    ("heldout_loss: no demonstrations", lambda: sft.heldout_loss(tiny(), []), ValueError, "non-empty list"),
    ("heldout_loss: one demonstration, not a list", lambda: sft.heldout_loss(tiny(), DEMO), ValueError, "non-empty list"),
    ("heldout_loss: a reward model for the model", lambda: sft.heldout_loss(rm(), [DEMO]), TypeError, "model must be a minirl GPT"),
    ("heldout_loss: batch_size 0", lambda: sft.heldout_loss(tiny(), [DEMO], batch_size=0), ValueError, "batch_size must be >= 1"),
    ("sft.fit: no demonstrations", lambda: sft.fit(tiny(), [], SFT_STEP, 505), ValueError, "no demonstrations"),
    # ------------------------------------------------------------ scored records
    ("train_on_scores: a record without 'score'", lambda: rmod.train_on_scores([DEMO], STEP, base=tiny()), ValueError,
     r"records\[0\] has no 'score'"),
    ("train_on_scores: a NaN score", lambda: rmod.train_on_scores([{**SCORED, "score": math.nan}], STEP, base=tiny()),
     ValueError, r"records\[0\]\[.score.\] is nan: each score must be a finite number"),
    ("train_on_scores: a score as text", lambda: rmod.train_on_scores([{**SCORED, "score": "good"}], STEP, base=tiny()),
     TypeError, r"records\[0\]\['score'\] must be a number"),
    ("train_on_scores: no records", lambda: rmod.train_on_scores([], STEP, base=tiny()), ValueError, "non-empty list"),
    ("train_on_scores: one record, not a list", lambda: rmod.train_on_scores(SCORED, STEP, base=tiny()), ValueError,
     "non-empty list"),
    ("train_on_scores: a prompt that is None", lambda: rmod.train_on_scores([{**SCORED, "prompt": None}], STEP, base=tiny()),
     TypeError, r"records\[0\]\['prompt'\] must be a string"),
    # ------------------------------------------------------------ token ids into the reward model
    ("score_ids: strings for token ids", lambda: reward_head.score_ids(rm(), ["order: one tea ."]), TypeError,
     r"seqs\[0\] must be a list of int token ids.*str"),
    ("score_ids: one sequence, not a list of them", lambda: reward_head.score_ids(rm(), ids_of(" tea .")), TypeError,
     r"seqs\[0\] must be a list of int token ids.*int"),
    ("score_ids: item names in a sequence", lambda: reward_head.score_ids(rm(), [["order:", " tea"]]), TypeError,
     r"seqs\[0\] must be a list of int token ids"),
    ("score_ids: float ids", lambda: reward_head.score_ids(rm(), [[1.0, 2.0]]), TypeError, r"seqs\[0\] must be a list of int"),
    ("score_ids: a (B, T) tensor", lambda: reward_head.score_ids(rm(), torch.zeros(2, 3, dtype=torch.long)), TypeError,
     r"seqs must be a list of token-id lists.*tolist\(\)"),
    ("score_ids: an id outside the vocabulary", lambda: reward_head.score_ids(rm(), [[1, 2, 999]]), ValueError,
     r"seqs\[0\] must lie in \[0, 506\)"),
    ("score_ids: a negative id", lambda: reward_head.score_ids(rm(), [[5, 6], [-100, 3]]), ValueError,
     r"seqs\[1\] must lie in \[0, 506\)"),
    ("score_ids: an empty sequence", lambda: reward_head.score_ids(rm(), [ids_of(" tea ."), []]), ValueError,
     r"seqs\[1\] is empty"),
    ("score_ids: longer than n_ctx", lambda: reward_head.score_ids(rm(), [[7] * 65]), ValueError,
     r"seqs\[0\] has 65 tokens.*n_ctx=64"),
    ("score_ids: a GPT for the reward model", lambda: reward_head.score_ids(tiny(), [[1, 2]]), TypeError,
     "rm must be a minirl RewardModel"),
    ("score_ids: batch_size 0", lambda: reward_head.score_ids(rm(), [[1, 2]], batch_size=0), ValueError,
     "batch_size must be >= 1"),
    ("score_texts: ids for texts", lambda: reward_head.score_texts(rm(), [[1, 2]]), TypeError, r"texts\[0\] must be a string"),
    ("as_reward_fn: completion_ids as text", lambda: rmod.as_reward_fn(rm())(["order:"], [" tea ."], completion_ids=[" tea ."]),
     TypeError, r"completion_ids\[0\] must be a list of int token ids"),
    ("as_reward_fn: completion_ids outside the vocabulary",
     lambda: rmod.as_reward_fn(rm())(["order:"], [" tea ."], completion_ids=[[3, 600]]), ValueError,
     r"completion_ids\[0\] must lie in \[0, 506\)"),
    ("as_reward_fn: -100 in completion_ids",
     lambda: rmod.as_reward_fn(rm())(["order:"], [" tea ."], completion_ids=[[3, -100]]), ValueError,
     r"completion_ids\[0\] must lie in \[0, 506\)"),
    ("as_reward_fn: prompt and completion longer than n_ctx",
     lambda: rmod.as_reward_fn(rm())(["order:"], [" tea" * 70], truncated=[False]), ValueError,
     r"completion 0 with its prompt is \d+ tokens.*n_ctx=64"),
    ("as_reward_fn: completion_ids of another length",
     lambda: rmod.as_reward_fn(rm())(["order:", "order:"], [" tea .", " tea ."], completion_ids=[[3]]), ValueError,
     "1 completion_ids for 2 completions"),
    ("as_reward_fn: truncated of another length",
     lambda: rmod.as_reward_fn(rm())(["order:", "order:"], [" tea .", " tea ."], truncated=[False]), ValueError,
     "1 truncated flags for 2 completions"),
    # ------------------------------------------------------------ the reward head
    ("RewardModel: pad id is EOS", lambda: reward_head.RewardModel(tiny(), pad_token_id=enc().eot_token), ValueError,
     "pad_token_id=504 is EOS.*read one token early.*505"),
    ("RewardModel: pad id outside the vocabulary", lambda: reward_head.RewardModel(tiny(), pad_token_id=50256), ValueError,
     r"pad_token_id must lie in \[0, 506\)"),
    ("RewardModel: pad id as a string", lambda: reward_head.RewardModel(tiny(), pad_token_id=PAD), TypeError,
     "pad_token_id must be an integer"),
    ("RewardModel: a trunk that is a name", lambda: reward_head.RewardModel("base", 505), TypeError, "trunk must be a minirl GPT"),
    ("normalize: one sample", lambda: reward_head.normalize(rm(), tiny(), samples=1), ValueError, "samples must be >= 2"),
    ("normalize: policy a reward model", lambda: reward_head.normalize(rm(), rm(), samples=4), TypeError,
     "policy must be a minirl GPT"),
    ("load_reward_model: a typo", lambda: reward_head.load_reward_model("rm_al"), ValueError,
     "unknown reward model 'rm_al'.*did you mean 'rm_all'.*'rm_100', 'rm_all'"),
    ("reward_models.build: a typo", lambda: reward_models.build("rm_al"), ValueError, "unknown reward model 'rm_al'"),
    ("from_base: a device that is not there", lambda: reward_head.from_base(tiny(), device="gpu"), ValueError,
     "unknown device 'gpu'"),
    ("from_base: base a name", lambda: reward_head.from_base("base"), TypeError, "base must be a minirl GPT"),
    # ------------------------------------------------------------ export
    ("to_hf_reward_model: pad id set to EOS", lambda: export.to_hf_reward_model(eos_padded()), ValueError,
     "pad_token_id=504 is EOS"),
    ("save: a reward model with pad id EOS", lambda: export.save(NEVER, tiny(),
                                                                 reward_model=eos_padded()), ValueError, "pad_token_id=504 is EOS"),
    ("save: a reward model as the policy", lambda: export.save(NEVER, rm()), TypeError,
     "policy must be a minirl GPT"),
    ("save: a GPT as the reward model", lambda: export.save(NEVER, tiny(), reward_model=tiny()),
     TypeError, "reward_model must be a minirl RewardModel"),
    ("save: a critic that is only a head", lambda: export.save(NEVER, tiny(),
                                                              critic=ValueHead(32)), TypeError, r"critic must be a \(trunk, head\)"),
]


@pytest.mark.parametrize("label, call, error, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(label, call, error, match):
    assert_refused_by_minirl(call, error, match)
    assert not NEVER.exists(), "a refused export wrote its folder"


def test_export_onto_a_file_is_refused(tmp_path):
    pytest.importorskip("transformers")
    target = tmp_path / "model.safetensors"
    target.write_text("not a folder")
    with pytest.raises(ValueError, match="model.safetensors is a file.*folder"):
        export.save(target, tiny())
    assert target.read_text() == "not a folder"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "reward_model").write_text("a file where the reward model's folder goes")
    with pytest.raises(ValueError, match="reward_model is a file"):
        export.save(tmp_path / "out", tiny(), reward_model=reward_head.from_base(tiny()))


def test_export_into_a_non_empty_folder_writes_over_it(tmp_path):
    """A folder that holds an earlier export (or anything else) is written into: the models' files
    are replaced, other files are left alone; the lesson can be run twice."""
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    first, second = tiny(0), tiny(1)
    (tmp_path / "notes.txt").write_text("mine")
    export.save(tmp_path, first)
    export.save(tmp_path, second)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([ids_of(" tea .")])
    with torch.no_grad():
        assert (hf(ids).logits - second(ids)).abs().max() <= 1e-5
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_typo_on_the_command_line_names_the_reward_models(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["reward_models", "rm_al"])
    with pytest.raises(SystemExit) as info:
        reward_models.main()
    assert info.value.code == 2
    assert "did you mean 'rm_all'" in capsys.readouterr().err


def test_from_base_puts_the_model_where_asked():
    """By default on the base's device (the CPU for the shipped base model); `device` moves it. The
    trainers (no device argument: their signatures are frozen) train on the base's device."""
    assert {p.device.type for p in reward_head.from_base(tiny()).parameters()} == {"cpu"}
    model = reward_head.from_base(device="cpu")
    assert {p.device.type for p in model.parameters()} == {"cpu"} and model.pad_token_id == enc().encode_single_token(PAD)
    if torch.cuda.is_available():
        assert {p.device.type for p in reward_head.from_base(device="cuda").parameters()} == {"cuda"}
        assert {p.device.type for p in reward_head.from_base(tiny().cuda()).parameters()} == {"cuda"}
        assert {p.device.type for p in reward_head.from_base(tiny().cuda(), device="cpu").parameters()} == {"cpu"}
        model, _ = rmod.train_reward_model([PAIR], STEP, base=tiny().cuda())
        assert {p.device.type for p in model.parameters()} == {"cuda"}
        model, _ = rmod.train_on_scores([SCORED], STEP, base=tiny().cuda())
        assert {p.device.type for p in model.parameters()} == {"cuda"}


# ---------------------------------------------------------------- legal degenerate input keeps working
def test_a_single_pair_and_identical_chosen_and_rejected_train_and_measure():
    same = {"prompt": "order:", "chosen": " one tea .", "rejected": " one tea ."}
    model, history = rmod.train_reward_model([same], STEP, base=tiny())
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-6) and history[0]["accuracy"] == 0.5
    metrics = rmod.pair_metrics(model, [same])
    assert metrics["accuracy"] == 0.5 and metrics["loss"] == pytest.approx(math.log(2), abs=1e-6)
    model, history = rmod.train_reward_model([PAIR], STEP, base=tiny())  # one pair, a batch of two
    assert len(history) == 1 and math.isfinite(history[0]["loss"])


def test_a_single_demonstration_and_an_empty_completion_train_and_measure():
    empty = {"prompt": "order:", "completion": ""}  # the response is EOS alone
    assert sequences.demo_tokens([empty], enc()) == [(enc().encode_ordinary("order:") + [enc().eot_token], 2)]
    history = sft.train_sft(tiny(), [empty], SFT_STEP)
    assert len(history) == 1 and math.isfinite(history[0]["loss"])
    assert math.isfinite(sft.heldout_loss(tiny(), [DEMO]))
    assert math.isfinite(sft.heldout_loss(tiny(), [empty]))
    model, history = rmod.train_on_scores([{**SCORED, "completion": "", "score": 0}], STEP, base=tiny())
    assert math.isfinite(history[0]["loss"])


def test_legal_token_ids_score_as_before():
    seqs = [ids_of(" tea ."), ids_of(" one tea please ."), [7] * 64, [3]]  # a full context and a single token
    scores = reward_head.score_ids(rm(), seqs)
    assert scores.shape == (4,) and torch.isfinite(scores).all()
    assert reward_head.score_ids(rm(), [tuple(seqs[0])]).item() == reward_head.score_ids(rm(), seqs[:1]).item()  # a tuple
    assert reward_head.score_ids(rm(), []).shape == (0,)  # nothing to score: an empty result
    pad_written = reward_head.score_ids(rm(), [ids_of(" tea")[:-1] + [rm().pad_token_id]])  # a policy may write <|pad|>
    assert torch.isfinite(pad_written).all()
    fn = rmod.as_reward_fn(rm())
    got = fn(["order:"] * 3, ["", " tea .", " tea ."], completion_ids=[[], ids_of(" tea .")[0:], torch.tensor(ids_of(" tea ."))])
    assert len(got) == 3 and got[1] == got[2]  # a tensor row of ids is read as its list
    assert fn([], []) == []
    stats = reward_head.normalize(reward_head.from_base(tiny()), tiny(), samples=2)
    assert math.isfinite(stats["std"])
