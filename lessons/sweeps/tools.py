"""Lesson 14's runs on the tiny GPT: GRPO from the tool model (`minirl.load_model("tool")`) on
arithmetic with the calculator, at several costs per call, and without the calculator. Recorded
command:

    OMP_NUM_THREADS=1 python lessons/sweeps/tools.py                  # 42 tuning and 15 reported runs: about 45 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/tools.py --only cost-0.05 1   # one run's rows, printed

The runs ("variants"): `cost-C` trains on `tasks.tool_task(cost=C)`, the outcome (1 for the right
final answer) plus -C on each call; `no-tool` trains the same model on the same prompts with
`max_calls=0`, so the calculator never answers (a call the policy writes gets no answer, and the
outcome reads the final answer of an episode in the calculator's format, `tools.tool_reward`); `cost-0.05-dr` is `cost-0.05` with Dr. GRPO's advantage (the group's
mean subtracted, no division by its std). Every run starts from the tool model, with GRPO's
defaults but the learning rate (and that advantage): STEPS steps of 16 prompts x 8 episodes, beta
0.04. Each variant's rate is chosen the same way, before the sweep: the one of its grid (GRIDS)
with the best mean held-out reward (the share right less C times the calls per episode) at the end
over TUNING_SEEDS (tools_tuning.csv; a choice at the grid's end stops the sweep); the reported
seeds (SEEDS) are not among them.

Every EVAL_EVERY steps (the start included) a run's policy is measured on the 300 held-out
prompts, N_EVAL episodes each, temperature 1, with the calculator answering in every variant but
`no-tool`: `correct` (pass@1), `calls` (per episode), `reward`, `correct_with_call`,
`correct_without_call`, and by how hard a prompt is for the base model alone (its share right
over N_BASE samples of that prompt, below 0.5: `hard`, else `easy`): `calls_hard`, `calls_easy`,
`correct_hard`, `correct_easy`. Rows go to tools_tuning.csv and tools.csv beside this file.
"""
from __future__ import annotations

import argparse
import csv
import functools
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.core import compare
from minirl.lm import multiturn
from minirl.lm.sampling import sample
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.world import tasks, tools

HERE = Path(__file__).parent
SEEDS, TUNING_SEEDS = (0, 1, 2), (100, 101)
STEPS, EVAL_EVERY, N_EVAL, N_BASE = 60, 15, 4, 16
# name: (cost per call, GRPO's advantage); "group" is (r - mean) / (std + eps), "group_mean" Dr. GRPO's r - mean
VARIANTS = {"no-tool": (0.0, "group"), "cost-0": (0.0, "group"), "cost-0.05": (0.05, "group"), "cost-0.2": (0.2, "group"),
            "cost-0.05-dr": (0.05, "group_mean")}
GRID = (3e-5, 1e-4, 3e-4, 1e-3)
GRIDS = {**{name: GRID for name in VARIANTS}, "cost-0.05-dr": (1e-5, *GRID)}  # Dr. GRPO's optimum sat at GRID's low end
FIELDS = ["run", "seed", "lr", "step", "correct", "calls", "reward", "correct_with_call", "correct_without_call",
          "calls_hard", "calls_easy", "correct_hard", "correct_easy"]


def variant_task(name: str) -> tasks.Task:
    return tasks.tool_task(cost=VARIANTS[name][0], max_calls=0 if name == "no-tool" else 1)


@functools.cache
@torch.no_grad()
def hard_prompts() -> frozenset[str]:
    """The held-out prompts the base model alone gets right less than half the time (N_BASE samples each)."""
    prompts = tasks.tool_task().test_prompts
    out = sample(minirl.load_model("base"), prompts, max_new_tokens=tools.MAX_NEW_TOKENS, group_size=N_BASE,
                 generator=torch.Generator().manual_seed(12_345))
    right = tools.tool_reward(out.prompts, out.texts)
    return frozenset(p for i, p in enumerate(prompts) if sum(right[i * N_BASE:(i + 1) * N_BASE]) < N_BASE / 2)


def share(values: list[float], where: list[bool]) -> float:
    kept = [v for v, w in zip(values, where) if w]
    return sum(kept) / len(kept) if kept else float("nan")


@torch.no_grad()
def evaluate(policy, name: str, seed: int, lr: float, step: int) -> dict:
    task = variant_task(name)
    r = multiturn.sample_episodes(policy, task.test_prompts, task.env, max_new_tokens=task.max_new_tokens,
                                  max_calls=task.max_calls, group_size=N_EVAL,
                                  generator=torch.Generator().manual_seed(40_000 + 100 * seed + step))
    right, called = tools.tool_reward(r.prompts, r.texts), [float(c > 0) for c in multiturn.calls(r).tolist()]
    if name == "no-tool":  # the calculator never answered: a call the policy wrote is not one
        called = [0.0] * len(called)
    hard = [p in hard_prompts() for p in r.prompts]
    easy = [not h for h in hard]
    every = [True] * len(right)
    row = {"run": name, "seed": seed, "lr": lr, "step": step, "correct": share(right, every),
           "calls": share(called, every), "correct_with_call": share(right, [c > 0 for c in called]),
           "correct_without_call": share(right, [c == 0 for c in called]),
           "calls_hard": share(called, hard), "calls_easy": share(called, easy),
           "correct_hard": share(right, hard), "correct_easy": share(right, easy)}
    row["reward"] = row["correct"] - VARIANTS[name][0] * row["calls"]
    return {k: round(v, 4) + 0.0 if isinstance(v, float) and k != "lr" else v for k, v in row.items()}  # + 0.0: no "-0.0"


def run(name: str, seed: int, lr: float) -> list[dict]:
    """One run's evaluations, every EVAL_EVERY steps from step 0."""
    torch.set_num_threads(1)
    minirl.setup(seed=seed)
    policy = minirl.load_model("tool")
    rows = [evaluate(policy, name, seed, lr, 0)]

    def callback(metrics, p):
        if (metrics["step"] + 1) % EVAL_EVERY == 0:
            rows.append(evaluate(p, name, seed, lr, metrics["step"] + 1))

    config = GRPOConfig(steps=STEPS, lr=lr, seed=seed, advantage=VARIANTS[name][1])
    train_grpo(policy, variant_task(name), config, callback=callback)
    return rows


def read_rows(name: str = "tools") -> list[dict]:
    with open(HERE / f"{name}.csv") as f:
        return [{k: v if k == "run" else int(v) if k in ("seed", "step") else float(v) for k, v in row.items()}
                for row in csv.DictReader(f)]


def write_rows(name: str, rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr)


def tuning_jobs() -> list[tuple]:
    return [(name, seed, lr) for name in VARIANTS for lr in GRIDS[name] for seed in TUNING_SEEDS]


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each variant's rate: the best mean final held-out reward over the tuning seeds."""
    final = [r for r in rows if r["step"] == STEPS]
    return {name: compare.sweep_rate([r for r in final if r["run"] == name], GRIDS[name], "reward", SEEDS)
            for name in VARIANTS}


def jobs(rates: dict[str, float]) -> list[tuple]:
    return [(name, seed, rates[name]) for name in VARIANTS for seed in SEEDS]


def run_all(todo: list[tuple], workers: int) -> list[dict]:
    with ProcessPoolExecutor(workers) as pool:
        return [row for rows in pool.map(run, *zip(*todo)) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"),
                        help="run one point, with the learning rate tools_tuning.csv chose, and print its rows")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        for row in run(args.only[0], int(args.only[1]), tuned_rates(read_rows("tools_tuning"))[args.only[0]]):
            print(row)
        return
    tuning = run_all(tuning_jobs(), args.workers)
    write_rows("tools_tuning", tuning)
    rates = tuned_rates(tuning)
    print(f"learning rates: {rates}", file=sys.stderr)
    write_rows("tools", run_all(jobs(rates), args.workers))


if __name__ == "__main__":
    main()
