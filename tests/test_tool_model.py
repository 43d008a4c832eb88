"""The shipped tool model (`python -m minirl.train.tool_model`) is a start worth training with RL:
it writes calls in the calculator's format, for the prompt's own sum, and a call helps it, but it
calls on only part of the prompts. The live checks parse the episodes with a regular expression of
their own, not the package's parser."""
import re

import torch

import minirl
from minirl.lm.multiturn import calls, sample_episodes
from minirl.world import tasks, tools

EPISODE = re.compile(r"( \[(\d+)\+(\d+)=(\d+)\])? (\d+)")  # an optional call, then the answer


def test_card_records_command_seed_and_metrics_that_leave_room_for_rl():
    card = minirl.lm.model.checkpoint_card("tool")
    assert card["command"].startswith("python -m minirl.train.tool_model") and "seed" in card
    m = card["metrics"]
    assert 0.3 <= m["calls_heldout"] <= 0.8  # calls on part of the prompts only: when to call is left to learn
    assert m["correct_with_call_heldout"] >= m["correct_without_call_heldout"] + 0.25  # a call helps
    assert abs(m["correct_without_call_heldout"] - m["base_correct_heldout"]) <= 0.1  # adding alone is the base's
    assert m["calls_of_the_prompts_sum_heldout"] >= 0.85


def test_live_episodes_call_in_format_for_the_prompts_sum_and_a_call_helps():
    task = tasks.tool_task()
    prompts = task.test_prompts[:64]
    r = sample_episodes(minirl.load_model("tool"), prompts, tools.Calculator(), max_new_tokens=tools.MAX_NEW_TOKENS,
                        group_size=4, generator=torch.Generator().manual_seed(7))
    parsed = [EPISODE.fullmatch(t) for t in r.texts]
    assert sum(m is not None for m in parsed) / len(parsed) >= 0.95
    n_calls = calls(r).tolist()
    rows = [(p, m, c) for p, m, c in zip(r.prompts, parsed, n_calls) if m is not None]
    with_call = [(p, m) for p, m, c in rows if c == 1]
    assert 0.25 <= len(with_call) / len(rows) <= 0.85
    a_b = [tuple(map(int, re.findall(r"\d+", p))) for p, _ in with_call]
    own_sum = [(int(m[2]), int(m[3])) == ab for (p, m), ab in zip(with_call, a_b)]
    assert sum(own_sum) / len(own_sum) >= 0.8
    right = lambda p, m: int(m[5]) == sum(map(int, re.findall(r"\d+", p)))  # noqa: E731
    acc_call = sum(right(p, m) for p, m in with_call) / len(with_call)
    without = [(p, m) for p, m, c in rows if c == 0]
    acc_plain = sum(right(p, m) for p, m in without) / len(without)
    assert acc_call >= acc_plain + 0.2
