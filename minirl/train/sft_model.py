"""Train, measure and save the shipped SFT model: the base model fine-tuned on the chosen response of
each training preference pair (`minirl.train.sft`).

    python -m minirl.train.sft_model      # data/checkpoints/sft.pt and sft.json (about 15 s on 2 cores)
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict

import torch

from ..core import paths
from ..lm.model import CHECKPOINTS, load_model, save_checkpoint
from ..world import datasets
from .rlhf import policy_report
from .sft import SFTConfig, chosen_demos, heldout_loss, train_sft

__all__ = ["build", "main"]


def build(seed: int = 0) -> dict:
    """Train the shipped SFT model from the base model, measure it, save it with its card."""
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
        "command": f"python -m minirl.train.sft_model --seed {seed}",
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
    parser = argparse.ArgumentParser(prog="python -m minirl.train.sft_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.seed)["metrics"], indent=1))


if __name__ == "__main__":
    main()
