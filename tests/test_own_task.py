"""Homework on a task of one's own: `tasks.custom_task` builds it from a prompt list and a reward
function and refuses bad input at once; the `Task` fields are documented; a trainer config asked
for the completion length says it lives on the task; `group_normalize` given a list names the
fix; and docs/package.md's worked example runs (with 2 steps).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from bad_input import assert_refused_by_minirl

import minirl
from minirl.lm.model import GPTConfig
from minirl.train import DPOConfig, GRPOConfig, PGConfig, PPOConfig, RAFTConfig
from minirl.world import datasets, rewards, tasks

DOCS = Path(__file__).resolve().parent.parent / "docs" / "package.md"
TRAINER_CONFIGS = [GRPOConfig, PPOConfig, PGConfig, RAFTConfig]  # the trainers that take a Task


def kind_words(prompts, completions, **kwargs):
    return [float(sum(w in ("great", "wonderful") for w in c.split())) for c in completions]


# ---------------------------------------------------------------- the Task's fields, documented
def undocumented(cls) -> list[str]:
    """Fields of a dataclass with no line of its docstring that starts with the field's name and
    goes on to say what it is (the house style of the configs)."""
    doc = cls.__doc__ or ""
    return [f.name for f in dataclasses.fields(cls) if not re.search(rf"^ *{f.name} {{2,}}\S", doc, re.M)]


def test_every_task_field_is_documented():
    assert undocumented(tasks.Task) == []


def test_the_documentation_check_catches_a_missing_field():
    """Planted: the Task docstring without its `gold` line."""
    planted = dataclasses.make_dataclass("Task", [(f.name, f.type) for f in dataclasses.fields(tasks.Task)])
    planted.__doc__ = re.sub(r"^ *gold .*\n", "", tasks.Task.__doc__, flags=re.M)
    assert undocumented(planted) == ["gold"]


# ---------------------------------------------------------------- custom_task
def test_a_reward_function_from_a_lesson_gives_the_course_task_rewards():
    """arithmetic_reward through custom_task puts the same rewards on the same tokens as
    arithmetic_task; a score on the wrong token would differ here."""
    prompts = [r["prompt"] for r in datasets.load_prompts("arithmetic", "train")[:4]]
    own = tasks.custom_task("sums", prompts, rewards.arithmetic_reward, max_new_tokens=6)
    course = tasks.arithmetic_task()
    rollout = minirl.sample(minirl.load_model("base"), prompts, max_new_tokens=6, group_size=4,
                            generator=torch.Generator().manual_seed(0))
    enc = minirl.load_tokenizer()
    assert torch.equal(own.token_rewards(rollout, enc), course.token_rewards(rollout, enc))
    assert course.token_rewards(rollout, enc).sum() > 0  # some sums are right: the comparison is not of zeros
    assert own.test_prompts == own.train_prompts == prompts and own.max_new_tokens == 6
    assert own.gold(rollout) == {}  # no gold function: no gold metric


def words(prompts, completions, **kwargs):
    return [float(len(c.split())) for c in completions]


def test_a_gold_function_is_reported_as_its_mean():
    prompts = ["review: the plot was", "review: the cast was"]
    task = tasks.custom_task("kind", prompts, kind_words, gold=words, max_new_tokens=12)
    rollout = minirl.sample(minirl.load_model("base"), prompts, max_new_tokens=12, group_size=4,
                            generator=torch.Generator().manual_seed(0))
    scores = words(rollout.prompts, rollout.texts)
    assert min(scores) > 0 and task.gold(rollout) == {"gold": pytest.approx(sum(scores) / len(scores))}


def test_a_task_that_fills_the_context_exactly_samples_and_one_token_more_is_refused():
    """The check agrees with the sampler: longest prompt + max_new_tokens == n_ctx is fine."""
    prompts = ["review: the plot was", "q: 1+2= a:"]
    longest = max(len(ids) for ids in minirl.load_tokenizer().encode_ordinary_batch(prompts))
    room = GPTConfig.n_ctx - longest
    task = tasks.custom_task("full", prompts, kind_words, max_new_tokens=room)
    minirl.sample(minirl.load_model("base"), task.train_prompts, max_new_tokens=task.max_new_tokens)
    assert_refused_by_minirl(lambda: tasks.custom_task("full", prompts, kind_words, max_new_tokens=room + 1),
                             ValueError, rf"plus max_new_tokens={room + 1} exceeds the context window n_ctx=64: "
                                         rf"ask for at most max_new_tokens={room}")
    with pytest.raises(ValueError, match="exceeds the context window"):  # the sampler would refuse it too, later
        minirl.sample(minirl.load_model("base"), prompts, max_new_tokens=room + 1)


def no_kwargs(prompts, completions):
    return [0.0] * len(completions)


def completions_only(completions, **kwargs):
    return [0.0] * len(completions)


def wants_a_column(prompts, completions, answer, **kwargs):
    return [0.0] * len(completions)


OK = ["review: the plot was"]
BAD = [
    ("an empty prompt list", lambda: tasks.custom_task("t", [], kind_words), ValueError, "prompts is empty"),
    ("one string for the list", lambda: tasks.custom_task("t", "review:", kind_words), TypeError,
     r"not one string: for a single prompt pass \['review:'\]"),
    ("a record where a prompt goes", lambda: tasks.custom_task("t", [{"prompt": "q: 1+2= a:"}], kind_words),
     TypeError, r"prompts\[0\] is dict .*not a string.*\[r\['prompt'\] for r in records\]"),
    ("a number among the prompts", lambda: tasks.custom_task("t", OK + [3], kind_words), TypeError,
     r"prompts\[1\] is int \(3\), not a string"),
    ("an empty prompt", lambda: tasks.custom_task("t", OK + [""], kind_words), ValueError,
     r"prompts\[1\] is the empty string"),
    ("bad test prompts", lambda: tasks.custom_task("t", OK, kind_words, test_prompts=[None]), TypeError,
     r"test_prompts\[0\] is NoneType"),
    ("a reward function without **kwargs", lambda: tasks.custom_task("t", OK, no_kwargs), TypeError,
     "reward function no_kwargs must accept the keyword arguments minirl passes"),
    ("a reward function of the completions only", lambda: tasks.custom_task("t", OK, completions_only), TypeError,
     r"completions_only\(completions, \*\*kwargs\) cannot be called as completions_only\(prompts, completions, "
     r".*too many positional arguments.*\(prompts, completions, \*\*kwargs\)"),
    ("a reward function wanting a dataset column", lambda: tasks.custom_task("t", OK, wants_a_column), TypeError,
     r"wants_a_column.*cannot be called.*missing a required argument: 'answer'"),
    ("a reward that is not a function", lambda: tasks.custom_task("t", OK, [1.0]), TypeError,
     r"reward_fn must be a function reward_fn\(prompts, completions, \*\*kwargs\)"),
    ("a gold function of the wrong signature", lambda: tasks.custom_task("t", OK, kind_words, gold=no_kwargs), TypeError,
     "reward function no_kwargs must accept"),
    ("max_new_tokens 0", lambda: tasks.custom_task("t", OK, kind_words, max_new_tokens=0), ValueError,
     "max_new_tokens must be >= 1"),
    ("max_new_tokens past the context", lambda: tasks.custom_task("t", OK, kind_words, max_new_tokens=100), ValueError,
     r"the longest prompt \(5 tokens, 'review: the plot was'\) plus max_new_tokens=100 exceeds the context window "
     r"n_ctx=64: ask for at most max_new_tokens=59"),
    ("a test prompt past the context", lambda: tasks.custom_task("t", OK, kind_words,
                                                                 test_prompts=["review:" + " the plot was" * 25]),
     ValueError, r"prompt 'review: the plot was the plot was the pl\.\.\.' has \d+ tokens, leaving no room"),
    ("no name", lambda: tasks.custom_task(None, OK, kind_words), TypeError, "name must be a non-empty string"),
]


@pytest.mark.parametrize("call, error, match", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_custom_task_refuses_bad_input_at_once(call, error, match):
    assert_refused_by_minirl(call, error, match)


def test_good_input_to_those_checks_passes():
    """The control for the refusals above: the same calls, mended, build a task."""
    for reward_fn in (kind_words, rewards.arithmetic_reward, lambda prompts, completions, **kw: [0.0] * len(completions),
                      lambda prompts, completions, completion_ids, truncated: [0.0] * len(completions)):
        task = tasks.custom_task("t", ("review: the plot was",), reward_fn, test_prompts=["review: the cast was"],
                                 max_new_tokens=59, gold=kind_words)
        assert task.train_prompts == ["review: the plot was"] and task.test_prompts == ["review: the cast was"]


# ---------------------------------------------------------------- the completion length lives on the task
@pytest.mark.parametrize("config", TRAINER_CONFIGS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", ["max_new_tokens", "max_completion_length", "response_length"])
def test_a_trainer_config_says_the_completion_length_lives_on_the_task(config, name):
    match = rf"^{config.__name__} has no option '{name}': the completion length lives on the task, not in the config"
    with pytest.raises(TypeError, match=match):
        config(**{name: 8})
    with pytest.raises(TypeError, match=match):
        dataclasses.replace(config(), **{name: 8})


def test_a_config_without_a_task_keeps_its_plain_refusal():
    """DPO takes no task: pointing its user at one would mislead."""
    with pytest.raises(TypeError, match=r"^DPOConfig has no option 'max_new_tokens'\. Its options: steps, "):
        DPOConfig(max_new_tokens=8)


def test_the_fixes_the_refusal_names_work():
    message = ""
    try:
        GRPOConfig(max_new_tokens=8)
    except TypeError as e:
        message = str(e)
    assert "dataclasses.replace(tasks.arithmetic_task(), max_new_tokens=8)" in message
    assert dataclasses.replace(tasks.arithmetic_task(), max_new_tokens=8).max_new_tokens == 8
    assert "tasks.custom_task(name, prompts, reward_fn, max_new_tokens=24)" in message
    assert tasks.custom_task("t", OK, kind_words, max_new_tokens=24).max_new_tokens == 24


# ---------------------------------------------------------------- group_normalize given a list
def test_group_normalize_given_a_list_names_the_fix_and_the_fix_works():
    flat, groups = [1.0, 0.0, 0.0, 0.0], [[1.0, 0.0], [0.0, 0.0]]
    for wrong in (flat, groups):
        assert_refused_by_minirl(lambda: minirl.advantages.group_normalize(wrong, 2), TypeError,
                                 r"rewards must be a torch.Tensor of shape \(B,\), got list: pass "
                                 r"torch.tensor\(rewards, dtype=torch.float32\).*add .flatten\(\)")
    expected = minirl.advantages.group_normalize(torch.tensor([1.0, 0.0, 0.0, 0.0]), 2)
    assert torch.equal(minirl.advantages.group_normalize(torch.tensor(flat, dtype=torch.float32), 2), expected)
    assert torch.equal(minirl.advantages.group_normalize(torch.tensor(groups, dtype=torch.float32).flatten(), 2), expected)


# ---------------------------------------------------------------- docs/package.md's worked example
def worked_example() -> str:
    """The first python block under docs/package.md's "Training on your own prompts"."""
    section = DOCS.read_text().split("## Training on your own prompts\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_worked_example_in_the_docs_runs(monkeypatch):
    """Exactly the docs' code, with its GRPOConfig cut to 2 steps (under a second of training): the task
    trains, and the history carries the reward and the gold metric."""
    real = GRPOConfig
    monkeypatch.setattr(minirl.train, "GRPOConfig", lambda **kw: real(**{**kw, "steps": 2}))
    code = worked_example()
    assert "tasks.custom_task(" in code and "train_grpo(" in code
    namespace: dict = {}
    exec(compile(code, str(DOCS), "exec"), namespace)
    history = namespace["history"]
    assert len(history) == 2 and {"reward", "gold"} <= set(history[-1])
    assert namespace["task"].train_prompts == namespace["prompts"]
