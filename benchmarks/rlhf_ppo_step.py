"""One PPO-RLHF step of lesson 09, against a reward model, timed part by part.

    python benchmarks/rlhf_ppo_step.py          # writes benchmarks/results/rlhf_ppo_cpu.json

There is no peer to run beside it: TRL 1.16 (the version the course pins) ships no PPO trainer
(`trl.trainer` has GRPO, RLOO, DPO, KTO, reward and SFT trainers; `trl.experimental` no PPO either),
so this records minirl's own time, and the same step with the reward model swapped for the gold
utility (a Python function) to show what the reward model's forward pass costs.

The step is lesson 09's: the shipped SFT model as policy and reference, a critic copied from it,
`rm_all` as the reward (normalized scores), 64 completions of 'order:' (16 prompts x 4), up to 16
new tokens, 4 epochs of 4 minibatches. Parts: sampling; the reward model's scores; what PPO fixes
at collection time (reference log-probs, critic values, GAE); the update (policy and critic
forward, backward and optimizer steps). Median over the timed steps after warm-up.
"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from sampler_vs_hf import cpu_name  # noqa: E402

import minirl  # noqa: E402
from minirl.lm import reward_head
from minirl.train import reward_model as rmod  # noqa: E402
from minirl.train.ppo import PPO, PPOConfig  # noqa: E402
from minirl.train.training import training_batches  # noqa: E402
from minirl.world import rewards  # noqa: E402
from minirl.world.tasks import orders_task, training_rewards  # noqa: E402

WARMUP, TIMED = 3, 15


def timed_steps(reward_fn) -> dict[str, float]:
    """Median seconds per part over TIMED steps of a fresh PPO run from the SFT model."""
    policy = minirl.load_model("sft")
    config = PPOConfig(steps=WARMUP + TIMED, prompts_per_step=16, group_size=4, beta=0.3, lr=1e-4, seed=0)
    ppo, enc, task = PPO(policy, config), minirl.load_tokenizer(), orders_task()
    parts = {"sample": [], "reward": [], "collect": [], "update": [], "step": []}
    batches = training_batches(policy, task, config, torch.Generator().manual_seed(0), enc, desc="benchmark")
    start = time.perf_counter()
    for step, rollout in batches:  # the sampling happens inside the generator, between two ticks
        t1 = time.perf_counter()
        score = training_rewards(task, rollout, enc, reward_fn).sum(dim=1)
        t2 = time.perf_counter()
        batch = ppo.score_batch(rollout, score)
        t3 = time.perf_counter()
        ppo.update(rollout, batch, step)
        t4 = time.perf_counter()
        if step >= WARMUP:
            for name, seconds in (("sample", t1 - start), ("reward", t2 - t1), ("collect", t3 - t2), ("update", t4 - t3),
                                  ("step", t4 - start)):
                parts[name].append(seconds)
        start = time.perf_counter()
    return {f"{k}_s": round(statistics.median(v), 4) for k, v in parts.items()}


def main() -> None:
    torch.manual_seed(0)
    rm = rmod.as_reward_fn(reward_head.load_reward_model("rm_all"))
    runs = {"reward model (rm_all)": timed_steps(rm), "gold utility (a Python function)": timed_steps(rewards.order_gold_reward)}
    result = {
        "benchmark": "PPO-RLHF step of lesson 09: SFT policy, 64 completions of 'order:' (16 x 4), up to 16 new tokens, "
                     "4 epochs x 4 minibatches, critic copied from the policy; median over timed steps after warm-up",
        "peer": "none: TRL 1.16 has no PPO trainer (checked in trl.trainer and trl.experimental)",
        "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "runs": runs,
    }
    out = Path(__file__).parent / "results" / "rlhf_ppo_cpu.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
