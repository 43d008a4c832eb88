"""Lesson 13's sweep on the tiny GPT, too long for the lesson's two minutes: GRPO on arithmetic with
PPO's symmetric clip (0.2) and with DAPO's clip-higher (upper end 0.28), and what each does to the
policy's entropy and to held-out pass@k from k = 1 to 64, against the base model. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/clip_higher.py            # 16 tuning and 18 reported runs: about 15 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/clip_higher.py --only clip-higher 1   # one row, printed

The comparison is kept fair:

- the same task, reward and data for both: the base model, arithmetic, STEPS steps of 16 prompts x
  8 completions, INNER_STEPS gradient steps on each batch (so that the ratio moves and the clip can
  bind), no KL penalty (DAPO drops it, and clip-higher is meant for that setting);
- each one's learning rate chosen the same way, before the sweep: the one of GRID with the best
  mean held-out pass@1 over TUNING_SEEDS (clip_higher_tuning.csv; `minirl.core.compare.sweep_rate`,
  and a choice at the grid's end stops the sweep); the reported seeds (SEEDS) are not among them;
- six seeds each, every run reported: each seed shared by both clips and the base model (the same
  batches at step 0, the same evaluation samples' generator), so the comparisons are paired.

Each run is judged on N_SAMPLES samples of each of the 300 held-out prompts (pass@k by the unbiased
estimator for every k in KS; the number of prompts never solved in N_SAMPLES), and on the mean
per-token entropy of its training batches over the last 20 steps (`entropy`, as `train_grpo`
records it), with the clip fraction and KL to the base over the same steps. The base model is
evaluated the same way once per seed (run `base`). Rows go to clip_higher_tuning.csv and
clip_higher.csv; every tenth step's entropy to clip_higher_steps.csv.
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
from minirl.world import rewards
from minirl.world.evaluate import pass_at_k, sample_family
from minirl.world.tasks import arithmetic_task

HERE = Path(__file__).parent
STEPS, INNER_STEPS, SEEDS, N_SAMPLES = 60, 4, (0, 1, 2, 3, 4, 5), 64
KS = (1, 2, 4, 8, 16, 32, 64)
GRID, TUNING_SEEDS = (1.25e-4, 2.5e-4, 5e-4, 1e-3), (100, 101)
RUNS = {"clip-0.2": None, "clip-higher": 0.28}  # clip_eps_high (None: the symmetric clip_eps = 0.2)
FIELDS = ["run", "seed", "lr", *[f"pass{k}" for k in KS], "unsolved", "entropy", "clip_fraction", "kl"]
STEP_FIELDS = ["run", "seed", "step", "entropy"]


def config(name: str, seed: int, lr: float) -> GRPOConfig:
    return GRPOConfig(steps=STEPS, prompts_per_step=16, group_size=8, lr=lr, beta=0.0, inner_steps=INNER_STEPS,
                      clip_eps=0.2, clip_eps_high=RUNS[name], seed=seed)


def solved_counts(model, enc, prompts: list[str], seed: int) -> list[int]:
    """How many of N_SAMPLES samples (T = 1) of each prompt are right."""
    rows, completions, _ = sample_family(model, enc, "arithmetic", prompts, N_SAMPLES,
                                         torch.Generator().manual_seed(10_000 + seed))
    correct = rewards.arithmetic_reward(rows, completions)
    return [int(sum(correct[i * N_SAMPLES:(i + 1) * N_SAMPLES])) for i in range(len(prompts))]


def pass_curve(counts: list[int]) -> dict[str, float]:
    return {f"pass{k}": round(sum(pass_at_k(N_SAMPLES, c, k) for c in counts) / len(counts), 4) for k in KS}


def run(name: str, seed: int, lr: float | None) -> tuple[dict, list[dict]]:
    """One run's row and its every-tenth-step entropies; name 'base' (lr None) evaluates the base model."""
    torch.set_num_threads(1)
    task, enc = arithmetic_task(), minirl.load_tokenizer()
    policy = minirl.load_model("base")
    history = [] if name == "base" else train_grpo(policy, task, config(name, seed, lr), enc)
    counts = solved_counts(policy, enc, task.test_prompts, seed)
    last = history[-20:]
    row = {"run": name, "seed": seed, "lr": "" if lr is None else lr, **pass_curve(counts),
           "unsolved": sum(c == 0 for c in counts),
           **{k: round(sum(h[k] for h in last) / len(last), 4) if last else "" for k in ("entropy", "clip_fraction", "kl")}}
    steps = [{"run": name, "seed": seed, "step": h["step"], "entropy": round(h["entropy"], 4)}
             for h in history if h["step"] % 10 == 0 or h["step"] == STEPS - 1]
    return row, steps


def read_rows(name: str) -> list[dict]:
    def value(k, v):
        return v if k == "run" else int(v) if k in ("seed", "step", "unsolved") else float(v) if v != "" else None
    with open(HERE / f"{name}.csv") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_rows(name: str, fields: list[str], rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields)
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
    return [("base", seed, None) for seed in SEEDS] + [(name, seed, rates[name]) for name in RUNS for seed in SEEDS]


def run_all(todo: list[tuple], workers: int) -> dict[tuple, tuple]:
    with ProcessPoolExecutor(workers) as pool:
        return dict(zip(todo, pool.map(run, *zip(*todo))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"),
                        help="run one point, with the learning rate clip_higher_tuning.csv chose, and print its row")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        name, seed = args.only[0], int(args.only[1])
        print(run(name, seed, None if name == "base" else tuned_rates(read_rows("clip_higher_tuning"))[name])[0])
        return
    tuning = run_all(tuning_jobs(), args.workers)
    write_rows("clip_higher_tuning", FIELDS, [tuning[j][0] for j in tuning_jobs()])
    rates = tuned_rates([row for row, _ in tuning.values()])
    print(f"learning rates: {rates}", file=sys.stderr)
    done = run_all(jobs(rates), args.workers)
    write_rows("clip_higher", FIELDS, [done[j][0] for j in jobs(rates)])
    write_rows("clip_higher_steps", STEP_FIELDS, [s for j in jobs(rates) for s in done[j][1]])


if __name__ == "__main__":
    main()
