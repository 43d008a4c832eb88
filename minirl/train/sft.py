"""Supervised fine-tuning (SFT), which is behaviour cloning: maximize the likelihood of demonstrated
responses, with the loss on response tokens only (the prompt is context, never a target).

    python -m minirl.train.sft            # data/checkpoints/sft.pt and sft.json (about 15 s on 2 cores)

The orders world has no written demonstrations. The shipped SFT model is trained on the *chosen*
response of each training preference pair (`chosen_demos`), as Rafailov et al. (2023) did for
Anthropic's HH data when no SFT model existed: the chosen side is a response a person preferred,
so imitating it moves the base model toward what the annotator likes (the gold utility of the
chosen responses averages 1.40, of the base model's samples 1.15). It is the start of lesson 08's
RLHF pipeline and the reference its KL is measured against. RAFT (`minirl.train.raft`) reuses `fit`
on its best-of-N winners' sampled tokens.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import time
from dataclasses import asdict, dataclass

import torch

from ..core import losses, paths, validate
from ..core.notebook import progress
from ..lm.model import CHECKPOINTS, GPT, load_model, save_checkpoint
from ..lm.sequences import check_leading_space, demo_tokens, response_batch
from ..lm.tokenizer import PAD, load_tokenizer
from ..world import datasets
from .training import batches, check_finite, optimizer_step

__all__ = ["SFTConfig", "chosen_demos", "sft_loss_on", "train_sft", "fit", "heldout_loss", "build", "main"]


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


def build(seed: int = 0) -> dict:
    """Train the shipped SFT model from the base model, measure it, save it with its card."""
    from .rlhf import policy_report  # rlhf builds on this module, so it is imported only here

    config = SFTConfig(seed=seed)
    policy, base = load_model("base"), load_model("base")
    demos = chosen_demos(datasets.load_preferences("train"))
    start = time.time()
    history = train_sft(policy, demos, config)
    seconds = time.time() - start
    root = paths.data_dir()
    out = root / CHECKPOINTS["sft"]
    save_checkpoint(policy, out)
    held = chosen_demos(datasets.load_preferences("test"))
    card = {
        "command": f"python -m minirl.train.sft --seed {seed}",
        "seed": seed,
        "data": f"the chosen responses of the {len(demos)} training preference pairs",
        "settings": asdict(config),
        "train_seconds": round(seconds),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "metrics": {"train_loss_last_20": round(sum(h["loss"] for h in history[-20:]) / 20, 4),
                    "heldout_chosen_loss": round(heldout_loss(policy, held), 4),
                    "base_heldout_chosen_loss": round(heldout_loss(base, held), 4),
                    **{k: round(v, 4) for k, v in policy_report(policy, base, samples=1024, seed=seed).items()}},
    }
    out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    paths.write_manifest(root)
    return card


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.seed)["metrics"], indent=1))


if __name__ == "__main__":
    main()
