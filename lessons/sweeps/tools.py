"""Lesson 15's runs on the tiny GPT: GRPO from the tool model (`minirl.load_model("tool")`) on
arithmetic with the calculator, at several costs per call, and without the calculator; and the
policy gradient with a call's cost on its turn or in the outcome. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/tools.py                  # 58 tuning and 42 reported runs (see below for the time)
    OMP_NUM_THREADS=1 python lessons/sweeps/tools.py --only cost-0.05 1   # one run's rows, printed
    OMP_NUM_THREADS=1 python lessons/sweeps/tools.py --variants pg-turn pg-outcome   # re-run these variants' rows only

The runs ("variants"): `cost-C` trains on `tasks.tool_task(cost=C)`, the outcome (1 for the right
final answer) plus -C on each call; `no-tool` trains the same model on the same prompts with
`max_calls=0`, so the calculator never answers (a call the policy writes gets no answer, and the
outcome reads the final answer of an episode in the calculator's format, `tools.tool_reward`);
`cost-0.05-dr` is `cost-0.05` with Dr. GRPO's advantage (the group's mean subtracted, no division
by its std). Every GRPO run starts from the tool model, with GRPO's defaults but the learning rate
(and that advantage): STEPS steps of 16 prompts x 8 episodes, beta 0.04. `pg-turn` and
`pg-outcome` train the tool model with the policy gradient and reward-to-go (`train_policy_gradient`,
no baseline, no KL penalty, the same batches of 16 x 8) at a cost of 0.1 per call, paid on the
call's turn (`tool_task(0.1)`) or folded into the outcome (`tool_task(0.1, per_turn=False)`): the
same return, a different reward-to-go on the tokens after a call. Each variant's rate is chosen
the same way, before the sweep: the one of its grid (GRIDS) with the best mean held-out reward
(the share right less C times the calls per episode) at the end over TUNING_SEEDS
(tools_tuning.csv; a choice at the grid's end stops the sweep); the reported seeds (SEEDS) are
not among them.

Every EVAL_EVERY steps (the start included) a run's policy is measured on the 300 held-out
prompts, N_EVAL episodes each, temperature 1, with the calculator answering in every variant but
`no-tool`: `correct` (pass@1), `calls` (per episode), `reward`, `correct_with_call`,
`correct_without_call`, and by how hard a prompt is for the base model alone (its share right
over N_BASE samples of that prompt, below 0.5: `hard`, else `easy`): `calls_hard`, `calls_easy`,
`correct_hard`, `correct_easy`, and by operand size (the sum below 100: `small`, else `large`):
`calls_small`, `calls_large`, `correct_small`, `correct_large`. Rows go to tools_tuning.csv and
tools.csv beside this file.

The reported seeds were 0-2 at first: the 58 tuning and 21 reported runs took about 32 min on 2
cores. Seeds 3-5 (21 more GRPO and policy-gradient runs, at the rates tools_tuning.csv had chosen)
were added later, the earlier rows unchanged: about 20 min more on 2 cores shared with other work.
Each seed is shared by every variant (the same start, the same batches of prompts, the same
evaluation generator), so comparisons between variants are paired over the seeds.
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
from minirl.train.pg import PGConfig, train_policy_gradient
from minirl.world import tasks, tools

HERE = Path(__file__).parent
SEEDS, TUNING_SEEDS = (0, 1, 2, 3, 4, 5), (100, 101)
STEPS, EVAL_EVERY, N_EVAL, N_BASE = 60, 15, 4, 16
# name: (cost per call, the advantage, the cost on the call's turn); GRPO's "group" is (r - mean) / (std + eps),
# "group_mean" Dr. GRPO's r - mean; "reward_to_go" is the policy gradient's (`train_policy_gradient`)
VARIANTS = {"no-tool": (0.0, "group", True), "cost-0": (0.0, "group", True), "cost-0.05": (0.05, "group", True),
            "cost-0.2": (0.2, "group", True), "cost-0.05-dr": (0.05, "group_mean", True),
            "pg-turn": (0.1, "reward_to_go", True), "pg-outcome": (0.1, "reward_to_go", False)}
GRPO_VARIANTS = [name for name, (_, advantage, _) in VARIANTS.items() if advantage != "reward_to_go"]
GRID = (3e-5, 1e-4, 3e-4, 1e-3)
LOW_GRID = (1e-5, *GRID[:-1])  # advantages not divided by a std: Dr. GRPO's optimum sat at GRID's low end
GRIDS = {**{name: GRID for name in VARIANTS}, "cost-0.05-dr": (1e-5, *GRID), "pg-turn": LOW_GRID, "pg-outcome": LOW_GRID}
FIELDS = ["run", "seed", "lr", "step", "correct", "calls", "reward", "correct_with_call", "correct_without_call",
          "calls_hard", "calls_easy", "correct_hard", "correct_easy", "calls_small", "calls_large", "correct_small",
          "correct_large"]


def variant_task(name: str) -> tasks.Task:
    cost, _, per_turn = VARIANTS[name]
    return tasks.tool_task(cost=cost, max_calls=0 if name == "no-tool" else 1, per_turn=per_turn)


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
    large = [sum(tools.operands(p)) >= 100 for p in r.prompts]
    small = [not g for g in large]
    every = [True] * len(right)
    row = {"run": name, "seed": seed, "lr": lr, "step": step, "correct": share(right, every),
           "calls": share(called, every), "correct_with_call": share(right, [c > 0 for c in called]),
           "correct_without_call": share(right, [c == 0 for c in called]),
           "calls_hard": share(called, hard), "calls_easy": share(called, easy),
           "correct_hard": share(right, hard), "correct_easy": share(right, easy),
           "calls_small": share(called, small), "calls_large": share(called, large),
           "correct_small": share(right, small), "correct_large": share(right, large)}
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

    advantage = VARIANTS[name][1]
    if name in GRPO_VARIANTS:
        train_grpo(policy, variant_task(name), GRPOConfig(steps=STEPS, lr=lr, seed=seed, advantage=advantage),
                   callback=callback)
    else:
        config = PGConfig(steps=STEPS, prompts_per_step=16, group_size=8, lr=lr, estimator=advantage, seed=seed)
        train_policy_gradient(policy, variant_task(name), config, callback=callback)
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


def merged(kept: list[dict], new: list[dict]) -> list[dict]:
    """The rows of both, in VARIANTS' order, as a run of every variant writes them."""
    return sorted(kept + new, key=lambda r: list(VARIANTS).index(r["run"]))  # stable: each run's own order kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"),
                        help="run one point, with the learning rate tools_tuning.csv chose, and print its rows")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                        help="run these variants only, and replace their rows in the CSVs (the others' are kept)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        for row in run(args.only[0], int(args.only[1]), tuned_rates(read_rows("tools_tuning"))[args.only[0]]):
            print(row)
        return
    chosen = args.variants or list(VARIANTS)
    kept_tuning = [r for r in read_rows("tools_tuning") if r["run"] not in chosen] if args.variants else []
    tuning = merged(kept_tuning, run_all([job for job in tuning_jobs() if job[0] in chosen], args.workers))
    write_rows("tools_tuning", tuning)
    rates = tuned_rates(tuning)
    print(f"learning rates: {rates}", file=sys.stderr)
    kept = [r for r in read_rows("tools") if r["run"] not in chosen] if args.variants else []
    write_rows("tools", merged(kept, run_all([job for job in jobs(rates) if job[0] in chosen], args.workers)))


if __name__ == "__main__":
    main()
