"""The shipped base model is a useful start for every later lesson (issue thresholds)."""
import torch

import minirl
from minirl.world import datasets, grammar
from minirl.world.evaluate import sample_family


def test_card_records_command_seed_and_metrics_that_meet_the_targets():
    card = minirl.lm.model.checkpoint_card("base")
    assert card["command"].startswith("python -m minirl.train.pretrain") and "seed" in card
    m = card["metrics"]
    for family in grammar.FAMILIES:
        assert m[family]["valid"] >= 0.95 and m[family]["truncated"] <= 0.05, family
    a = m["arithmetic"]
    assert a["heldout_prompts"] >= 200 and 0.2 <= a["pass@1"] <= 0.6 and a["pass@8"] >= 0.8


def test_live_samples_parse_and_stop():
    model, enc = minirl.load_model("base"), minirl.load_tokenizer()
    g = torch.Generator().manual_seed(123)
    for family in grammar.FAMILIES:
        prompts = [r["prompt"] for r in datasets.load_prompts(family, "test")][:32]
        rows, completions, truncated = sample_family(model, enc, family, prompts, max(1, 64 // len(prompts)), g)
        valid = sum(grammar.VALIDATORS[family](p + c) for p, c in zip(rows, completions)) / len(rows)
        assert valid >= 0.9 and sum(truncated) / len(rows) <= 0.1, family
