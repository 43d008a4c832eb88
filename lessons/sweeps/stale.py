"""Lesson 07's sweep, too long for the lesson's two minutes: GRPO on arithmetic with rollouts 0, 1
and 2 updates stale, with no correction, with PPO's clipped ratio, and with truncated importance
sampling. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/stale.py            # 56 tuning and 42 reported runs (see below for the time)
    OMP_NUM_THREADS=1 python lessons/sweeps/stale.py --only stale-2-none 1   # one row, printed

The comparison is kept fair:

- the same task, reward and data for every run: the base model, held-out arithmetic, STEPS steps of
  16 prompts x 8 completions, beta 0.04 (lesson 06's GRPO), one gradient step per batch; a stale
  run trains on exactly as many batches as a fresh one (`GRPOConfig.stale_steps`);
- each run's learning rate chosen the same way, before the sweep: the one of GRID with the best
  mean held-out pass@1 over TUNING_SEEDS (stale_tuning.csv; `minirl.core.compare.sweep_rate`, and a
  choice at the grid's end stops the sweep); the reported seeds (SEEDS) are not among them;
- six seeds per point, every run reported; a seed is shared by every run (the same base model, the
  same first batch, whose prompts and samples the seed fixes, and the same evaluation generator), so
  comparisons between runs are paired over the seeds (`minirl.core.compare.paired`).

Each run is judged on held-out pass@1 (N_SAMPLES samples of each of the 300 held-out prompts), with
the last 20 steps' means of KL(mu || pi) per trained token (how far the sampler was from the
learner; k3 on the sampled tokens), clip fraction (the share of tokens whose ratio lies outside
[0.8, 1.2]) and KL to the base model. Rows go to stale_tuning.csv and stale.csv beside this file.

The reported seeds were 0-2 at first: the 56 tuning and 21 reported runs took about 28 min on 2 cores
(AMD). Seeds 3-5 (21 more runs, at the rates stale_tuning.csv had chosen) were added later, the earlier
rows unchanged: about 11 min more on 2 cores shared with other work.
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
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.world.evaluate import arithmetic_pass_at_k
from minirl.world.tasks import arithmetic_task

HERE = Path(__file__).parent
STEPS, SEEDS, N_SAMPLES = 120, (0, 1, 2, 3, 4, 5), 8
GRID, TUNING_SEEDS = (1.25e-4, 2.5e-4, 5e-4, 1e-3), (100, 101)
CAP = 2.0
RUNS = {"on-policy": (0, "none")} | {f"stale-{k}-{name}": (k, correction) for k in (1, 2)
                                     for name, correction in (("none", "none"), ("clip", "ppo_clip"),
                                                              ("tis", "token_truncate"))}
FIELDS = ["run", "stale_steps", "correction", "seed", "lr", "pass1", "sampler_kl", "clip_fraction", "kl"]


def config(name: str, seed: int, lr: float) -> GRPOConfig:
    k, correction = RUNS[name]
    return GRPOConfig(steps=STEPS, prompts_per_step=16, group_size=8, lr=lr, beta=0.04, stale_steps=k,
                      correction=correction, correction_cap=CAP, seed=seed)


def run(name: str, seed: int, lr: float) -> dict:
    torch.set_num_threads(1)
    task, enc = arithmetic_task(), minirl.load_tokenizer()
    policy = minirl.load_model("base")
    history = train_grpo(policy, task, config(name, seed, lr), enc)
    pass1 = arithmetic_pass_at_k(policy, enc, task.test_prompts, n=N_SAMPLES, ks=(1,),
                                 generator=torch.Generator().manual_seed(seed))[1]
    last = history[-20:]
    row = {"run": name, "stale_steps": RUNS[name][0], "correction": RUNS[name][1], "seed": seed, "lr": lr,
           "pass1": pass1, **{k: sum(h[k] for h in last) / len(last) for k in ("sampler_kl", "clip_fraction", "kl")}}
    return {k: round(v, 6) if k == "sampler_kl" else round(v, 4) if isinstance(v, float) and k != "lr" else v
            for k, v in row.items()}


def read_rows(name: str) -> list[dict]:
    with open(HERE / f"{name}.csv") as f:
        return [{k: (v if k in ("run", "correction") else int(v) if k in ("seed", "stale_steps") else float(v))
                 for k, v in row.items()} for row in csv.DictReader(f)]


def write_rows(name: str, rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr)


def tuning_jobs() -> list[tuple]:
    return [(name, seed, lr) for name in RUNS for lr in GRID for seed in TUNING_SEEDS]


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each run's learning rate: the best mean held-out pass@1 over the tuning seeds; a choice at the
    grid's end stops the sweep (extend the grid)."""
    return {name: compare.sweep_rate([r for r in rows if r["run"] == name], GRID, "pass1", SEEDS) for name in RUNS}


def jobs(rates: dict[str, float]) -> list[tuple]:
    return [(name, seed, rates[name]) for name in RUNS for seed in SEEDS]


def run_all(todo: list[tuple], workers: int) -> dict[tuple, dict]:
    with ProcessPoolExecutor(workers) as pool:
        return dict(zip(todo, pool.map(run, *zip(*todo))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"),
                        help="run one point, with the learning rate stale_tuning.csv chose, and print its row")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        print(run(args.only[0], int(args.only[1]), tuned_rates(read_rows("stale_tuning"))[args.only[0]]))
        return
    tuning = run_all(tuning_jobs(), args.workers)
    write_rows("stale_tuning", [tuning[j] for j in tuning_jobs()])
    rates = tuned_rates(list(tuning.values()))
    print(f"learning rates: {rates}", file=sys.stderr)
    rows = run_all(jobs(rates), args.workers)
    write_rows("stale", [rows[j] for j in jobs(rates)])


if __name__ == "__main__":
    main()
