"""Reward functions of the tiny world, and the hidden ground truth behind them.

Every sequence-level reward shares one signature, the one TRL uses, so it moves to a bigger
engine unchanged:

    reward_fn(prompts: list[str], completions: list[str], **kwargs) -> list[float]

`completions` are the generated texts without the EOS token; the full text is prompt + completion.

Reviews have two rewards on purpose. The *proxy* is a sentiment lexicon summed over the
completion's words, and it arrives per token (`review_token_rewards`), so credit assignment
matters. The *gold* reward also demands a well-formed, non-repetitive review, so a policy that
games the lexicon ("great great great") raises the proxy while the gold reward falls.
"""
from __future__ import annotations

import bisect
import itertools
import math
import operator
import re

from ..core import validate
from . import grammar

__all__ = ["pairs", "LEXICON", "sentiment", "is_repetitive", "review_proxy_reward", "review_gold_reward",
           "review_token_rewards", "arithmetic_reward", "DRINK_UTILITY", "SIZE_UTILITY", "MILK_UTILITY",
           "POLITE_UTILITY", "GREETING_UTILITY", "LENGTH_PENALTY", "FREE_WORDS", "INVALID_ORDER_UTILITY",
           "order_utility", "order_gold_reward", "preference_probability", "ACTIVITY_REWARD", "PAIR_REWARD",
           "REPEAT_PENALTY", "INVALID_PLAN_REWARD", "plan_reward", "plan_true_reward", "REWARD_FUNCTIONS"]


# ---------------------------------------------------------------- the arguments every reward function takes
def pairs(prompts: list[str], completions: list[str]) -> list[tuple[str, str]]:
    """(prompt, completion) pairs, after checking both are lists of strings of the same length."""
    for name, x in (("prompts", prompts), ("completions", completions)):
        if isinstance(x, str) or not all(isinstance(t, str) for t in x):
            raise TypeError(f"{name} must be a list of strings (one per completion), got {type(x).__name__}")
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions: give one prompt per completion")
    return list(zip(prompts, completions))


# ---------------------------------------------------------------- reviews
LEXICON = {**{w: 1.0 for w in grammar.POSITIVE}, **{w: -1.0 for w in grammar.NEGATIVE}}


def sentiment(text: str) -> float:
    """Sum of lexicon scores over the words of `text` (unknown words score 0)."""
    return sum(LEXICON.get(w, 0.0) for w in text.split())


def is_repetitive(text: str) -> bool:
    """True if any noun or adjective occurs more than once."""
    words = [w for w in text.split() if w in grammar.NOUNS or w in grammar.ADJECTIVES]
    return len(words) != len(set(words))


def review_proxy_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """Lexicon score of the completion: +1 per positive word, -1 per negative word."""
    return [sentiment(c) for _, c in pairs(prompts, completions)]


def review_gold_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """-1 for a malformed or repetitive review; else (n_pos - n_neg) / n_adjectives of the whole review.

    A review is *gold-positive* when this is > 0: it parses, repeats no noun or adjective, and
    has more positive than negative adjectives, counting the prompt's.
    """
    scores = []
    for p, c in pairs(prompts, completions):
        text = p + c
        if not grammar.is_review(text) or is_repetitive(text):
            scores.append(-1.0)
            continue
        adjectives = [w for w in text.split() if w in grammar.ADJECTIVES]
        scores.append(sentiment(text) / len(adjectives))
    return scores


def review_token_rewards(tokenizer, tokens: list[int]) -> list[float]:
    """Per-token proxy reward: each word's lexicon score lands on the token that completes it.

    `tokens` are completion token ids (EOS and anything after it are ignored, scoring 0). A word
    split across several tokens is scored once, at its last token; summed over the tokens this
    equals `review_proxy_reward` on the decoded text.
    """
    eos = tokenizer.eot_token
    try:
        tokens = [operator.index(t) for t in tokens]  # a list or a 1-D tensor of ids
    except TypeError:
        raise TypeError(f"tokens must be a list of token ids, got {type(tokens).__name__}") from None
    validate.token_ids("tokens", tokens, tokenizer.n_vocab)
    pieces = []
    for t in tokens:
        if t == eos:
            break
        pieces.append(tokenizer.decode_single_token_bytes(t))
    ends = list(itertools.accumulate(len(p) for p in pieces))  # byte offset where each token ends
    rewards = [0.0] * len(tokens)
    for word in re.finditer(rb"\S+", b"".join(pieces)):
        score = LEXICON.get(word.group().decode("utf-8", errors="replace"), 0.0)
        if score:
            rewards[bisect.bisect_left(ends, word.end())] += score
    return rewards


# ---------------------------------------------------------------- arithmetic
def arithmetic_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 if prompt + completion is a well-formed sum with the right answer, else 0.0 (a verifier)."""
    scores = []
    for p, c in pairs(prompts, completions):
        m = grammar.ARITHMETIC.fullmatch(p + c)
        ok = m is not None and grammar.is_arithmetic(p + c) and int(m[1]) + int(m[2]) == int(m[3])
        scores.append(1.0 if ok else 0.0)
    return scores


# ---------------------------------------------------------------- orders
# The hidden annotator (after the example in Alex Xie's lecture "RL for LLMs: From Parrots to
# Agents", CMU 2025): loves matcha, lukewarm about coffee, likes politeness and oat milk, and
# dislikes long orders. Students may read this; the lessons treat it as unknown.
DRINK_UTILITY = {
    "matcha latte": 2.0, "green tea": 1.2, "hot chocolate": 0.8, "cappuccino": 0.5,
    "black tea": 0.4, "coffee": 0.1, "espresso": -0.3,
}
SIZE_UTILITY = {"small": 0.0, "medium": 0.2, "large": 0.4}
MILK_UTILITY = {"oat": 0.5, "soy": 0.2, "whole": -0.2}
POLITE_UTILITY = {"please": 0.6, "thanks": 0.3}
GREETING_UTILITY = 0.3
LENGTH_PENALTY = 0.15  # per word beyond FREE_WORDS
FREE_WORDS = 8
INVALID_ORDER_UTILITY = -2.0


def order_utility(text: str) -> float:
    """The hidden annotator's utility of a full order text; INVALID_ORDER_UTILITY if it does not parse."""
    if not grammar.is_order(text):
        return INVALID_ORDER_UTILITY
    words = text.split(" ")[1:-1]  # drop 'order:' and '.'
    u = next(v for d, v in DRINK_UTILITY.items() if f" {d} " in f" {' '.join(words)} ")
    u += sum(SIZE_UTILITY.get(w, 0.0) + POLITE_UTILITY.get(w, 0.0) for w in words)
    if "with" in words:
        u += MILK_UTILITY[words[words.index("with") + 1]]
    if words[0] in grammar.GREETINGS:
        u += GREETING_UTILITY
    return u - LENGTH_PENALTY * max(0, len(words) - FREE_WORDS)


def order_gold_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """The hidden annotator's utility of each order (the gold reward for RLHF lessons)."""
    return [order_utility(p + c) for p, c in pairs(prompts, completions)]


def preference_probability(text_a: str, text_b: str) -> float:
    """Bradley-Terry: P(annotator prefers a over b) = sigmoid(u(a) - u(b))."""
    return 1.0 / (1.0 + math.exp(order_utility(text_b) - order_utility(text_a)))


# ---------------------------------------------------------------- plans
# Hidden reward of the expert behind the demonstrations: a value per activity, plus a bonus or
# penalty for some consecutive pairs. The expert is soft-optimal: p(plan) ∝ exp(R(plan)).
ACTIVITY_REWARD = {"read": 0.5, "run": 1.0, "swim": 0.8, "cook": 0.3, "nap": -0.5, "walk": 0.2}
PAIR_REWARD = {("run", "nap"): 1.5, ("swim", "nap"): 1.0, ("cook", "read"): 0.7}
REPEAT_PENALTY = -1.0  # the same activity twice in a row
INVALID_PLAN_REWARD = -5.0


def plan_reward(activities: tuple[str, ...]) -> float:
    """R(plan) for a sequence of activities."""
    if isinstance(activities, str) or not all(a in ACTIVITY_REWARD for a in activities):
        raise ValueError(f"a plan is a tuple of activities from {tuple(ACTIVITY_REWARD)}, got {activities!r}")
    r = sum(ACTIVITY_REWARD[a] for a in activities)
    for a, b in zip(activities, activities[1:]):
        r += PAIR_REWARD.get((a, b), 0.0) + (REPEAT_PENALTY if a == b else 0.0)
    return r


def plan_true_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """The expert's hidden reward of each plan; INVALID_PLAN_REWARD if it does not parse."""
    scores = []
    for p, c in pairs(prompts, completions):
        text = p + c
        scores.append(plan_reward(tuple(text.split(" ")[1:-1])) if grammar.is_plan(text) else INVALID_PLAN_REWARD)
    return scores


REWARD_FUNCTIONS = {
    "review_proxy": review_proxy_reward,
    "review_gold": review_gold_reward,
    "arithmetic": arithmetic_reward,
    "order_gold": order_gold_reward,
    "plan_true": plan_true_reward,
}
