"""Pretrain the base model on every family of the tiny world.

    python -m minirl.train.pretrain            # about 15 minutes on a 2-core CPU; runs once, not in CI

Writes data/checkpoints/base.pt, and base.json beside it with the command, seed, settings and
the measured metrics (`minirl.world.evaluate.base_model_report`), then rewrites data/MANIFEST.json. A
rebuild reproduces the metrics closely, not the bytes: float sums differ across machines.

Training is plain next-token prediction over whole documents (prompt + completion + EOS), one
document per row, right-padded, so a document always starts at position 0, as prompts do at
sampling time.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import random
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

from ..core import paths
from ..lm.model import CHECKPOINTS, GPT, GPTConfig, save_checkpoint
from ..lm.tokenizer import PAD, load_tokenizer
from ..world import datasets, grammar

__all__ = ["STEPS", "BATCH", "LR", "WARMUP", "WEIGHT_DECAY", "SEED", "learning_rate", "train", "save_base", "main"]

STEPS = 4000
BATCH = 128
LR = 2e-3
WARMUP = 200
WEIGHT_DECAY = 0.1
SEED = 0


def tokenized_corpus(enc) -> list[list[int]]:
    """Every document of every family as token ids ending in EOS."""
    docs = [d for family in grammar.FAMILIES for d in datasets.load_corpus(family)]
    return [ids + [enc.eot_token] for ids in enc.encode_ordinary_batch(docs)]


def make_batch(docs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded inputs (B, T) and targets (B, T); padding targets are -100 (ignored)."""
    T = max(len(d) for d in docs) - 1
    inputs = torch.full((len(docs), T), pad, dtype=torch.long)
    targets = torch.full((len(docs), T), -100, dtype=torch.long)
    for i, d in enumerate(docs):
        inputs[i, : len(d) - 1] = torch.tensor(d[:-1])
        targets[i, : len(d) - 1] = torch.tensor(d[1:])
    return inputs, targets


def learning_rate(step: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to 10% of LR."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, steps - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(steps: int = STEPS, seed: int = SEED, log_every: int = 250):
    """Train a fresh GPT; returns (model, list of (step, mean loss since the last log))."""
    enc = load_tokenizer()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = GPT(GPTConfig(vocab_size=enc.n_vocab))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=(0.9, 0.95),
    )
    docs = tokenized_corpus(enc)
    pad = enc.encode_single_token(PAD)
    history, running = [], []
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps)
        inputs, targets = make_batch(rng.sample(docs, BATCH), pad)
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running.append(loss.item())
        if (step + 1) % log_every == 0 or step + 1 == steps:
            history.append((step + 1, sum(running) / len(running)))
            running = []
            print(f"step {step + 1:5d}/{steps}  loss {history[-1][1]:.4f}", flush=True)
    return model.eval(), history


def save_base(model: GPT, history: list, train_seconds: float, steps: int, seed: int) -> dict:
    """Write the checkpoint, measure it, write its card, and rewrite the manifest; returns the card."""
    from ..world.evaluate import base_model_report

    root = paths.data_dir()
    out = root / CHECKPOINTS["base"]
    out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, out)
    card = {
        "command": f"python -m minirl.train.pretrain --steps {steps} --seed {seed}",
        "seed": seed,
        "settings": {"steps": steps, "batch": BATCH, "lr": LR, "warmup": WARMUP, "weight_decay": WEIGHT_DECAY},
        "config": asdict(model.config),
        "parameters": model.num_parameters(),
        "train_loss": history,
        "train_seconds": round(train_seconds),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "metrics": base_model_report(model, load_tokenizer(), seed=seed),
    }
    out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    paths.write_manifest(root)
    return card


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m minirl.train.pretrain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    start = time.time()
    model, history = train(args.steps, args.seed)
    card = save_base(model, history, time.time() - start, args.steps, args.seed)
    print(json.dumps(card["metrics"], indent=1))


if __name__ == "__main__":
    main()
