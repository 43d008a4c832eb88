"""Train, measure and save the shipped tool model: the base model fine-tuned to call the calculator
(`minirl.world.tools`), the start of the agents lesson.

    python -m minirl.train.tool_model     # data/checkpoints/tool.pt and tool.json (about 2 minutes on 2 cores)

The demonstrations (`tools.tool_demos`) are the 2,000 training prompts: half of them, drawn at random
whatever their operands, call the calculator with the right sum and copy its answer; the other half
are the base model's own sample for that prompt, right or wrong. So SFT teaches the format of a
call and leaves when to call, and how well to add without one, about where the base model was:
RL has a real decision to learn. The base model itself is never retrained (other lessons use it).

The calculator's answer ("85]") is context in the loss, not a target (`tools.demo_tokens`), as
it is in RL (`Rollout.policy_mask`). Cloned as a target it taught the policy to write the sums
itself: a model trained that way (same data and settings) got 70.5% of the held-out prompts right
with the calculator answering and 70.5% with it silent, writing " [68+87=155] 155" on its own.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict

import torch

from ..core import paths, validate
from ..lm import multiturn
from ..lm.model import CHECKPOINTS, GPT, load_model, save_checkpoint
from ..lm.sampling import sample
from ..lm.tokenizer import PAD, load_tokenizer
from ..world import tasks, tools
from .sft import SFTConfig, fit

__all__ = ["CONFIG", "base_samples", "tool_report", "build", "main"]

CONFIG = SFTConfig(steps=2000, batch_size=32, lr=3e-4)  # the shipped model's settings


@torch.no_grad()
def base_samples(prompts: list[str], seed: int) -> list[str]:
    """One sample of the base model per prompt (temperature 1): the demonstrations that do not call."""
    tools.check_prompts("prompts", prompts)
    seed = validate.integer("seed", seed, minimum=-2**63)
    rollout = sample(load_model("base"), prompts, max_new_tokens=tools.MAX_NEW_TOKENS,
                     generator=torch.Generator().manual_seed(seed))
    return rollout.texts


@torch.no_grad()
def tool_report(model: GPT, prompts: list[str], samples: int = 8, seed: int = 0) -> dict[str, float]:
    """Episodes with the calculator on `prompts` (`samples` each, temperature 1): the share right, the
    calls per episode, the share right with and without a call, and the share of calls that ask for
    the prompt's own sum."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a minirl GPT, e.g. minirl.load_model('tool'); got {type(model).__name__}")
    tools.check_prompts("prompts", prompts)
    samples = validate.integer("samples", samples)
    seed = validate.integer("seed", seed, minimum=-2**63)
    rollout = multiturn.sample_episodes(model, prompts, tools.Calculator(), max_new_tokens=tools.MAX_NEW_TOKENS,
                                        group_size=samples, generator=torch.Generator().manual_seed(seed))
    right = tools.tool_reward(rollout.prompts, rollout.texts)
    called = multiturn.calls(rollout).tolist()
    parsed = [tools.parse_episode(t) for t in rollout.texts]
    asks = [p is not None and p[0] == "{}+{}".format(*tools.operands(q)) for p, q in zip(parsed, rollout.prompts)]

    def share(values: list, where: list) -> float:
        kept = [v for v, w in zip(values, where) if w]
        return sum(kept) / max(len(kept), 1)

    return {"correct": sum(right) / len(right), "calls": sum(called) / len(called),
            "correct_with_call": share(right, [c > 0 for c in called]),
            "correct_without_call": share(right, [c == 0 for c in called]),
            "calls_of_the_prompts_sum": share(asks, [c > 0 for c in called])}


def build(seed: int = 0) -> dict:
    """Train the shipped tool model from the base model, measure it, save it with its card."""
    seed = validate.integer("seed", seed, minimum=-2**63)
    config = SFTConfig(**{**asdict(CONFIG), "seed": seed})
    task = tasks.tool_task()
    demos = tools.tool_demos(task.train_prompts, direct=base_samples(task.train_prompts, seed), seed=seed)
    policy, enc = load_model("base"), load_tokenizer()
    start = time.time()
    history = fit(policy, tools.demo_tokens(demos, enc), config, enc.encode_single_token(PAD), desc="tool SFT")
    seconds = time.time() - start
    root = paths.data_dir()
    out = root / CHECKPOINTS["tool"]
    save_checkpoint(policy, out)
    base_right = tools.tool_reward(task.test_prompts, base_samples(task.test_prompts, seed + 1))
    card = {
        "command": f"python -m minirl.train.tool_model --seed {seed}",
        "seed": seed,
        "data": f"{len(demos)} demonstrations on the training prompts: {sum('[' in d['completion'] for d in demos)} "
                "call the calculator with the right sum, the others are the base model's own samples; the "
                "calculator's answers are context, not targets",
        "settings": asdict(config),
        "train_seconds": round(seconds),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "metrics": {"train_loss_last_20": round(sum(h["loss"] for h in history[-20:]) / 20, 4),
                    "base_correct_heldout": round(sum(base_right) / len(base_right), 4),
                    **{k + "_heldout": round(v, 4) for k, v in tool_report(policy, task.test_prompts, seed=seed).items()}},
    }
    out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    paths.write_manifest(root)
    return card


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m minirl.train.tool_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.seed)["metrics"], indent=1))


if __name__ == "__main__":
    main()
