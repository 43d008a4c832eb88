"""(prompt, response) sequences: the one place they are tokenized, padded, masked, batched and scored.

SFT, the reward model, DPO, GAIL, RAFT and lessons 09 and 10's measurements all see a demonstration or a
preference pair the same way: prompt and response encoded apart (as the sampler sees them), then
EOS when the response ended; right-padded with the course's <|pad|> token; a mask that is 1 on
the response's tokens (EOS included) and 0 on the prompt and the padding; and log pi(response +
EOS | prompt) as the masked sum of per-token log-probs.
"""
from __future__ import annotations

import numbers
import warnings

import torch

from ..core import validate
from ..core.ops import sequence_logprob, token_logprobs
from .model import GPT
from .tokenizer import PAD, load_tokenizer

__all__ = ["PAIR_FORM", "DEMO_FORM", "sequence_ids", "check_records", "check_token_lists", "check_leading_space",
           "right_pad", "response_mask", "response_batch", "pair_tokens", "demo_tokens", "tokenized_logprobs",
           "sequence_logprobs"]


def sequence_ids(enc, prompt: str, completion: str, ended: bool = True) -> tuple[list[int], int]:
    """(ids, prompt length): prompt and completion encoded apart (as the sampler sees them), then
    EOS when the completion ended (not when it was cut at the length limit)."""
    p = enc.encode_ordinary(prompt)
    return p + enc.encode_ordinary(completion) + ([enc.eot_token] if ended else []), len(p)


def check_records(records, name: str, fields: tuple[str, ...], what: str) -> None:
    """Check `records` is a non-empty list of dicts, each with the string `fields`; `what` describes
    one record for the message, e.g. "each pair is a dict {'prompt', 'chosen', 'rejected'[, 'label']}"."""
    if isinstance(records, (dict, str)) or not isinstance(records, (list, tuple)) or not records:
        got = f"an empty {type(records).__name__}" if isinstance(records, (list, tuple)) else f"a {type(records).__name__}"
        raise ValueError(f"{name} must be a non-empty list of records, got {got}: {what}")
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise TypeError(f"{name}[{i}] must be a dict, got {type(r).__name__} {r!r:.60}: {what}")
        for field in fields:
            if field not in r:
                raise ValueError(f"{name}[{i}] has no {field!r} (its keys: {', '.join(map(repr, r))}): {what}")
            if not isinstance(r[field], str):
                raise TypeError(f"{name}[{i}][{field!r}] must be a string, got {r[field]!r:.60} ({type(r[field]).__name__}): "
                                f"{what}")


def check_token_lists(name: str, seqs, vocab_size: int, n_ctx: int | None = None, min_length: int = 1) -> None:
    """Check `seqs` is a list of token-id lists (ints; tuples too), each of at least `min_length`
    and at most `n_ctx` ids, inside a vocabulary of `vocab_size`: what the GPT's forward checks,
    done before the ids are padded into a batch, so the message names the sequence."""
    if isinstance(seqs, torch.Tensor) or not isinstance(seqs, (list, tuple)):
        hint = "; for a (B, T) tensor of ids pass ids.tolist()" if isinstance(seqs, torch.Tensor) else ""
        raise TypeError(f"{name} must be a list of token-id lists (one per sequence), got {type(seqs).__name__}{hint}")
    for i, s in enumerate(seqs):
        if not isinstance(s, (list, tuple)) or not all(
                isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in s):
            raise TypeError(f"{name}[{i}] must be a list of int token ids (e.g. enc.encode_ordinary(text) + "
                            f"[enc.eot_token]), got {type(s).__name__} {s!r:.60}")
        if len(s) < min_length:
            raise ValueError(f"{name}[{i}] is empty: every sequence needs at least one token (prompt + completion)")
        if n_ctx is not None and len(s) > n_ctx:
            raise ValueError(f"{name}[{i}] has {len(s)} tokens, more than the model's context window n_ctx={n_ctx}: "
                             "shorten the prompt or the completion")
        validate.token_ids(f"{name}[{i}]", s, vocab_size)


def check_leading_space(responses: list[str], what: str = "responses") -> None:
    """Warn, once for the lot, when non-empty responses do not start with a space. The tiny world
    puts the space between prompt and response at the start of the response (prompt 'q: 17+25= a:',
    response ' 42'), and its tokens carry that space (' 4' is not '4'): a response without it reads
    'a:42', which no grammar accepts, and is scored as text the models never saw, silently."""
    bare = [r for r in responses if r and not r.startswith(" ")]
    if bare:
        warnings.warn(f"{len(bare)} of {len(responses)} {what} do not start with a space (the first: {bare[0]!r}). "
                      "The course's responses begin with the space that follows the prompt (prompt 'q: 17+25= a:', "
                      "response ' 42'); without it they are scored as invalid text. Add it: ' ' + response (and "
                      "take it off the end of the prompt, if it is there).", stacklevel=3)


def right_pad(seqs: list[list[int]], pad: int, device=None) -> torch.Tensor:
    """(B, T) ids, each row padded on the right with `pad` to the longest."""
    T = max(len(s) for s in seqs)
    return torch.tensor([s + [pad] * (T - len(s)) for s in seqs], dtype=torch.long, device=device)


def response_mask(seqs: list[list[int]], prompt_lengths: list[int], T: int, device=None) -> torch.Tensor:
    """(B, T) 1 on completion tokens (EOS included), 0 on the prompt and the padding."""
    mask = torch.zeros(len(seqs), T, device=device)
    for i, (s, p) in enumerate(zip(seqs, prompt_lengths)):
        mask[i, p:len(s)] = 1.0
    return mask


def response_batch(items: list[tuple], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenized demos as ids (B, T), right-padded with `pad`, and the mask (B, T-1) of the targets
    ids[:, 1:] to learn: 1 on response tokens (EOS included), 0 on the prompt and the padding.
    Position t of prompt + completion predicts token t + 1, so the first target counted is the
    completion's first token. An item is (ids, prompt length), or (ids, prompt length, positions)
    where `positions` index the ids an environment wrote (a tool's answer): context, never targets."""
    seqs, prompt_lens = [item[0] for item in items], [item[1] for item in items]
    ids = right_pad(seqs, pad, device)  # (B, T)
    mask = response_mask(seqs, prompt_lens, ids.size(1), device)
    for i, item in enumerate(items):
        mask[i, list(item[2] if len(item) > 2 else ())] = 0.0
    return ids, mask[:, 1:]


PAIR_FORM = "each pair is a dict {'prompt', 'chosen', 'rejected'[, 'label']} of strings (label: P(chosen preferred))"
DEMO_FORM = "each demonstration is a dict with string fields 'prompt' and 'completion', e.g. {'prompt': 'order:', " \
            "'completion': ' one tea please .'}"


def pair_tokens(pairs: list[dict], enc) -> list[tuple[list[int], int, list[int], float]]:
    """Each pair {'prompt', 'chosen', 'rejected'[, 'label']} as (chosen ids, prompt length,
    rejected ids, label); label = P(chosen preferred), 1 unless given."""
    check_records(pairs, "pairs", ("prompt", "chosen", "rejected"), PAIR_FORM)
    for i, r in enumerate(pairs):
        if "label" in r:
            validate.number(f"pairs[{i}]['label']", r["label"], 0.0, 1.0)
    out = []
    for r in pairs:
        chosen, prompt_len = sequence_ids(enc, r["prompt"], r["chosen"])
        out.append((chosen, prompt_len, sequence_ids(enc, r["prompt"], r["rejected"])[0], float(r.get("label", 1.0))))
    return out


def demo_tokens(demos: list[dict], enc) -> list[tuple[list[int], int]]:
    """Each demonstration {'prompt', 'completion'} as (prompt + completion + EOS ids, prompt length)."""
    check_records(demos, "demos", ("prompt", "completion"), DEMO_FORM)
    return [sequence_ids(enc, d["prompt"], d["completion"]) for d in demos]


def tokenized_logprobs(model: GPT, items: list[tuple[list[int], int]], pad: int, average: bool = False) -> torch.Tensor:
    """(B,) log pi(completion + EOS | prompt) of tokenized demos (ids, prompt length): the sum of
    their response tokens' log-probs (with gradient, if enabled), or with `average` their per-token
    mean. `sequence_logprobs` is the same on text."""
    ids, mask = response_batch(items, pad, next(model.parameters()).device)
    logits = model(ids[:, :-1])  # (B, T-1, V)
    logits = torch.where(mask.bool()[..., None], logits, torch.zeros_like(logits))  # padding never reaches the sum
    return sequence_logprob(token_logprobs(logits, ids[:, 1:]), mask, average)


def sequence_logprobs(model: GPT, pairs: list[tuple[str, str]], tokenizer=None, average: bool = False) -> torch.Tensor:
    """(N,) log pi(response + EOS | prompt) of text pairs [(prompt, response), ...] under `model`.

    EOS is appended to every response, which is thus scored as a finished one (as DPO and the reward
    model score their pairs); the result is the sum of the log-probs of the response's tokens and
    that EOS, or with `average` their per-token mean. Prompt and response are encoded apart, as the
    sampler sees them, so the response keeps the space that follows the prompt: ('q: 17+25= a:',
    ' 42'); responses without it are scored, with a warning. The pairs go in one batch, right-padded
    with the tokenizer's <|pad|> token; padding is masked out, so it never reaches the result. With
    gradient unless called under torch.no_grad(); float32, on the model's device.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a minirl GPT, e.g. minirl.load_model('sft'); got {type(model).__name__}")
    if isinstance(pairs, tuple) or not pairs or not all(
            isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(t, str) for t in p) for p in pairs):
        raise ValueError("pairs must be a non-empty list of (prompt, response) string pairs, e.g. "
                         "[('q: 17+25= a:', ' 42')]")
    check_leading_space([response for _, response in pairs])
    enc = tokenizer or load_tokenizer()
    items = [sequence_ids(enc, prompt, response) for prompt, response in pairs]
    return tokenized_logprobs(model, items, enc.encode_single_token(PAD), average)
