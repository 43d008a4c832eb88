"""Lesson 05's sweeps, too long for the lesson's two minutes: PPO and REINFORCE at three betas,
and PPO with one implementation detail switched off at a time. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/ppo_vs_reinforce.py          # all runs, ~15 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/ppo_vs_reinforce.py --only ppo-full 0.3 0   # one row, printed

Every run starts from the base model on the reviews task (negative openings), uses the KL to the
base model in the reward (r_t = -beta * KL_t, the task score at the end for PPO, per token for
REINFORCE), sees the same number of completions (STEPS x 16 prompts x 4), and is judged on the
held-out openings: gold reward, share gold-positive, well-formed share, and KL to the base model
per completion. Rows go to beta_sweep.csv and ablations.csv beside this file.
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
from minirl.evaluate import heldout_report
from minirl.pg_trainer import PGConfig, train_policy_gradient
from minirl.ppo_trainer import PPOConfig, train_ppo
from minirl.tasks import reviews_task

HERE = Path(__file__).parent
STEPS, SEEDS, BETAS = 24, (0, 1), (0.1, 0.3, 1.0)
PPO = PPOConfig(steps=STEPS, prompts_per_step=16, group_size=4, lr=1e-4)
REINFORCE = PGConfig(steps=STEPS, prompts_per_step=16, group_size=4, lr=3e-4, estimator="reward_to_go")
# each switches one detail of PPO off
RUNS = {
    "ppo-full": PPO,
    "ppo-no-clip": dataclasses.replace(PPO, clip=False),
    "ppo-no-value-clip": dataclasses.replace(PPO, value_clip=None),
    "ppo-no-whiten": dataclasses.replace(PPO, whiten=False),
    "ppo-one-epoch": dataclasses.replace(PPO, epochs=1),
    "reinforce": REINFORCE,
}
FIELDS = ["run", "beta", "seed", "gold", "gold_positive", "valid", "reward", "kl", "clip_fraction", "explained_variance"]


def run(name: str, beta: float, seed: int) -> dict:
    torch.set_num_threads(1)
    task = reviews_task("negative")
    policy, base = minirl.load_model("base"), minirl.load_model("base")
    if name == "reinforce":
        history = train_policy_gradient(policy, task, dataclasses.replace(REINFORCE, beta=beta, seed=seed))
    else:
        history = train_ppo(policy, task, dataclasses.replace(RUNS[name], beta=beta, seed=seed))
    report = heldout_report(policy, task, reference=base)
    last = history[-5:]
    row = {"run": name, "beta": beta, "seed": seed, **{k: report[k] for k in ("gold", "gold_positive", "valid", "reward", "kl")},
           "clip_fraction": sum(h.get("clip_fraction", float("nan")) for h in last) / len(last),
           "explained_variance": sum(h.get("explained_variance", float("nan")) for h in last) / len(last)}
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def jobs() -> dict[str, list[tuple]]:
    return {"beta_sweep": [(n, b, s) for n in ("ppo-full", "reinforce") for b in BETAS for s in SEEDS],
            "ablations": [(n, 0.3, s) for n in RUNS if n != "reinforce" for s in SEEDS]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=3, metavar=("RUN", "BETA", "SEED"), help="run one point and print its row")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        print(run(args.only[0], float(args.only[1]), int(args.only[2])))
        return
    todo = jobs()
    unique = sorted({j for js in todo.values() for j in js})
    with ProcessPoolExecutor(args.workers) as pool:
        rows = dict(zip(unique, pool.map(run, *zip(*unique))))
    for name, js in todo.items():
        with open(HERE / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(rows[j] for j in js)
        print(f"wrote {name}.csv ({len(js)} rows)", file=sys.stderr)


if __name__ == "__main__":
    main()
