"""Loading the tiny world's files from data/world/ (each checked against the manifest)."""
from __future__ import annotations

import json

from ..core import validate
from ..core.paths import verified_path
from .grammar import FAMILIES

__all__ = ["SPLITS", "load_corpus", "load_prompts", "load_preferences", "load_demos", "load_order_scores"]

SPLITS = ("train", "test")


def _jsonl(relpath: str) -> list[dict]:
    return [json.loads(line) for line in verified_path(relpath).read_text().splitlines()]


def load_corpus(family: str) -> list[str]:
    """Pretraining documents of one family (full texts, without EOS)."""
    validate.choice("family", family, FAMILIES)
    return verified_path(f"world/corpus_{family}.txt").read_text().splitlines()


def load_prompts(family: str, split: str = "test") -> list[dict]:
    """Prompt records ({'prompt': ..., plus family fields such as 'answer' or 'start'}) of a split.

    Arithmetic 'test' prompts use operand pairs that never appear in the corpus (in either order).
    """
    validate.choice("family", family, FAMILIES)
    validate.choice("split", split, SPLITS)
    return [r for r in _jsonl(f"world/prompts_{family}.jsonl") if r.pop("split") == split]


def load_preferences(split: str = "train") -> list[dict]:
    """Order preference pairs {'prompt', 'chosen', 'rejected'}, labelled by a noisy Bradley-Terry annotator."""
    validate.choice("split", split, SPLITS)
    return [r for r in _jsonl("world/order_prefs.jsonl") if r.pop("split") == split]


def load_demos() -> list[dict]:
    """Expert plans {'prompt', 'completion'}, sampled from p(plan) ∝ exp(R(plan))."""
    return _jsonl("world/plan_demos.jsonl")


def load_order_scores(split: str = "train") -> list[dict]:
    """Single orders {'prompt', 'completion', 'annotator', 'score'}, each scored on an absolute scale
    by one of the world's noisy annotators (offset and scale per annotator, noise per score)."""
    validate.choice("split", split, SPLITS)
    return [r for r in _jsonl("world/order_scores.jsonl") if r.pop("split") == split]
