"""Sums of several numbers, written step by step: a task whose every step the world checks.

    q: 12+34+5= a: 46 51

The prompt adds `terms` numbers (3 or 4). The completion writes one partial sum per step, the
last one the answer: step k is the sum of the first k + 1 numbers. The generator knows every
partial sum, so each step's label comes for free and exactly. It keeps every partial sum at most
99, so that each step adds two numbers of the size the base model learned to add: its corpus
has no larger operand, and it got none of 300 sums right whose first number was over 99.

A step's label has two definitions (`LABELS`):

    from_start  right if it equals the true partial sum, as if every step before it were right
    local       right if it adds the next number to the value the step before it wrote (the first
                step adds the first two numbers), so one slip does not make every later step wrong

In " 47 52" for `12+34+5`, the first step is wrong both ways; the second is wrong from the start
(the true sum is 51) and right locally (47 + 5 = 52).

The steps of a completion are its words, split on whitespace. Malformed completions get labels
this way:

    a word that is not a number (no leading zeros: "046", "5.", "[12+34=")  a wrong step
    a step after one that is not a number                                   wrong locally (nothing to add to)
    steps beyond the last partial sum (extra steps)                          wrong
    missing steps, or an empty completion                                    no label (only written steps are labelled)

The outcome is plain arithmetic's: 1 when the completion is well formed (exactly one number per
step, each after a single space: " 46 51") and its last number is the whole sum, whatever the
steps before it; else 0. On a two-number prompt it is `rewards.arithmetic_reward`.
"""
from __future__ import annotations

import itertools
import re

import torch

from ..core import validate
from ..lm.sampling import Rollout
from . import grammar, rewards
from .generate import SEED, stream
from .tasks import Task, last_token_rewards

__all__ = ["TERMS", "N_TRAIN", "N_TEST", "LABELS", "MAX_NEW_TOKENS", "step_prompt", "operands", "partial_sums",
           "step_problems", "draw_operands", "step_values", "is_well_formed", "label_steps", "final_correct",
           "step_accuracy", "steps_reward", "step_label_rewards", "steps_task"]

TERMS = (3, 4)
N_TRAIN, N_TEST = 2000, 300  # distinct operand tuples per number of terms; test never meets train
LABELS = ("from_start", "local")
# Room for a three-digit number per step (one token per digit) and EOS; a right step has at most two digits.
MAX_NEW_TOKENS = {terms: 3 * (terms - 1) + 1 for terms in TERMS}
PROMPT = re.compile(r"q: ((?:0|[1-9][0-9]?)(?:\+(?:0|[1-9][0-9]?))+)= a:")  # numbers 0 to 99, no leading zeros
NUMBER = re.compile(r"0|[1-9][0-9]*")


def step_prompt(numbers: tuple[int, ...]) -> str:
    """The prompt that asks for the sum of `numbers`: (12, 34, 5) -> 'q: 12+34+5= a:'."""
    return f"q: {'+'.join(str(x) for x in numbers)}= a:"


def operands(prompt: str) -> tuple[int, ...]:
    """The numbers a prompt adds; a ValueError for a prompt that is not a sum like 'q: 12+34+5= a:'."""
    m = PROMPT.fullmatch(prompt) if isinstance(prompt, str) else None
    if m is None:
        raise ValueError(f"{prompt!r} is not a sum prompt like 'q: 12+34+5= a:' (numbers 0 to 99, without leading zeros, joined by '+')")
    return tuple(int(x) for x in m[1].split("+"))


def partial_sums(numbers: tuple[int, ...]) -> list[int]:
    """The true value of each step: the sum of the first k + 1 numbers, for k = 1 .. len(numbers) - 1."""
    return list(itertools.accumulate(numbers))[1:]


def step_problems(terms: int = 3, split: str = "train", seed: int = SEED) -> list[dict]:
    """The task's prompts with their step labels: {'prompt', 'operands', 'partial_sums'} for each of
    N_TRAIN (split 'train') or N_TEST ('test') distinct operand tuples, uniform over the tuples whose
    sum is at most 99 (`grammar.MAX_OPERAND`). They are drawn from a random stream of their own
    (`generate.stream`): a pure function of the seed that moves no file of the world."""
    validate.choice("terms", terms, TERMS)
    validate.choice("split", split, ("train", "test"))
    drawn = draw_operands(stream(seed, f"steps{terms}"), terms, N_TRAIN + N_TEST)
    drawn = drawn[:N_TRAIN] if split == "train" else drawn[N_TRAIN:]
    return [{"prompt": step_prompt(numbers), "operands": numbers, "partial_sums": partial_sums(numbers)}
            for numbers in drawn]


def draw_operands(rng, terms: int, n: int) -> list[tuple[int, ...]]:
    """n distinct tuples of `terms` numbers, uniform over those whose sum is at most MAX_OPERAND
    (each tuple drawn uniformly from 0..99 per number, kept if its sum fits and it is new)."""
    kept: dict[tuple[int, ...], None] = {}  # insertion-ordered set
    while len(kept) < n:
        numbers = tuple(rng.randrange(grammar.MAX_OPERAND + 1) for _ in range(terms))
        if sum(numbers) <= grammar.MAX_OPERAND:
            kept.setdefault(numbers)
    return list(kept)


def step_values(completion: str) -> list[int | None]:
    """Each step of a completion: its whitespace-separated words, as numbers (None where a word is not one)."""
    return [int(w) if NUMBER.fullmatch(w) else None for w in completion.split()]


def is_well_formed(prompt: str, completion: str) -> bool:
    """Exactly one number per step, each after a single space: ' 46 51' for a three-number prompt."""
    values = step_values(completion)
    return (len(values) == len(operands(prompt)) - 1 and None not in values
            and completion == "".join(f" {v}" for v in values))


def label_steps(prompt: str, completion: str, mode: str = "from_start") -> list[bool]:
    """One label per written step: is it right, `from_start` (equals the true partial sum) or
    `local` (adds the next number to the step before it)? The module's docstring says how
    malformed completions are labelled."""
    validate.choice("mode", mode, LABELS)
    numbers = operands(prompt)
    truth = partial_sums(numbers)
    labels, previous = [], numbers[0]
    for k, value in enumerate(step_values(completion)):
        if k >= len(truth):
            right = False
        elif mode == "from_start":
            right = value == truth[k]
        else:
            right = value is not None and previous is not None and value == previous + numbers[k + 1]
        labels.append(right)
        previous = value
    return labels


def final_correct(prompt: str, completion: str) -> bool:
    """The outcome: well formed, and the last step is the whole sum."""
    return is_well_formed(prompt, completion) and step_values(completion)[-1] == sum(operands(prompt))


def step_accuracy(prompt: str, completion: str, mode: str = "from_start") -> float:
    """The share of steps right: right steps over the steps written or expected, whichever is more
    (a missing step and an extra one both count against it)."""
    labels = label_steps(prompt, completion, mode)
    return sum(labels) / max(len(labels), len(operands(prompt)) - 1)


def steps_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 if the final answer is right (`final_correct`), else 0.0: the outcome reward, a verifier."""
    return [1.0 if final_correct(p, c) else 0.0 for p, c in rewards.pairs(prompts, completions)]


def step_label_rewards(prompts: list[str], completions: list[str], mode: str = "from_start",
                       **kwargs) -> list[list[float]]:
    """The process reward: for each completion, 1.0 or 0.0 per written step (`label_steps`), a list
    per completion where the course's reward functions return one number."""
    return [[float(x) for x in label_steps(p, c, mode)] for p, c in rewards.pairs(prompts, completions)]


def steps_task(terms: int = 3) -> Task:
    """Sums of `terms` numbers written step by step: the outcome, 1 for the right final answer, at
    the last token. Gold: the share right ('correct'), well formed ('well_formed') and the step
    accuracy from the start and locally ('step_accuracy', 'step_accuracy_local')."""
    validate.choice("terms", terms, TERMS)

    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        return last_token_rewards(rollout, steps_reward(rollout.prompts, rollout.texts))

    def gold(rollout: Rollout) -> dict[str, float]:
        rows = list(zip(rollout.prompts, rollout.texts))
        return {"correct": sum(final_correct(p, c) for p, c in rows) / len(rows),
                "well_formed": sum(is_well_formed(p, c) for p, c in rows) / len(rows),
                "step_accuracy": sum(step_accuracy(p, c, "from_start") for p, c in rows) / len(rows),
                "step_accuracy_local": sum(step_accuracy(p, c, "local") for p, c in rows) / len(rows)}

    def prompts(split):
        return [r["prompt"] for r in step_problems(terms, split)]
    return Task(f"steps{terms}", prompts("train"), prompts("test"), MAX_NEW_TOKENS[terms], token_rewards, gold)
