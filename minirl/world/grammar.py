"""The grammar of the tiny world: its words, and a validator per task family.

Four families, each a prompt format the base model saw in pretraining (words are separated by
single spaces; punctuation is a word of its own):

    reviews      review: the plot was dull but the cast was very charming . the ending was fun .
    arithmetic   q: 17+25= a: 42
    orders       order: hi , one large matcha latte with oat milk please .
    plans        plan: read swim cook nap .

A validator answers one question: does this text parse under the family's grammar? It knows
nothing about sentiment, correctness or utility; those are rewards (`minirl.world.rewards`).
"""
from __future__ import annotations

import re

__all__ = ["NOUNS", "POSITIVE", "NEGATIVE", "NEUTRAL", "ADJECTIVES", "INTENSIFIERS", "CONNECTIVES", "MAX_CLAUSES",
           "MAX_OPERAND", "ARITHMETIC", "GREETINGS", "SIZES", "DRINKS", "MILKS", "POLITE", "ACTIVITIES",
           "PLAN_LENGTH", "FAMILIES", "MAX_NEW_TOKENS", "PROMPT_HEADS", "family_of", "is_review", "is_arithmetic",
           "is_order", "is_plan", "VALIDATORS", "is_valid"]

# ---------------------------------------------------------------- reviews
NOUNS = ("movie", "film", "plot", "acting", "story", "cast", "ending", "music", "script", "dialogue")
POSITIVE = ("great", "wonderful", "brilliant", "superb", "charming", "moving", "fun", "delightful")
NEGATIVE = ("awful", "dull", "boring", "terrible", "weak", "bad", "messy", "clumsy")
NEUTRAL = ("long", "short", "quiet", "simple")
ADJECTIVES = POSITIVE + NEGATIVE + NEUTRAL
INTENSIFIERS = ("very", "really", "quite")
CONNECTIVES = ("and", "but")
MAX_CLAUSES = 3  # a review has 1-2 sentences and at most 3 clauses in all

# ---------------------------------------------------------------- arithmetic
MAX_OPERAND = 99
ARITHMETIC = re.compile(r"q: (\d{1,2})\+(\d{1,2})= a: (\d{1,3})")

# ---------------------------------------------------------------- orders
GREETINGS = ("hi", "hello")
SIZES = ("small", "medium", "large")
DRINKS = ("matcha latte", "green tea", "black tea", "hot chocolate", "cappuccino", "coffee", "espresso")
MILKS = ("oat", "soy", "whole")
POLITE = ("please", "thanks")

# ---------------------------------------------------------------- plans
ACTIVITIES = ("read", "run", "swim", "cook", "nap", "walk")
PLAN_LENGTH = 4

FAMILIES = ("reviews", "arithmetic", "orders", "plans")
# Completion budget per family: the longest well-formed completion plus room to spare. Reaching
# it ends the episode (it is part of the MDP), and the row counts as truncated.
MAX_NEW_TOKENS = {"reviews": 24, "arithmetic": 6, "orders": 16, "plans": 8}
PROMPT_HEADS = {"reviews": "review:", "arithmetic": "q:", "orders": "order:", "plans": "plan:"}


def family_of(text: str) -> str:
    """Which family a text belongs to, by its first word."""
    head = text.split(" ", 1)[0]
    for family, word in PROMPT_HEADS.items():
        if head == word:
            return family
    raise ValueError(f"text does not start with a family head {sorted(PROMPT_HEADS.values())}: {text[:40]!r}")


def _parse_clause(words: list[str], i: int) -> int | None:
    """Parse `the NOUN was [INTENSIFIER] ADJ` at words[i:]; return the next index or None."""
    if words[i : i + 1] != ["the"] or i + 2 >= len(words):
        return None
    if words[i + 1] not in NOUNS or words[i + 2] != "was":
        return None
    j = i + 3
    if j < len(words) and words[j] in INTENSIFIERS:
        j += 1
    if j < len(words) and words[j] in ADJECTIVES:
        return j + 1
    return None


def is_review(text: str) -> bool:
    """review := 'review:' sentence+ ; sentence := clause (CONNECTIVE clause)? '.' ; <= 3 clauses."""
    words = text.split(" ")
    if words[0] != "review:":
        return False
    i, clauses, sentences = 1, 0, 0
    while i < len(words):
        for k in range(2):  # at most two clauses per sentence
            i = _parse_clause(words, i)
            if i is None:
                return False
            clauses += 1
            if k == 0 and i < len(words) and words[i] in CONNECTIVES:
                i += 1
            else:
                break
        if i >= len(words) or words[i] != ".":
            return False
        i += 1
        sentences += 1
    return sentences >= 1 and clauses <= MAX_CLAUSES


def is_arithmetic(text: str) -> bool:
    """arithmetic := 'q: ' a '+' b '= a: ' c, with 0 <= a, b <= 99 and c a number without leading zeros."""
    m = ARITHMETIC.fullmatch(text)
    if m is None:
        return False
    return all(g == str(int(g)) for g in m.groups())


def is_order(text: str) -> bool:
    """order := 'order:' [GREETING ','] 'one' [SIZE] DRINK ['with' MILK 'milk'] [POLITE] '.'"""
    words = text.split(" ")
    if words[0] != "order:" or words[-1] != ".":
        return False
    rest = words[1:-1]
    if rest[:1] and rest[0] in GREETINGS:
        if rest[1:2] != [","]:
            return False
        rest = rest[2:]
    if rest[:1] != ["one"]:
        return False
    rest = rest[1:]
    if rest[:1] and rest[0] in SIZES:
        rest = rest[1:]
    drink = next((d for d in DRINKS if rest[: len(d.split())] == d.split()), None)
    if drink is None:
        return False
    rest = rest[len(drink.split()) :]
    if rest[:1] == ["with"]:
        if len(rest) < 3 or rest[1] not in MILKS or rest[2] != "milk":
            return False
        rest = rest[3:]
    if rest[:1] and rest[0] in POLITE:
        rest = rest[1:]
    return rest == []


def is_plan(text: str) -> bool:
    """plan := 'plan:' ACTIVITY{4} '.'"""
    words = text.split(" ")
    return (
        len(words) == PLAN_LENGTH + 2
        and words[0] == "plan:"
        and words[-1] == "."
        and all(w in ACTIVITIES for w in words[1:-1])
    )


VALIDATORS = {"reviews": is_review, "arithmetic": is_arithmetic, "orders": is_order, "plans": is_plan}


def is_valid(text: str) -> bool:
    """Does `text` (prompt + completion, without EOS) parse under its family's grammar?"""
    try:
        family = family_of(text)
    except ValueError:
        return False
    return VALIDATORS[family](text)
