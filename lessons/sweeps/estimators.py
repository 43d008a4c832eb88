"""Lesson 04's three trained estimators on six seeds, too long to run in the lesson: REINFORCE
(reward-to-go), the group-mean baseline (G = 4) and actor-critic (GAE, lambda 0.95), each trained as
the lesson's live cell trains them (30 steps of 16 prompts x 4 completions on the reviews task,
beta 0.3, one shared learning rate, 3e-4, tuned for none of them) and judged as it judges them
(held-out gold-positive share over 4 samples of every held-out opening, sampling seed 123).
Recorded command (18 runs: about 6 min on 2 cores):

    OMP_NUM_THREADS=1 python lessons/sweeps/estimators.py

Rows go to estimators.csv beside this file. At one seed the three estimators share the base model,
the training prompts in their order, the sampler's starting generator and the evaluation generator,
so the lesson compares them seed by seed, paired (`minirl.core.compare.paired`), at this one rate.
"""
from __future__ import annotations

import csv
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.train.pg import PGConfig, train_policy_gradient
from minirl.world import tasks

HERE = Path(__file__).parent
SEEDS, LR, STEPS = (0, 1, 2, 3, 4, 5), 3e-4, 30
ESTIMATORS = ("reward_to_go", "group_mean", "gae")
FIELDS = ["estimator", "seed", "lr", "gold_positive"]


def held_out_gold(model, task) -> float:
    out = minirl.sample(model, task.test_prompts, max_new_tokens=task.max_new_tokens, group_size=4,
                        generator=torch.Generator().manual_seed(123))
    return task.gold(out)["gold_positive"]


def run(estimator: str, seed: int) -> dict:
    torch.set_num_threads(1)
    task, model = tasks.reviews_task("negative"), minirl.load_model("base")
    train_policy_gradient(model, task, PGConfig(steps=STEPS, prompts_per_step=16, group_size=4, lr=LR,
                                                estimator=estimator, beta=0.3, seed=seed))
    return {"estimator": estimator, "seed": seed, "lr": LR, "gold_positive": round(held_out_gold(model, task), 4)}


def jobs() -> list[tuple[str, int]]:
    return [(e, s) for e in ESTIMATORS for s in SEEDS]


def main() -> None:
    with ProcessPoolExecutor(2) as pool:
        rows = list(pool.map(run, *zip(*jobs())))
    with open(HERE / "estimators.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote estimators.csv ({len(rows)} rows)", file=sys.stderr)


if __name__ == "__main__":
    main()
