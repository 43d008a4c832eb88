"""Train, measure and save the shipped reward models (`minirl.lm.reward_head.REWARD_MODELS`).

    python -m minirl.train.reward_models            # both: about 3 minutes on 2 cores
    python -m minirl.train.reward_models rm_all     # one of them

Each lands in data/checkpoints/<name>.pt with a card <name>.json beside it (command, seed, settings,
normalization, metrics), and data/MANIFEST.json is rewritten. Like the base model, a rebuild
reproduces the metrics closely, not the bytes.
"""
from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict

import torch

from ..core import paths, validate
from ..lm.model import load_model
from ..lm.reward_head import REWARD_MODELS, checkpoint_path, normalize, save_reward_model
from ..world import datasets
from .reward_model import SHIPPED, RMConfig, order_report, pair_metrics, subset, train_reward_model

__all__ = ["build", "main"]


def build(name: str) -> dict:
    """Train, normalize, measure and save one shipped reward model; returns its card."""
    validate.choice("reward model", name, sorted(REWARD_MODELS))
    spec = REWARD_MODELS[name]
    train = datasets.load_preferences("train")
    pairs = subset(train, spec["pairs"], spec["seed"])
    config = RMConfig(**{**asdict(SHIPPED), "seed": spec["seed"]})
    start = time.time()
    rm, history = train_reward_model(pairs, config)
    seconds = time.time() - start
    norm = normalize(rm, load_model("base"))
    held = pair_metrics(rm, datasets.load_preferences("test"))
    root = paths.data_dir()
    out = root / checkpoint_path(name)
    save_reward_model(rm, out)
    card = {
        "command": f"python -m minirl.train.reward_models {name}",
        "seed": spec["seed"],
        "pairs": len(pairs),
        "settings": asdict(config),
        "normalization": {k: round(v, 4) for k, v in norm.items()},
        "train_seconds": round(seconds),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "metrics": {"heldout_pairs": len(datasets.load_preferences("test")), "heldout_accuracy": round(held["accuracy"], 4),
                    "heldout_loss": round(held["loss"], 4),
                    **{k: round(v, 4) for k, v in order_report(rm).items()}},
    }
    out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def main() -> None:
    paths.build_named("python -m minirl.train.reward_models", __doc__.split("\n\n")[0], "reward model",
                      list(REWARD_MODELS), build)


if __name__ == "__main__":
    main()
