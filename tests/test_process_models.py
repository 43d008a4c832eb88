"""The shipped process and outcome reward models (`python -m minirl.train.process_models`): both learn
from the same completions, the PRM each step's label and the ORM the final answer; loaded back, each
gives its card's validation metrics again; the AUC is the share of right-wrong pairs ordered
rightly, ties counting 1/2, checked against a plain double loop."""
import itertools

import pytest

from minirl.lm.process_head import PROCESS_MODELS, load_process_model, process_model_card
from minirl.train import process_models as pm
from minirl.world import steps


def plain_auc(right, wrong):
    pairs = list(itertools.product(right, wrong))
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)


@pytest.mark.parametrize("right, wrong", [([0.9, 0.2, 0.5], [0.1, 0.5, 0.7, 0.05]), ([1.0, 1.0], [1.0, 0.0]),
                                          ([0.3], [0.3]), ([0.1, 0.2], [0.8, 0.9])])
def test_auc_is_the_share_of_pairs_ordered_rightly_ties_half(right, wrong):
    assert pm.auc(right, wrong) == pytest.approx(plain_auc(right, wrong), abs=1e-12)


def test_pick_rate_takes_the_highest_score_and_the_first_on_ties():
    prompts = ["q: 1+2+3= a:"] * 4
    texts = [" 3 6", " 4 7", " 3 6", " 5 8"]  # right, wrong, right, wrong
    assert pm.pick_rate(prompts, texts, [0.1, 0.9, 0.5, 0.2], 4) == 0.0
    assert pm.pick_rate(prompts, texts, [0.7, 0.7, 0.7, 0.7], 4) == 1.0  # the first
    assert pm.pick_rate(prompts, texts, [0.1, 0.2, 0.3, 0.2], 2) == 0.5  # two groups: wrong, then right


def test_both_models_learn_from_the_same_completions(monkeypatch):
    monkeypatch.setattr(pm, "TRAIN_PROMPTS", 3)
    monkeypatch.setattr(pm, "PER_PROMPT", 2)
    pm.completions.cache_clear()
    try:
        prompts, texts = pm.completions("train")
        prm_records, orm_records = pm.records("prm_steps"), pm.records("orm_steps")
    finally:
        pm.completions.cache_clear()
    assert len(prompts) == len(texts) == 2 * 3 * 2
    assert [(r["prompt"], r["steps"]) for r in orm_records] == [(p, [c]) for p, c in zip(prompts, texts)]
    assert [r["labels"] for r in orm_records] == [[float(steps.final_correct(p, c))] for p, c in zip(prompts, texts)]
    labelled = [(p, c) for p, c in zip(prompts, texts) if steps.label_steps(p, c)]
    assert [(r["prompt"], r["steps"]) for r in prm_records] == [(p, [" " + w for w in c.split()]) for p, c in labelled]
    assert [r["labels"] for r in prm_records] == [[float(x) for x in steps.label_steps(p, c)] for p, c in labelled]


@pytest.mark.parametrize("name", sorted(PROCESS_MODELS))
def test_a_shipped_model_gives_its_cards_validation_metrics_again(name):
    card = process_model_card(name)
    assert card["completions"] == 2 * pm.TRAIN_PROMPTS * pm.PER_PROMPT
    got = pm.metrics(load_process_model(name), name)
    for key, value in card["metrics"].items():  # sampled on this CPU: a few prompts may differ
        assert got[key] == pytest.approx(value, abs=0.03), key
