"""Bad input to multi-turn sampling (`minirl.lm.multiturn`), the calculator (`minirl.world.tools`)
and the tool model's report (`minirl.train.tool_model`): each gets an error from minirl itself, of a
stated type, whose message names what was wrong. And legal input keeps working, with the same numbers.

Each case is (id, call, exception type, a regex the message must match), as in tests/test_bad_input.py.
"""
from __future__ import annotations

import functools
import random

import numpy as np
import pytest
import torch

from bad_input import assert_refused_by_minirl

import minirl
from minirl.lm import multiturn, sequences
from minirl.lm.multiturn import Reply
from minirl.train import tool_model
from minirl.world import tools

PROMPTS = ["q: 7+5= a:", "q: 38+47= a:"]


@functools.cache
def model():
    return minirl.load_model("base")


@functools.cache
def enc():
    return minirl.load_tokenizer()


@functools.cache
def plain_rollout():
    """A single-turn rollout (plain sampling): no action_mask."""
    return minirl.sample(model(), PROMPTS, max_new_tokens=4, generator=torch.Generator().manual_seed(0))


def episodes(env=None, prompts=PROMPTS, **kw):
    return multiturn.sample_episodes(model(), prompts, tools.Calculator() if env is None else env,
                                     max_new_tokens=kw.pop("max_new_tokens", tools.MAX_NEW_TOKENS), **kw)


def demos():
    return tools.tool_demos(PROMPTS, seed=0)


CASES = [
    # ------------------------------------------------------------ multiturn.sample_episodes, turns, calls
    ("sample_episodes: the Calculator class", lambda: episodes(tools.Calculator), TypeError,
     r"not the class Calculator: pass Calculator\(\), an instance"),
    ("sample_episodes: no environment", lambda: episodes(object()), TypeError, "env must have a call_end string"),
    ("sample_episodes: one prompt string", lambda: episodes(prompts=PROMPTS[0]), TypeError,
     "prompts must be a list of strings, not a single string"),
    ("sample_episodes: prompts None", lambda: episodes(prompts=None), TypeError, "prompts must be a list of strings"),
    ("sample_episodes: no prompts", lambda: episodes(prompts=[]), ValueError, "no prompts given"),
    ("sample_episodes: max_calls -1", lambda: episodes(max_calls=-1), ValueError, "max_calls must be >= 0"),
    ("sample_episodes: max_calls 1.5", lambda: episodes(max_calls=1.5), TypeError, "max_calls must be an integer"),
    ("sample_episodes: a seed for the generator", lambda: episodes(generator=0), TypeError,
     "generator must be a torch.Generator"),
    ("sample_episodes: a tokenizer's name", lambda: episodes(tokenizer="gpt2"), TypeError,
     "tokenizer must be a tiktoken.Encoding"),
    ("turns: a single-turn rollout", lambda: multiturn.turns(plain_rollout()), ValueError,
     "needs a multi-turn rollout.*sample_episodes"),
    ("calls: a single-turn rollout", lambda: multiturn.calls(plain_rollout()), ValueError,
     "needs a multi-turn rollout"),
    ("turns: a tensor", lambda: multiturn.turns(torch.ones(2, 3)), TypeError, "rollout must be a minirl Rollout"),
    ("calls: texts", lambda: multiturn.calls(["q: 1+1= a: 2"]), TypeError, "rollout must be a minirl Rollout"),
    ("Reply: text None", lambda: Reply(None), TypeError, "a Reply's text must be a string"),
    ("Reply: reward a string", lambda: Reply("85]", reward="-0.1"), TypeError, "a Reply's reward must be a number"),
    ("Reply: reward NaN", lambda: Reply("85]", reward=float("nan")), ValueError, "a Reply's reward must be a finite"),
    # ------------------------------------------------------------ tools
    ("Calculator: cost a string", lambda: tools.Calculator(cost="0.1"), TypeError, "cost must be a number"),
    ("Calculator: call_end a token id", lambda: tools.Calculator(call_end=28), TypeError, "call_end must be a string"),
    ("Calculator.respond: episode token ids", lambda: tools.Calculator().respond(PROMPTS[0], [58, 61]), TypeError,
     "episode must be a string"),
    ("tool_demos: one prompt string", lambda: tools.tool_demos(PROMPTS[0]), TypeError,
     r"prompts must be a list of strings, not a single string: wrap it in \[ \]"),
    ("tool_demos: one direct string", lambda: tools.tool_demos(PROMPTS[:1], direct=" 12"), TypeError,
     r"direct must be a list of strings, not a single string: wrap it in \[ \]"),
    ("tool_demos: no prompts", lambda: tools.tool_demos([]), ValueError, "prompts is empty"),
    ("tool_demos: token ids for a prompt", lambda: tools.tool_demos([[113, 58]]), TypeError,
     r"prompts\[0\] must be a string"),
    ("tool_demos: a prompt of another task", lambda: tools.tool_demos([PROMPTS[0], "order:"]), ValueError,
     r"prompts\[1\] = 'order:' is not an arithmetic prompt"),
    ("tool_demos: direct of None entries", lambda: tools.tool_demos(PROMPTS, direct=[None, None]), TypeError,
     r"direct\[0\] must be a string"),
    ("tool_demos: direct too short", lambda: tools.tool_demos(PROMPTS, direct=[" 12"]), ValueError,
     "1 direct completions for 2 prompts"),
    ("tool_demos: call_share 2", lambda: tools.tool_demos(PROMPTS, call_share=2), ValueError,
     r"call_share must be .*\[0, 1\]"),
    ("tool_demos: seed 0.5", lambda: tools.tool_demos(PROMPTS, seed=0.5), TypeError, "seed must be an integer"),
    ("demo_tokens: no tokenizer", lambda: tools.demo_tokens(demos()), TypeError,
     r"demo_tokens needs the tokenizer: demo_tokens\(demos, minirl.load_tokenizer\(\)\)"),
    ("demo_tokens: the tokenizer's name", lambda: tools.demo_tokens(demos(), "minirl"), TypeError,
     "demo_tokens needs the tokenizer.*got str"),
    ("demo_tokens: one demonstration dict", lambda: tools.demo_tokens(demos()[0], enc()), ValueError,
     "demos must be a non-empty list"),
    ("parse_episode: None", lambda: tools.parse_episode(None), TypeError, "completion must be a string"),
    ("parse_episode: a list of completions", lambda: tools.parse_episode([" 12"]), TypeError,
     "completion must be a string.*parse each"),
    ("without_call: None", lambda: tools.without_call(None), TypeError, "completion must be a string"),
    ("operands: a prompt of another task", lambda: tools.operands("order:"), ValueError,
     "prompt 'order:' is not an arithmetic prompt"),
    ("operands: token ids", lambda: tools.operands([113, 58]), TypeError, "prompt must be a string"),
    ("tool_episode: a string operand", lambda: tools.tool_episode("4", 5, True), TypeError, "a must be an integer"),
    ("tool_episode: a negative operand", lambda: tools.tool_episode(4, -5, True), ValueError, "b must be >= 0"),
    ("tool_episode: call 'yes'", lambda: tools.tool_episode(4, 5, "yes"), TypeError, "call must be True"),
    ("tool_reward: one completion string", lambda: tools.tool_reward(PROMPTS[:1], " 12"), TypeError,
     "completions must be a list of strings"),
    # ------------------------------------------------------------ tool_model
    ("tool_report: prompts of another task", lambda: tool_model.tool_report(model(), ["order:", "order:"]), ValueError,
     r"prompts\[0\] = 'order:' is not an arithmetic prompt.*tool_task\(\).test_prompts"),
    ("tool_report: one prompt string", lambda: tool_model.tool_report(model(), PROMPTS[0]), TypeError,
     r"wrap it in \[ \]"),
    ("tool_report: samples 0", lambda: tool_model.tool_report(model(), PROMPTS, samples=0), ValueError,
     "samples must be >= 1"),
    ("tool_report: seed a generator", lambda: tool_model.tool_report(model(), PROMPTS, seed=torch.Generator()),
     TypeError, "seed must be an integer"),
    ("tool_report: a model's name", lambda: tool_model.tool_report("tool", PROMPTS), TypeError,
     r"model must be a minirl GPT, e.g. minirl.load_model\('tool'\)"),
    ("base_samples: a prompt of another task", lambda: tool_model.base_samples(["plan:"], 0), ValueError,
     r"prompts\[0\] = 'plan:' is not an arithmetic prompt"),
    ("base_samples: seed None", lambda: tool_model.base_samples(PROMPTS, None), TypeError, "seed must be an integer"),
    ("build: seed a string", lambda: tool_model.build("0"), TypeError, "seed must be an integer"),
]


@pytest.mark.parametrize("label, call, error, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(label, call, error, match):
    assert_refused_by_minirl(call, error, match)


# ---------------------------------------------------------------- legal input keeps working


def test_episodes_turns_and_calls_of_legal_input():
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    r = episodes(group_size=2, generator=g())
    again = episodes(prompts=tuple(PROMPTS), group_size=2, generator=g(), max_calls=np.int64(1))  # a tuple, a NumPy int
    assert torch.equal(r.tokens, again.tokens) and r.texts == again.texts
    t, c = multiturn.turns(r), multiturn.calls(r)
    assert t.shape == r.tokens.shape and c.shape == (4,) and int(c.max()) <= 1
    assert bool((t[r.mask == 0] == -1).all()) and bool((t[r.mask.bool()] >= 0).all())
    assert Reply("85]", reward=-1).reward == -1 and Reply("?]").reward == 0.0


def test_the_calculator_and_the_parsers():
    calc = tools.Calculator(cost=0.25)
    assert calc.respond(PROMPTS[1], " [38+47=") == Reply("85]", reward=-0.25)
    assert calc.respond(PROMPTS[1], " [38+=") == Reply("?]", reward=-0.25)
    assert tools.Calculator(cost=np.float32(0.5)).respond("", "").reward == -0.5
    assert tools.parse_episode(" [38+47=85] 85") == ("38+47", 85) and tools.parse_episode(" 85") == (None, 85)
    assert tools.parse_episode("eighty-five") is None and tools.without_call("eighty-five") == "eighty-five"
    assert tools.without_call(" [38+47=85] 85") == " 85" and tools.operands(PROMPTS[1]) == (38, 47)
    assert tools.tool_episode(38, 47, True) == " [38+47=85] 85" and tools.tool_episode(np.int64(0), 0, False) == " 0"
    assert tools.tool_reward(PROMPTS, [" [7+5=12] 12", " 84"]) == [1.0, 0.0]


def test_demos_and_their_tokens_are_as_before():
    got = tools.tool_demos(PROMPTS * 4, direct=[" 1"] * 8, call_share=0.5, seed=np.int64(7))
    assert got == tools.tool_demos(list(PROMPTS * 4), direct=(" 1",) * 8, seed=7)
    rng = random.Random(7)  # the draw, as it always was
    want = [(tools.tool_episode(*tools.operands(p), call=True) if rng.random() < 0.5 else " 1") for p in PROMPTS * 4]
    assert [d["completion"] for d in got] == want
    assert all(d["completion"] == tools.tool_episode(*tools.operands(d["prompt"]), call=False) or "[" in d["completion"]
               for d in tools.tool_demos(PROMPTS, call_share=0.0))
    items = tools.demo_tokens(got, enc())
    for d, (ids, prompt_len, env) in zip(got, items):
        if "[" not in d["completion"]:  # no call: what sequences.demo_tokens gives, nothing the calculator's
            assert (ids, prompt_len) == sequences.demo_tokens([d], enc())[0] and env == []
        else:
            assert enc().decode([ids[i] for i in env]) == d["completion"].split("=")[1].split()[0]


def test_tool_report_of_legal_prompts():
    report = tool_model.tool_report(model(), PROMPTS, samples=np.int64(2), seed=1)
    assert set(report) == {"correct", "calls", "correct_with_call", "correct_without_call", "calls_of_the_prompts_sum"}
    assert all(0.0 <= v <= 1.0 for v in report.values())
    assert report == tool_model.tool_report(model(), PROMPTS, samples=2, seed=1)
