"""Lesson 05's sweeps, too long for the lesson's two minutes: PPO and REINFORCE at three betas, and
PPO with one implementation detail switched off at a time. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/ppo_vs_reinforce.py          # all 84 runs: 41 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/ppo_vs_reinforce.py --only ppo-full 0.3 0   # one run's rows, printed

The comparison is kept fair:

- the same reward for both: the lexicon score of the whole completion at its last token (the
  reward function `minirl.world.rewards.review_proxy_reward`), minus beta * KL_t on every token (k1 to the
  base model); REINFORCE sums it with reward-to-go, PPO with GAE and its critic;
- the same data: every run starts from the base model on the reviews task (negative openings)
  and sees STEPS x 16 prompts x 4 completions; a seed gives both methods the same prompt draws;
- learning rates chosen the same way for both, before the sweep: each method's rate is the one
  of its LEARNING_RATES with the best mean, over TUNING_SEEDS, of each run's median held-out gold over
  the late window (lr_tuning.csv; `minirl.core.compare.sweep_rate`; a choice at a grid's end stops the
  sweep: REINFORCE's grid, first 3e-5..1e-3, was extended to 3e-3); the reported seeds are not among them;
- six seeds per point, every run reported (the lesson compares runs seed by seed, not means).

An earlier version ran three seeds and judged each run by its step-24 evaluation alone; on another CPU
its tuning chose 3e-4 for PPO. Re-run with windows on this one, the tuning chose 1e-4 (judged at step
24 alone it would have chosen the same here): at 3e-4 one tuning run fell to gold -0.99 at step 8.

Each run is measured on the held-out openings every EVAL_EVERY steps, from step 0 (the base model):
gold reward, share gold-positive, well-formed share, proxy reward and KL to the base model per
completion (fresh samples, the same sampler seed at every evaluation). A run is judged over the
window of evaluations from step WINDOW on (its median), not by its last one, and at matched KL along
its own path of evaluations (`compare.at_kl`). Each evaluation row also carries the mean clip fraction
and explained variance of the steps since the previous evaluation. Rows go to lr_tuning.csv,
beta_sweep.csv and ablations.csv beside this file, one per run and evaluation.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.core import compare
from minirl.train.pg import PGConfig, train_policy_gradient
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.world.evaluate import heldout_report
from minirl.world.rewards import review_proxy_reward
from minirl.world.tasks import reviews_task

HERE = Path(__file__).parent
STEPS, EVAL_EVERY, WINDOW = 24, 4, 16  # evaluations at steps 0, 4, ..., 24; judged over steps 16, 20, 24
SEEDS, BETAS = (0, 1, 2, 3, 4, 5), (0.1, 0.3, 1.0)
GRID, TUNING_SEEDS, TUNING_BETA = (3e-5, 1e-4, 3e-4, 1e-3), (100, 101), 0.3
LEARNING_RATES = {"ppo-full": GRID, "reinforce": GRID + (3e-3,)}
PPO = PPOConfig(steps=STEPS, prompts_per_step=16, group_size=4)
REINFORCE = PGConfig(steps=STEPS, prompts_per_step=16, group_size=4, estimator="reward_to_go")
# each switches one detail of PPO off
RUNS = {
    "ppo-full": PPO,
    "ppo-no-clip": dataclasses.replace(PPO, clip=False),
    "ppo-no-value-clip": dataclasses.replace(PPO, value_clip=None),
    "ppo-no-whiten": dataclasses.replace(PPO, whiten=False),
    "ppo-one-epoch": dataclasses.replace(PPO, epochs=1),  # one pass, still 4 minibatch steps
    "ppo-one-step": dataclasses.replace(PPO, epochs=1, minibatches=1),  # one step per batch: ratio 1, no clip at work
    "reinforce": REINFORCE,
}
HELDOUT = ("gold", "gold_positive", "valid", "reward", "kl")
DIAGNOSTICS = ("clip_fraction", "explained_variance")
FIELDS = ["run", "beta", "seed", "lr", "step", *HELDOUT, *DIAGNOSTICS]


def run(name: str, beta: float, seed: int, lr: float) -> list[dict]:
    """One run's evaluation rows, steps 0, EVAL_EVERY, ..., STEPS; a diverged run's later rows are NaN."""
    torch.set_num_threads(1)
    task = reviews_task("negative")
    policy, base = minirl.load_model("base"), minirl.load_model("base")
    config = dataclasses.replace(RUNS[name], beta=beta, seed=seed, lr=lr)
    train = train_policy_gradient if name == "reinforce" else train_ppo
    head = {"run": name, "beta": beta, "seed": seed, "lr": lr}
    rows, recent = [evaluation(head, 0, policy, task, base, [])], []

    def callback(metrics, policy):
        recent.append(metrics)
        if (metrics["step"] + 1) % EVAL_EVERY == 0:
            rows.append(evaluation(head, metrics["step"] + 1, policy, task, base, recent))
            recent.clear()

    try:
        train(policy, task, config, reward_fn=review_proxy_reward, callback=callback)
    except FloatingPointError:  # diverged (a learning rate too large): NaN from here on, never chosen
        nan = dict.fromkeys((*HELDOUT, *DIAGNOSTICS), float("nan"))
        rows += [{**head, "step": s, **nan} for s in range(len(rows) * EVAL_EVERY, STEPS + 1, EVAL_EVERY)]
    return rows


def evaluation(head: dict, step: int, policy, task, base, recent: list[dict]) -> dict:
    """The held-out report at `step`, with the mean diagnostics of the training steps since the last one."""
    report = heldout_report(policy, task, reference=base)
    values = {**{k: report[k] for k in HELDOUT},
              **{k: sum(m.get(k, math.nan) for m in recent) / len(recent) if recent else math.nan for k in DIAGNOSTICS}}
    return {**head, "step": step, **{k: round(v, 4) + 0.0 for k, v in values.items()}}  # + 0.0: never "-0.0"


def per_run(rows: list[dict]) -> dict[tuple, list[dict]]:
    """{(run, beta, seed, lr): its evaluation rows in step order}."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault((r["run"], r["beta"], r["seed"], r["lr"]), []).append(r)
    return out


def late(rows: list[dict], key: str = "gold") -> compare.Window:
    """One run's evaluations of `key` over the late window, steps WINDOW..STEPS."""
    return compare.window([r["step"] for r in rows], [r[key] for r in rows], WINDOW)


def method(name: str) -> str:
    return "reinforce" if name == "reinforce" else "ppo-full"


def tuning_jobs() -> list[tuple]:
    return [(m, TUNING_BETA, s, lr) for m in ("ppo-full", "reinforce") for lr in LEARNING_RATES[m] for s in TUNING_SEEDS]


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each method's learning rate: the best mean over the tuning seeds of each run's median held-out
    gold over the late window (a diverged run: never); a choice at its grid's end stops the sweep."""
    runs = per_run(rows)
    return {m: compare.sweep_rate([{"lr": lr, "seed": s, "gold": late(r).median} for (run, _, s, lr), r in runs.items()
                                   if run == m], LEARNING_RATES[m], "gold", SEEDS) for m in ("ppo-full", "reinforce")}


def jobs(rates: dict[str, float]) -> dict[str, list[tuple]]:
    return {"beta_sweep": [(n, b, s, rates[n]) for n in ("ppo-full", "reinforce") for b in BETAS for s in SEEDS],
            "ablations": [(n, 0.3, s, rates[method(n)]) for n in RUNS if n != "reinforce" for s in SEEDS]}


def read_rows(name: str) -> list[dict]:
    with open(HERE / f"{name}.csv") as f:
        return [{k: (v if k == "run" else int(v) if k in ("seed", "step") else float(v)) for k, v in row.items()}
                for row in csv.DictReader(f)]


def write_rows(name: str, rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr)


def run_all(todo: list[tuple], workers: int) -> dict[tuple, list[dict]]:
    unique = sorted(set(todo))
    with ProcessPoolExecutor(workers) as pool:
        return dict(zip(unique, pool.map(run, *zip(*unique))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=3, metavar=("RUN", "BETA", "SEED"),
                        help="run one point, with the learning rate lr_tuning.csv chose, and print its rows")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        rates = tuned_rates(read_rows("lr_tuning"))
        for row in run(args.only[0], float(args.only[1]), int(args.only[2]), rates[method(args.only[0])]):
            print(row)
        return
    tuning = run_all(tuning_jobs(), args.workers)
    write_rows("lr_tuning", [r for j in tuning_jobs() for r in tuning[j]])
    rates = tuned_rates([r for rows in tuning.values() for r in rows])
    print(f"learning rates: {rates}", file=sys.stderr)
    todo = jobs(rates)
    rows = run_all([j for js in todo.values() for j in js], args.workers)
    for name, js in todo.items():
        write_rows(name, [r for j in js for r in rows[j]])


if __name__ == "__main__":
    main()
