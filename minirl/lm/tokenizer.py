"""Byte-level BPE: a small trainer written here, and the trained ranks loaded into tiktoken.

Training (`train_bpe`) is the textbook loop: split the text into pre-tokens with a regex, start
from single bytes, and repeatedly merge the most frequent adjacent pair. It counts each distinct
pre-token once with its frequency, which is what makes it fast on a corpus of few distinct
words; ties go to the pair seen first, as in tiktoken's educational trainer, so both produce the
same merges (tested).

Encoding uses `tiktoken.Encoding` built in memory from the shipped ranks: fast, and it never
downloads anything (unlike `tiktoken.get_encoding`).

The split pattern differs from GPT-2's in one place: `\\p{N}` instead of `\\p{N}+`, so every digit
is its own pre-token (a leading space may stay attached: " 4", "2"). Arithmetic then sees one
token per digit, as models trained on arithmetic usually do.
"""
from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import regex
import tiktoken

from ..core.paths import data_dir, verified_path

__all__ = ["FILE", "SPLIT_PATTERN", "EOS", "PAD", "SPECIAL_TOKENS", "VOCAB_SIZE", "train_bpe", "merge_pair",
           "save_tokenizer", "build_encoding", "load_tokenizer", "load_ranks"]

FILE = "tokenizer.json"
SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOS = "<|endoftext|>"  # ends every document and every completion (tiktoken's eot_token)
PAD = "<|pad|>"  # fills batch rows after EOS; never a target
SPECIAL_TOKENS = (EOS, PAD)
VOCAB_SIZE = 512  # 256 bytes + merges + the special tokens


def train_bpe(text: str, vocab_size: int, pattern: str = SPLIT_PATTERN) -> dict[bytes, int]:
    """Byte-level BPE ranks (token bytes -> rank) with `vocab_size` entries.

    Stops early, with fewer ranks, if no adjacent pair is left to merge.
    """
    if vocab_size < 256:
        raise ValueError(f"vocab_size must be at least 256 (one token per byte), got {vocab_size}")
    ranks = {bytes([i]): i for i in range(256)}
    # distinct pre-tokens, in order of first appearance, each with its count
    counts = Counter(regex.findall(pattern, text))
    words = [[bytes([b]) for b in w.encode("utf-8")] for w in counts]
    freqs = list(counts.values())
    while len(ranks) < vocab_size:
        pair_counts: Counter = Counter()
        for word, freq in zip(words, freqs):
            for pair in zip(word, word[1:]):
                pair_counts[pair] += freq
        if not pair_counts:
            break
        best = max(pair_counts, key=pair_counts.__getitem__)  # first seen wins a tie
        merged = best[0] + best[1]
        ranks[merged] = len(ranks)
        words = [merge_pair(word, best, merged) for word in words]
    return ranks


def merge_pair(word: list[bytes], pair: tuple[bytes, bytes], merged: bytes) -> list[bytes]:
    """Replace every non-overlapping occurrence of `pair` in `word`, left to right."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(merged)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def save_tokenizer(ranks: dict[bytes, int], path: Path) -> None:
    """Write ranks (in rank order, base64) with the split pattern and special tokens."""
    ordered = sorted(ranks, key=ranks.__getitem__)
    assert [ranks[t] for t in ordered] == list(range(len(ranks))), "ranks must be 0..n-1"
    payload = {
        "pattern": SPLIT_PATTERN,
        "special_tokens": list(SPECIAL_TOKENS),
        "ranks": [base64.b64encode(t).decode("ascii") for t in ordered],
    }
    path.write_text(json.dumps(payload, indent=0) + "\n")


def build_encoding(ranks: dict[bytes, int], pattern: str = SPLIT_PATTERN, name: str = "minirl") -> tiktoken.Encoding:
    """A tiktoken Encoding from ranks, with the course's special tokens appended after them."""
    special = {tok: len(ranks) + i for i, tok in enumerate(SPECIAL_TOKENS)}
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)


_cache: dict[Path, tiktoken.Encoding] = {}  # one per data folder (MINIRL_DATA may change)


def load_tokenizer() -> tiktoken.Encoding:
    """The course tokenizer: a `tiktoken.Encoding` over the ranks in data/tokenizer.json.

    `enc.eot_token` is EOS; `enc.encode_single_token("<|pad|>")` is PAD. Plain `enc.encode(text)`
    refuses text that spells a special token, so user text cannot inject one.
    """
    root = data_dir()
    if root not in _cache:
        _cache[root] = build_encoding(*load_ranks())
    return _cache[root]


def load_ranks() -> tuple[dict[bytes, int], str]:
    """The shipped BPE ranks (token bytes -> id) and the split pattern, from data/tokenizer.json."""
    payload = json.loads(verified_path(FILE).read_text())
    return {base64.b64decode(t): i for i, t in enumerate(payload["ranks"])}, payload["pattern"]
