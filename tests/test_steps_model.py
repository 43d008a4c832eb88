"""The shipped steps model (`python -m minirl.train.steps_model`) is a start worth training with RL
and with process rewards: it writes sums step by step in the task's format, gets part of the
final answers right, and adds at each step not far below the base model asked that step alone.
Its demonstrations chain the base model's plain sums, each step adding to the value written
before it (a planted chain that adds to the true partial sum is caught). The live check parses
samples with a regular expression of its own."""
import re

import torch

import minirl
from minirl.train import steps_model
from minirl.world import steps

WELL_FORMED = {3: re.compile(r" (0|[1-9]\d*) (0|[1-9]\d*)"), 4: re.compile(r" (0|[1-9]\d*) (0|[1-9]\d*) (0|[1-9]\d*)")}


def slipping_adder(model, pairs, generator):
    """A stand-in for the base model's plain sums: right, except one too many when a + b is a multiple of 3."""
    return [a + b + (1 if (a + b) % 3 == 0 else 0) for a, b in pairs]


def plain_chain(numbers):
    """The chain written by a plain loop: each step adds the next number to the step written before it."""
    written, previous = [], numbers[0]
    for x in numbers[1:]:
        previous = slipping_adder(None, [(previous, x)], None)[0]
        written.append(previous)
    return "".join(f" {v}" for v in written)


def chain_mismatches(chain, problems):
    """Problems where `chain`, with the slipping adder in place of the model, differs from the plain loop."""
    return [(p["prompt"], c) for p, c in zip(problems, chain(None, problems, None)) if c != plain_chain(p["operands"])]


def chain_from_the_truth(model, problems, generator):
    """A planted mistake: each step adds to the true partial sum, not to the value written before it."""
    out = []
    for p in problems:
        starts = [p["operands"][0], *p["partial_sums"][:-1]]
        values = steps_model.add_alone(model, list(zip(starts, p["operands"][1:])), None)
        out.append("".join(f" {v}" for v in values))
    return out


def test_a_chain_adds_each_step_to_the_value_written_before_it_and_a_planted_chain_from_the_truth_is_caught(monkeypatch):
    monkeypatch.setattr(steps_model, "add_alone", slipping_adder)
    problems = steps.step_problems(3, "train")[:100] + steps.step_problems(4, "train")[:100]
    assert chain_mismatches(steps_model.chain_steps, problems) == []
    assert len(chain_mismatches(chain_from_the_truth, problems)) >= 20
    # the slips leave steps right locally and wrong from the start: the two labels differ
    completions = steps_model.chain_steps(None, problems, None)
    assert any(steps.label_steps(p["prompt"], c, "local") != steps.label_steps(p["prompt"], c, "from_start")
               for p, c in zip(problems, completions))


def test_one_number_reads_a_plain_sums_answer_and_refuses_anything_else():
    assert steps_model.one_number(" 46") == 46 and steps_model.one_number(" 0") == 0
    assert steps_model.one_number(" 146") == 146  # a slip past 99 is still a step
    for text in ("", " ", "46", " 046", " 4 6", " 46 ", " 46.", " x"):
        assert steps_model.one_number(text) is None, text


def test_card_records_command_seed_and_rates_that_leave_room_for_rl():
    card = minirl.lm.model.checkpoint_card("steps")
    assert card["command"].startswith("python -m minirl.train.steps_model") and "seed" in card
    m = card["metrics"]
    for terms in steps.TERMS:
        assert m[f"model_well_formed_{terms}"] >= 0.9 and m[f"base_well_formed_{terms}"] <= 0.05
        assert 0.05 <= m[f"model_correct_{terms}"] <= 0.8  # room for RL
        assert m[f"base_alone_well_formed_{terms}"] == 1.0  # the chained demonstrations are in format
        # each step not far below the base model asked it alone (11 and 9 points below, on the card)
        assert m[f"base_alone_step_accuracy_local_{terms}"] - 0.15 <= m[f"model_step_accuracy_local_{terms}"]


def test_live_samples_are_in_format():
    model = minirl.load_model("steps")
    for terms in steps.TERMS:
        prompts = [p["prompt"] for p in steps.step_problems(terms, "test")[:64]]
        texts = minirl.lm.sampling.sample(model, prompts, max_new_tokens=steps.MAX_NEW_TOKENS[terms],
                                          generator=torch.Generator().manual_seed(7)).texts
        assert sum(WELL_FORMED[terms].fullmatch(t) is not None for t in texts) / len(texts) >= 0.85
