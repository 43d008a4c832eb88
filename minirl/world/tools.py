"""A calculator for the arithmetic family: the model may call it before it answers.

    q: 47+38= a: [47+38=85] 85

The policy writes " [47+38=" (a call: the sum it wants worked out, closed by "="), the calculator
writes "85]", and the policy writes its own answer, " 85", then EOS. Without a call the episode is
the plain "q: 47+38= a: 85". A call the calculator cannot read ("[47+=", "[4+38+1=") gets "?]".

The calculator is exact and free to run, but each call may cost the policy `cost` (a per-turn
reward of -cost), so calling is worth it only where the policy alone would often be wrong. It
checks nothing about the call: a call of the wrong sum gets that sum's right answer.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

import tiktoken

from ..core import validate
from ..lm.multiturn import Reply
from ..lm.sequences import DEMO_FORM, check_records
from . import rewards

__all__ = ["CALL_END", "MAX_NEW_TOKENS", "CALL", "EPISODE", "Calculator", "tool_episode", "parse_episode", "operands",
           "without_call", "tool_reward", "tool_demos", "demo_tokens"]

CALL_END = "="  # the token that closes a call
MAX_NEW_TOKENS = 20  # a call, its answer and a three-digit answer take 14 tokens with EOS
CALL = re.compile(r" \[(\d{1,2})\+(\d{1,2})=$")  # a readable call, at the end of the episode so far
PROMPT = re.compile(r"q: (\d{1,2})\+(\d{1,2})= a:")  # an arithmetic prompt: the operands
# a whole completion: an optional call with the calculator's answer, then the policy's answer
EPISODE = re.compile(r"(?: \[([^\]\[]*)=(\d{1,3}|\?)\])? (\d{1,3})")


@dataclass
class Calculator:
    """The environment of `minirl.lm.multiturn.sample_episodes` for arithmetic: answers a call with
    the sum it asks for (or "?"), and rewards the turn with -cost."""
    cost: float = 0.0
    call_end: str = CALL_END

    def __post_init__(self):
        validate.number("cost", self.cost)
        if not isinstance(self.call_end, str):
            raise TypeError(f"call_end must be a string, the one token that ends a call (such as {CALL_END!r}); "
                            f"got {self.call_end!r} ({type(self.call_end).__name__})")

    def respond(self, prompt: str, episode: str) -> Reply:
        check_text("episode", episode, "the text after the prompt so far, such as ' [47+38='")
        m = CALL.search(episode)
        return Reply(f"{int(m[1]) + int(m[2]) if m else '?'}]", reward=-self.cost)


def check_text(name: str, value, example: str) -> None:
    """Check `value` is a string (`example` says which)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, {example}; got {value!r:.60} ({type(value).__name__})")


def check_strings(name: str, values, example: str) -> None:
    """Check `values` is a non-empty list (or tuple) of strings; one string is refused with the fix."""
    if isinstance(values, str):
        raise TypeError(f"{name} must be a list of strings, not a single string: wrap it in [ ], e.g. [{values!r:.40}]")
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list of strings, e.g. [{example!r}]; got {type(values).__name__}")
    if not values:
        raise ValueError(f"{name} is empty: pass a list of at least one string, e.g. [{example!r}]")
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{i}] must be a string, e.g. {example!r}; got {v!r:.60} ({type(v).__name__})")


def check_prompts(name: str, prompts) -> None:
    """Check `prompts` is a non-empty list of the arithmetic task's prompts ('q: 17+25= a:')."""
    check_strings(name, prompts, "q: 17+25= a:")
    for i, p in enumerate(prompts):
        if PROMPT.fullmatch(p) is None:
            raise ValueError(f"{name}[{i}] = {p!r:.60} is not an arithmetic prompt like 'q: 17+25= a:' (two numbers "
                             "below 100): the calculator works on the arithmetic task's prompts, such as "
                             "minirl.world.tasks.tool_task().test_prompts")


def tool_episode(a: int, b: int, call: bool) -> str:
    """The completion of `a+b` that a demonstration writes: with a call of the right sum, or without."""
    a, b = validate.integer("a", a, minimum=0), validate.integer("b", b, minimum=0)
    if not isinstance(call, bool):
        raise TypeError(f"call must be True (a call of the sum first) or False, got {call!r} ({type(call).__name__})")
    return f" [{a}+{b}={a + b}] {a + b}" if call else f" {a + b}"


def parse_episode(completion: str) -> tuple[str | None, int | None] | None:
    """(the call's text or None, the policy's final answer) of a completion in the tool format;
    None if it is not in that format."""
    check_text("completion", completion, "one completion such as ' [47+38=85] 85' (for a list, parse each)")
    m = EPISODE.fullmatch(completion)
    return None if m is None else (m[1], int(m[3]))


def operands(prompt: str) -> tuple[int, int]:
    """(a, b) of an arithmetic prompt 'q: a+b= a:'."""
    check_text("prompt", prompt, "an arithmetic prompt such as 'q: 17+25= a:'")
    m = PROMPT.fullmatch(prompt)
    if m is None:
        raise ValueError(f"prompt {prompt!r} is not an arithmetic prompt like 'q: 17+25= a:'")
    return int(m[1]), int(m[2])


def without_call(completion: str) -> str:
    """The completion less its call and the calculator's answer: the policy's own answer, as plain
    arithmetic writes it (" 85"); a completion not in the tool format, unchanged."""
    check_text("completion", completion, "a completion such as ' [47+38=85] 85'")
    m = EPISODE.fullmatch(completion)
    return completion if m is None else f" {m[3]}"


def tool_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """The outcome: plain arithmetic's verifier (`rewards.arithmetic_reward`) on the policy's final
    answer, after any call. The calls' costs are per-turn rewards, given by the `Calculator`."""
    return rewards.arithmetic_reward(prompts, [without_call(c) for _, c in rewards.pairs(prompts, completions)])


def tool_demos(prompts: list[str], direct: list[str] | None = None, call_share: float = 0.5, seed: int = 0) -> list[dict]:
    """Demonstrations for SFT: on a random `call_share` of the prompts, whatever their operands, a
    call of the right sum and the right answer; on the others, `direct`'s completion for that
    prompt (for example the base model's own sample, right or wrong, so that SFT teaches how to
    call and not the sums themselves), or the right answer when `direct` is None."""
    check_prompts("prompts", prompts)
    if direct is not None:
        check_strings("direct", direct, " 42")
    validate.number("call_share", call_share, 0.0, 1.0)
    seed = validate.integer("seed", seed, minimum=-2**63)
    if direct is not None and len(direct) != len(prompts):
        raise ValueError(f"{len(direct)} direct completions for {len(prompts)} prompts: give one per prompt")
    rng = random.Random(seed)
    return [{"prompt": p, "completion": tool_episode(*operands(p), call=True) if rng.random() < call_share
             else (tool_episode(*operands(p), call=False) if direct is None else direct[i])}
            for i, p in enumerate(prompts)]


def demo_tokens(demos: list[dict], enc=None) -> list[tuple[list[int], int, list[int]]]:
    """Each demonstration as SFT items (`minirl.train.sft.fit`): (prompt + completion + EOS ids,
    prompt length, the positions the calculator wrote). A call's parts are encoded apart, as
    `sample_episodes` sees them: the policy's text up to "=", the calculator's answer, the rest.
    The calculator's positions are context, not targets: cloning them would teach the policy to
    write sums where the calculator writes them (`minirl.train.tool_model`'s docstring says what that did)."""
    check_records(demos, "demos", ("prompt", "completion"), DEMO_FORM)
    if not isinstance(enc, tiktoken.Encoding):
        raise TypeError("demo_tokens needs the tokenizer: demo_tokens(demos, minirl.load_tokenizer()), a "
                        f"tiktoken.Encoding; got {type(enc).__name__}")
    items = []
    for d in demos:
        ids = enc.encode_ordinary(d["prompt"])
        prompt_len, env = len(ids), []
        m = EPISODE.fullmatch(d["completion"])
        cut = [] if m is None or m[1] is None else [m.start(2), m.end(2) + 1]  # the answer and its "]"
        for i, (start, end) in enumerate(zip([0, *cut], [*cut, len(d["completion"])])):
            part = enc.encode_ordinary(d["completion"][start:end])
            env += list(range(len(ids), len(ids) + len(part))) if i == 1 else []
            ids += part
        items.append((ids + [enc.eot_token], prompt_len, env))
    return items
