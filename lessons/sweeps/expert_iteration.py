"""Expert iteration against GRPO on the tiny GPT: sums of three numbers written step by step
(`minirl.world.steps.steps_task(3)`), from the shipped steps model (`minirl.load_model("steps")`,
final answer right about 1 time in 4). Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/expert_iteration.py --workers 1   # 14 tuning and 12 reported runs, 20 min
    OMP_NUM_THREADS=1 python lessons/sweeps/expert_iteration.py --only grpo 1   # one run's rows, printed
    OMP_NUM_THREADS=1 python lessons/sweeps/expert_iteration.py --report        # the comparisons, from the CSVs

The arms ("runs"), at matched samples: each draws TOTAL = 12,288 completions at temperature 1.
`expert-iteration` (`minirl.train.expert_iteration`): 6 rounds of 256 prompts x 8 completions, every
completion with the right final answer kept, one SFT epoch over the kept ones in batches of 32.
`grpo` (`minirl.train.grpo`): 96 steps of 16 prompts x 8, GRPO's defaults but the learning rate
(beta 0.04, the group's advantage, one gradient step per batch). Both draw their prompts from
random.Random(seed) in the same order, so a round of expert iteration trains on the prompts of 16
GRPO steps. Each arm's rate is chosen the same way, before the sweep: the one of its grid (GRIDS)
with the best mean held-out pass@1 at the end over TUNING_SEEDS (expert_iteration_tuning.csv, one
evaluation per run, at the end; a choice at the grid's end stops the sweep); the reported seeds
(SEEDS) are not among them.

Every EVAL_EVERY = 2,048 samples (a round, or 16 GRPO steps; the start included) a reported run's
policy is measured on the 300 held-out prompts, N_EVAL = 16 completions each at temperature 1, by a
generator seeded by (seed, evaluation) and so shared by both arms: `pass1`, `pass4`, `pass16`
(the unbiased estimator, `minirl.world.evaluate.pass_at_k`, from the 16 per prompt, averaged over
prompts), `well_formed`, and `kl`: KL(policy || start) as the mean over those 4,800 completions of
their sequence log-ratio log pi - log pi_start (`minirl.train.rlhf.sequence_kl`: the policy's own
samples, so an unbiased estimate of the sequence KL), for comparisons at matched KL
(`minirl.core.compare.at_kl`, on each run's own trajectory). Rows go to expert_iteration.csv.

The recorded run (tuning and reported, `--workers 1`) took 1,178 s on one core of a 2-core x86_64
AMD EPYC (torch 2.13.0+cpu, one thread), the other core busy with another sweep; a reported run
takes about 70 s, of which its seven evaluations take about 40. Each seed is shared by both arms
(the same start, the same prompts in the same order, the same evaluation generator), so the
comparisons are paired over the seeds (`--report`).
"""
from __future__ import annotations

import argparse
import csv
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.core import compare
from minirl.lm.sampling import sample
from minirl.train.expert_iteration import ExpertIterationConfig, train_expert_iteration
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.train.rlhf import sequence_kl
from minirl.world import steps
from minirl.world.evaluate import pass_at_k

HERE = Path(__file__).parent
SEEDS, TUNING_SEEDS = (0, 1, 2, 3, 4, 5), (100, 101)
ROUNDS, PROMPTS_PER_ROUND, N = 6, 256, 8  # expert iteration's rounds; GRPO's batches are 16 prompts x N
GRPO_PROMPTS = 16
EVAL_EVERY = PROMPTS_PER_ROUND * N  # 2,048 samples
TOTAL = ROUNDS * EVAL_EVERY  # 12,288 samples
GRPO_STEPS = TOTAL // (GRPO_PROMPTS * N)  # 96
N_EVAL, KS = 16, (1, 4, 16)
RUNS = ("expert-iteration", "grpo")
GRIDS = {"expert-iteration": (1e-4, 3e-4, 1e-3), "grpo": (3e-5, 1e-4, 3e-4, 1e-3)}
FIELDS = ["run", "seed", "lr", "samples", "pass1", "pass4", "pass16", "kl", "well_formed"]


@torch.no_grad()
def evaluate(policy, start, name: str, seed: int, lr: float, samples: int) -> dict:
    task = steps.steps_task(3)
    out = sample(policy, task.test_prompts, max_new_tokens=task.max_new_tokens, group_size=N_EVAL,
                 generator=torch.Generator().manual_seed(50_000 + 100 * seed + samples // EVAL_EVERY))
    right = [steps.final_correct(p, c) for p, c in zip(out.prompts, out.texts)]
    counts = [sum(right[i:i + N_EVAL]) for i in range(0, len(right), N_EVAL)]  # right answers per prompt
    row = {"run": name, "seed": seed, "lr": lr, "samples": samples,
           **{f"pass{k}": sum(pass_at_k(N_EVAL, c, k) for c in counts) / len(counts) for k in KS},
           "kl": sequence_kl(out, start).mean().item(), "well_formed": task.gold(out)["well_formed"]}
    return {k: round(v, 4) + 0.0 if isinstance(v, float) and k != "lr" else v for k, v in row.items()}  # + 0.0: no "-0.0"


def run(name: str, seed: int, lr: float, trajectory: bool = True) -> list[dict]:
    """One run's evaluations: every EVAL_EVERY samples from the start (trajectory), or at the end only."""
    torch.set_num_threads(1)
    minirl.setup(seed=seed)
    policy, start = minirl.load_model("steps"), minirl.load_model("steps").eval()
    rows = [evaluate(policy, start, name, seed, lr, 0)] if trajectory else []

    def measure(samples: int, p) -> None:
        if samples % EVAL_EVERY == 0 and (trajectory or samples == TOTAL):
            rows.append(evaluate(p, start, name, seed, lr, samples))

    task = steps.steps_task(3)
    if name == "expert-iteration":
        config = ExpertIterationConfig(rounds=ROUNDS, prompts_per_round=PROMPTS_PER_ROUND, n=N, lr=lr, seed=seed)
        train_expert_iteration(policy, task, config, callback=lambda m, p: measure(m["samples"], p))
    else:
        config = GRPOConfig(steps=GRPO_STEPS, prompts_per_step=GRPO_PROMPTS, group_size=N, lr=lr, seed=seed)
        train_grpo(policy, task, config, callback=lambda m, p: measure((m["step"] + 1) * GRPO_PROMPTS * N, p))
    return rows


def read_rows(name: str) -> list[dict]:
    with open(HERE / f"{name}.csv") as f:
        return [{k: v if k == "run" else int(v) if k in ("seed", "samples") else float(v) for k, v in row.items()}
                for row in csv.DictReader(f)]


def write_rows(name: str, rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr)


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each arm's rate: the best mean final held-out pass@1 over the tuning seeds."""
    return {name: compare.sweep_rate([r for r in rows if r["run"] == name], GRIDS[name], "pass1", SEEDS)
            for name in RUNS}


def run_all(todo: list[tuple], workers: int) -> list[dict]:
    with ProcessPoolExecutor(workers) as pool:
        return [row for rows in pool.map(run, *zip(*todo)) for row in rows]


def trajectories(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """Each run's evaluations in order, by (run, seed)."""
    out: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        out.setdefault((r["run"], r["seed"]), []).append(r)
    return out


def kl_levels(rows: list[dict]) -> list[float]:
    """Three common KLs every reported run reaches: 1/4, 1/2 and all of the least largest KL of any run."""
    least = min(max(r["kl"] for r in evaluations) for evaluations in trajectories(rows).values())
    return [round(least * f, 3) for f in (0.25, 0.5, 1.0)]


def report(rows: list[dict]) -> None:
    """Per arm and seed the final pass@k and KL; expert iteration - GRPO paired over the seeds, at
    matched samples (the end) and at matched KL (`kl_levels`, each run read at its own crossing): one
    family of comparisons, its p-values unadjusted (six seeds cannot survive Holm's adjustment over 12)."""
    final = {(r["run"], r["seed"]): r for r in rows if r["samples"] == TOTAL}
    print(f"at the end ({TOTAL:,} samples): run seed lr pass1 pass4 pass16 kl")
    for (name, seed), r in sorted(final.items()):
        print(f"  {name:17s} {seed} {r['lr']:g} {r['pass1']:.3f} {r['pass4']:.3f} {r['pass16']:.3f} {r['kl']:.3f}")
    names, labels, comparisons = ("expert iteration", "GRPO"), [], []
    for metric in ("pass1", "pass4", "pass16"):
        a, b = ([final[(name, s)][metric] for s in SEEDS] for name in RUNS)
        labels.append(f"matched samples, {metric}")
        comparisons.append(compare.paired(a, b, names))
    levels, runs = kl_levels(rows), trajectories(rows)
    for metric in ("pass1", "pass4", "pass16"):
        for i, level in enumerate(levels):
            a, b = ([compare.at_kl([r["kl"] for r in runs[name, s]], [r[metric] for r in runs[name, s]], levels)[i]
                     for s in SEEDS] for name in RUNS)
            labels.append(f"matched KL {level:g}, {metric}")
            comparisons.append(compare.paired(a, b, names))
    for label, comparison in zip(labels, compare.family(comparisons, adjust=False)):
        print(f"{label}: {comparison}")
    a, b = ([final[(name, s)]["kl"] for s in SEEDS] for name in RUNS)
    print(f"KL at the end (lower is ahead: closer to the start): {compare.paired(a, b, names, higher_is_better=False)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"),
                        help="run one point, with the rate expert_iteration_tuning.csv chose, and print its rows")
    parser.add_argument("--report", action="store_true", help="print the comparisons from the CSVs")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.report:
        report(read_rows("expert_iteration"))
        return
    if args.only:
        name, seed = args.only[0], int(args.only[1])
        if name not in RUNS:
            parser.error(f"RUN must be one of {', '.join(RUNS)}, got {name!r}")
        for row in run(name, seed, tuned_rates(read_rows("expert_iteration_tuning"))[name]):
            print(row)
        return
    tuning = run_all([(name, seed, lr, False) for name in RUNS for lr in GRIDS[name] for seed in TUNING_SEEDS],
                     args.workers)
    write_rows("expert_iteration_tuning", tuning)
    rates = tuned_rates(tuning)
    print(f"learning rates: {rates}", file=sys.stderr)
    rows = run_all([(name, seed, rates[name]) for name in RUNS for seed in SEEDS], args.workers)
    write_rows("expert_iteration", rows)
    report(rows)


if __name__ == "__main__":
    main()
