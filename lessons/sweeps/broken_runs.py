"""Lesson 05's broken runs: PPO on the reviews task as lesson 05 runs it, and five ways to break it,
each with one cause. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/broken_runs.py            # all 12 runs: about 4 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/broken_runs.py --only critic 1   # one run's last row, printed

Every run: the base model, STEPS steps of 8 prompts x 4 completions, PPO's defaults otherwise (4
epochs of 4 minibatches, clip 0.2, whitened advantages, a critic copied from the policy), seeds 0
and 1. The healthy run trains on the lexicon proxy at beta 0.3 and lr 1e-4. Each broken run changes
one thing:

    rate      lr 1e-3, ten times the healthy rate
    hacking   beta 0: nothing holds the policy near the reference while it chases the proxy
    critic    the critic's learning rate 1e-8: its value head never learns
    empty     a length penalty set too high: the proxy minus 0.5 per word, so the best answer is none
    entropy   trained on the gold reward itself with beta 0 at lr 6e-4: nothing can be hacked, and
              nothing keeps the policy spread out

Every step's training signals go to broken_runs.csv beside this file, labelled: the lesson shows the
broken runs as A to E (LABELS), and asks which cause made each.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.world import rewards
from minirl.world.tasks import reviews_task

HERE = Path(__file__).parent
STEPS, SEEDS = 24, (0, 1)
HEALTHY = PPOConfig(steps=STEPS, prompts_per_step=8, group_size=4, lr=1e-4, beta=0.3)
CAUSES = ("rate", "hacking", "critic", "empty", "entropy")
LABELS = {"healthy": "healthy", "critic": "A", "rate": "B", "entropy": "C", "hacking": "D", "empty": "E"}
SIGNALS = ["reward", "gold", "kl", "entropy", "length", "clip_fraction", "explained_variance", "value_loss"]
FIELDS = ["run", "cause", "seed", "step", *SIGNALS]


def length_penalised(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """The lexicon proxy minus 0.5 per word of the completion: a length penalty set too high."""
    return [r - 0.5 * len(c.split()) for r, c in zip(rewards.review_proxy_reward(prompts, completions), completions)]


def setting(cause: str) -> tuple[PPOConfig, object]:
    """The run's config and reward function (None: the task's lexicon proxy)."""
    return {"healthy": (HEALTHY, None),
            "rate": (dataclasses.replace(HEALTHY, lr=1e-3), None),
            "hacking": (dataclasses.replace(HEALTHY, beta=0.0), None),
            "critic": (dataclasses.replace(HEALTHY, critic_lr=1e-8), None),
            "empty": (HEALTHY, length_penalised),
            "entropy": (dataclasses.replace(HEALTHY, lr=6e-4, beta=0.0), rewards.review_gold_reward)}[cause]


def run(cause: str, seed: int) -> list[dict]:
    torch.set_num_threads(1)
    config, reward_fn = setting(cause)
    history = train_ppo(minirl.load_model("base"), reviews_task("negative"), dataclasses.replace(config, seed=seed),
                        reward_fn=reward_fn)
    return [{"run": LABELS[cause], "cause": cause, "seed": seed, "step": h["step"],
             **{k: round(h[k], 4) for k in SIGNALS}} for h in history]


def read_rows() -> list[dict]:
    with open(HERE / "broken_runs.csv") as f:
        return [{k: v if k in ("run", "cause") else int(v) if k in ("seed", "step") else float(v)
                 for k, v in row.items()} for row in csv.DictReader(f)]


def jobs() -> list[tuple]:
    return [(cause, seed) for cause in ("healthy", *CAUSES) for seed in SEEDS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("CAUSE", "SEED"), help="run one point and print its last row")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        print(run(args.only[0], int(args.only[1]))[-1])
        return
    with ProcessPoolExecutor(args.workers) as pool:
        done = list(pool.map(run, *zip(*jobs())))
    with open(HERE / "broken_runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(row for rows in done for row in rows)
    print(f"wrote broken_runs.csv ({sum(map(len, done))} rows)", file=sys.stderr)


if __name__ == "__main__":
    main()
