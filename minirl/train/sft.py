"""Supervised fine-tuning (SFT), which is behaviour cloning: maximize the likelihood of demonstrated
responses, with the loss on response tokens only (the prompt is context, never a target).

The orders world has no written demonstrations. The shipped SFT model (`python -m
minirl.train.sft_model`) is trained on the *chosen*
response of each training preference pair (`chosen_demos`), as Rafailov et al. (2023) did for
Anthropic's HH data when no SFT model existed: the chosen side is a response a person preferred,
so imitating it moves the base model toward what the annotator likes (the gold utility of the
chosen responses averages 1.40, of the base model's samples 1.15). It is the start of lesson 09's
RLHF pipeline and the reference its KL is measured against. RAFT (`minirl.train.raft`) reuses `fit`
on its best-of-N winners' sampled tokens.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ..core import losses, validate
from ..core.notebook import progress
from ..lm.model import GPT
from ..lm.sequences import PAIR_FORM, check_leading_space, check_records, demo_tokens, response_batch
from ..lm.tokenizer import PAD, load_tokenizer
from .training import batches, check_finite, optimizer_step

__all__ = ["SFTConfig", "chosen_demos", "sft_loss_on", "train_sft", "fit", "heldout_loss"]


@validate.known_options
@dataclass
class SFTConfig:
    """Settings of `train_sft` and `fit`.

    steps          optimizer steps
    batch_size     demonstrations per step
    lr             AdamW's learning rate (no weight decay)
    max_grad_norm  gradients are clipped to this global norm (inf: no clipping)
    seed           seeds the order of the demonstrations (reshuffled each epoch); torch's global
                   generator is left alone
    """
    steps: int = 300
    batch_size: int = 32
    lr: float = 1e-4
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self):
        validate.integer("steps", self.steps)
        validate.integer("batch_size", self.batch_size)
        validate.number("lr", self.lr, 0.0, open_low=True)
        validate.number("max_grad_norm", self.max_grad_norm, 0.0, open_low=True, finite=False)
        validate.integer("seed", self.seed, minimum=-2**63)


def chosen_demos(pairs: list[dict]) -> list[dict]:
    """The chosen side of each preference pair as a demonstration {'prompt', 'completion'}."""
    check_records(pairs, "pairs", ("prompt", "chosen"), PAIR_FORM)
    return [{"prompt": r["prompt"], "completion": r["chosen"]} for r in pairs]


def sft_loss_on(model: GPT, items: list[tuple[list[int], int]], pad: int) -> torch.Tensor:
    """Mean negative log-likelihood of the response tokens (EOS included) of tokenized demos."""
    ids, mask = response_batch(items, pad, next(model.parameters()).device)
    return losses.sft_loss(model(ids[:, :-1]), ids[:, 1:], mask)


def train_sft(policy: GPT, demos: list[dict], config: SFTConfig = SFTConfig(), tokenizer=None,
              desc: str = "SFT") -> list[dict]:
    """Fine-tune `policy` in place on demonstrations {'prompt', 'completion'} (each tokenized as
    prompt + completion + EOS). Returns one {'step', 'loss'} per step."""
    enc = tokenizer or load_tokenizer()
    items = demo_tokens(demos, enc)
    check_leading_space([d["completion"] for d in demos], "completions")
    return fit(policy, items, config, enc.encode_single_token(PAD), desc)


def fit(policy: GPT, items: list[tuple[list[int], int]], config: SFTConfig, pad: int, desc: str = "SFT") -> list[dict]:
    """AdamW on `sft_loss_on` over shuffled batches of tokenized demos (ids, prompt length), the
    epochs reshuffled by `config.seed` (a generator of its own: torch's global seed is left alone);
    `policy` is trained in place and left in eval mode."""
    if not isinstance(policy, GPT):
        raise TypeError(f"policy must be a minirl GPT, e.g. minirl.load_model('base'); got {type(policy).__name__}")
    if not isinstance(config, SFTConfig):
        raise TypeError(f"config must be an SFTConfig, got {type(config).__name__}")
    if not items:
        raise ValueError("no demonstrations to train on: give at least one tokenized demo (ids, prompt length)")
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    policy.train()
    history = []
    order = batches(len(items), config.batch_size, config.steps, random.Random(config.seed))
    for step, idx in zip(progress(range(config.steps), desc=desc), order):
        loss = sft_loss_on(policy, [items[i] for i in idx], pad)
        check_finite(loss, step, "SFT loss")
        optimizer_step(opt, list(policy.parameters()), loss, config.max_grad_norm)
        history.append({"step": step, "loss": loss.item()})
    policy.eval()
    return history


@torch.no_grad()
def heldout_loss(model: GPT, demos: list[dict], tokenizer=None, batch_size: int = 256) -> float:
    """Mean response-token NLL over demonstrations (per token, every demo weighted by its length)."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a minirl GPT, e.g. minirl.load_model('sft'); got {type(model).__name__}")
    validate.integer("batch_size", batch_size)
    enc = tokenizer or load_tokenizer()
    items, pad = demo_tokens(demos, enc), enc.encode_single_token(PAD)
    check_leading_space([d["completion"] for d in demos], "completions")
    total = count = 0.0
    for i in range(0, len(items), batch_size):
        chunk = items[i:i + batch_size]
        n = sum(len(s) - p for s, p in chunk)  # response tokens (EOS included)
        total += sft_loss_on(model, chunk, pad).item() * n
        count += n
    return total / count
