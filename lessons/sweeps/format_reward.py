"""Lesson 13's format-reward runs on the tiny GPT: GRPO on arithmetic with the correctness reward
alone, and with an additive format bonus of weight 0.001 and of weight 1. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/format_reward.py            # all 18 runs: about 8 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/format_reward.py --only format-1 1   # one run's last row, printed

The format rule is section 2's on the micro world, carried over: an answer is `brief` when it has
at most two digits (closed within three tokens, EOS included). Every sum of 100 or more breaks it,
so it pulls against correctness on those prompts, as a length limit pulls against long reasoning.
The reward is `correct + weight * brief`.

Every run: the base model, STEPS steps of 16 prompts x 8 completions, one gradient step per batch,
beta 0.04, at lesson 06's learning rate LR (chosen there for GRPO without a bonus: the question
is what adding the bonus to a working setup does, so nothing is re-tuned), six seeds, each shared
by the three weights (paired comparisons). Every EVAL_EVERY steps the policy samples N_SAMPLES
answers to each of the 300 held-out prompts: `correct` (held-out accuracy, all prompts),
`correct_long` (on the prompts whose sum is 100 or more), `brief` (share of answers with at most two
digits). Rows go to format_reward.csv beside this file.
"""
from __future__ import annotations

import argparse
import csv
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.world import datasets, rewards
from minirl.world.evaluate import sample_family
from minirl.world.tasks import arithmetic_task

HERE = Path(__file__).parent
STEPS, EVAL_EVERY, SEEDS, N_SAMPLES, LR = 60, 10, (0, 1, 2, 3, 4, 5), 8, 5e-4
RUNS = {"grpo": 0.0, "format-0.001": 1e-3, "format-1": 1.0}  # the bonus's weight
FIELDS = ["run", "seed", "step", "correct", "correct_long", "brief"]


def brief(completions: list[str]) -> list[float]:
    """1.0 where the answer has at most two digits (with EOS, at most three tokens)."""
    return [1.0 if len(c.strip()) <= 2 else 0.0 for c in completions]


def reward_fn(weight: float):
    """The TRL-style reward: correct + weight * brief."""
    def reward(prompts, completions, **kwargs):
        return [r + weight * b for r, b in zip(rewards.arithmetic_reward(prompts, completions), brief(completions))]
    return reward


def evaluate(policy, enc, seed: int, step: int, name: str) -> dict:
    records = datasets.load_prompts("arithmetic", "test")
    prompts = [r["prompt"] for r in records]
    rows, completions, _ = sample_family(policy, enc, "arithmetic", prompts, N_SAMPLES,
                                         torch.Generator().manual_seed(20_000 + 100 * seed + step))
    correct = rewards.arithmetic_reward(rows, completions)
    long = [j for j in range(len(rows)) if records[j // N_SAMPLES]["answer"] >= 100]
    return {"run": name, "seed": seed, "step": step, "correct": round(sum(correct) / len(correct), 4),
            "correct_long": round(sum(correct[j] for j in long) / len(long), 4),
            "brief": round(sum(brief(completions)) / len(completions), 4)}


def run(name: str, seed: int) -> list[dict]:
    torch.set_num_threads(1)
    task, enc = arithmetic_task(), minirl.load_tokenizer()
    policy = minirl.load_model("base")
    weight = RUNS[name]
    rows = [evaluate(policy, enc, seed, 0, name)]

    def callback(metrics, p):
        if (metrics["step"] + 1) % EVAL_EVERY == 0:
            rows.append(evaluate(p, enc, seed, metrics["step"] + 1, name))

    train_grpo(policy, task, GRPOConfig(steps=STEPS, prompts_per_step=16, group_size=8, lr=LR, beta=0.04, seed=seed),
               enc, reward_fn=reward_fn(weight), callback=callback)
    return rows


def read_rows() -> list[dict]:
    with open(HERE / "format_reward.csv") as f:
        return [{k: v if k == "run" else int(v) if k in ("seed", "step") else float(v) for k, v in row.items()}
                for row in csv.DictReader(f)]


def jobs() -> list[tuple]:
    return [(name, seed) for name in RUNS for seed in SEEDS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"), help="run one point and print its last row")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        print(run(args.only[0], int(args.only[1]))[-1])
        return
    with ProcessPoolExecutor(args.workers) as pool:
        done = list(pool.map(run, *zip(*jobs())))
    with open(HERE / "format_reward.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(row for rows in done for row in rows)
    print(f"wrote format_reward.csv ({sum(map(len, done))} rows)", file=sys.stderr)


if __name__ == "__main__":
    main()
