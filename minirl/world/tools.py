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

from ..core import validate
from ..lm.multiturn import Reply
from ..lm.sequences import DEMO_FORM, check_records
from . import rewards

__all__ = ["CALL_END", "MAX_NEW_TOKENS", "CALL", "EPISODE", "Calculator", "tool_episode", "parse_episode", "operands",
           "without_call", "tool_reward", "tool_demos", "demo_tokens"]

CALL_END = "="  # the token that closes a call
MAX_NEW_TOKENS = 20  # a call, its answer and a three-digit answer take 14 tokens with EOS
CALL = re.compile(r" \[(\d{1,2})\+(\d{1,2})=$")  # a readable call, at the end of the episode so far
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

    def respond(self, prompt: str, episode: str) -> Reply:
        m = CALL.search(episode)
        return Reply(f"{int(m[1]) + int(m[2]) if m else '?'}]", reward=-self.cost)


def tool_episode(a: int, b: int, call: bool) -> str:
    """The completion of `a+b` that a demonstration writes: with a call of the right sum, or without."""
    return f" [{a}+{b}={a + b}] {a + b}" if call else f" {a + b}"


def parse_episode(completion: str) -> tuple[str | None, int | None] | None:
    """(the call's text or None, the policy's final answer) of a completion in the tool format;
    None if it is not in that format."""
    m = EPISODE.fullmatch(completion)
    return None if m is None else (m[1], int(m[3]))


def operands(prompt: str) -> tuple[int, int]:
    m = re.fullmatch(r"q: (\d{1,2})\+(\d{1,2})= a:", prompt)
    if m is None:
        raise ValueError(f"{prompt!r} is not an arithmetic prompt like 'q: 17+25= a:'")
    return int(m[1]), int(m[2])


def without_call(completion: str) -> str:
    """The completion less its call and the calculator's answer: the policy's own answer, as plain
    arithmetic writes it (" 85"); a completion not in the tool format, unchanged."""
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
    validate.number("call_share", call_share, 0.0, 1.0)
    if direct is not None and len(direct) != len(prompts):
        raise ValueError(f"{len(direct)} direct completions for {len(prompts)} prompts: give one per prompt")
    rng = random.Random(seed)
    return [{"prompt": p, "completion": tool_episode(*operands(p), call=True) if rng.random() < call_share
             else (tool_episode(*operands(p), call=False) if direct is None else direct[i])}
            for i, p in enumerate(prompts)]


def demo_tokens(demos: list[dict], enc) -> list[tuple[list[int], int, list[int]]]:
    """Each demonstration as SFT items (`minirl.train.sft.fit`): (prompt + completion + EOS ids,
    prompt length, the positions the calculator wrote). A call's parts are encoded apart, as
    `sample_episodes` sees them: the policy's text up to "=", the calculator's answer, the rest.
    The calculator's positions are context, not targets: cloning them would teach the policy to
    write sums where the calculator writes them (`minirl.train.tool_model`'s docstring says what that did)."""
    check_records(demos, "demos", ("prompt", "completion"), DEMO_FORM)
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
