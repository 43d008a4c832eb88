"""A process reward model as RL's reward, against an outcome reward model and the verifier itself,
on sums of three numbers written step by step, from the steps model. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/process_rl.py                   # 42 tuning and 30 reported runs, 40 minutes
    OMP_NUM_THREADS=1 python lessons/sweeps/process_rl.py --report          # the comparisons, from the CSVs
    OMP_NUM_THREADS=1 python lessons/sweeps/process_rl.py --only prm-grpo 0  # one run's rows, printed

The reward models are the shipped prm_steps and orm_steps (`python -m minirl.train.process_models`):
the same 27,200 completions, the PRM labelled per step by the world, the ORM by the final answer,
each at the rate of four that picked best on validation prompts. The arms (ARMS), each from the
steps model on `steps.steps_task(3)`'s training prompts, STEPS steps of 16 prompts x 8 completions:

    verifier   GRPO on the outcome the world checks (1 for the right final answer)
    orm-grpo   GRPO on the ORM's probability of a right answer
    prm-grpo   GRPO with process supervision: each step's PRM probability, normalized over the
               group's steps, a token's advantage the sum from its step on (advantage 'process')
    orm-ppo    PPO with the ORM's probability on the last token
    prm-ppo    PPO with the PRM's probability on each step's last token, kept there (`dense`):
               GAE credits a token with the rewards from its step on

GRPO runs keep GRPO's defaults but the rate (beta 0.04, k3 per token); PPO runs 2 epochs of 2
minibatches per batch with PPO's other defaults (beta 0.1, k1 in the reward, critic rate 1e-3).
Each arm's rate is the one of its grid (GRIDS) with the best mean held-out share right at the end
over TUNING_SEEDS (process_rl_tuning.csv): every arm is tuned on the world's truth, the reward-model
arms too (their best case); the reported seeds (SEEDS) are not among them. A resumed sweep runs
only the jobs its CSVs lack: so the second tuning seed, orm-grpo's 1e-5 (its best on the first seed
sat at GRID's edge) and the sixth reported seed (five pairs cannot reach p <= 0.05) were added to a
first pass (13, 24 and 3 minutes, two runs at a time on the course's 2-core machine).

Every EVAL_EVERY steps (the start included) the policy is measured on the 300 held-out prompts,
N_EVAL samples each at temperature 1, the generator seeded per (seed, step) and shared by the arms:
`correct`, `well_formed`, `step_accuracy` (from the start), `steps` (words written per completion;
a right one writes 2), the two models' scores of the samples, `prm_min` (the PRM's weakest step)
and `orm`: the proxies, against the truth; and `kl`, the samples' mean summed log-ratio to the
steps model (k1 per completion, one measure for every arm). Each seed is shared by every arm (the same start, the same
prompts drawn), so comparisons are paired over the seeds.
"""
from __future__ import annotations

import argparse
import csv
import functools
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.core import compare
from minirl.lm.process_head import completion_steps, load_process_model, step_probabilities
from minirl.lm.sampling import completion_logprobs, sample
from minirl.train import prm, process_rewards
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.world import steps

HERE = Path(__file__).parent
SEEDS, TUNING_SEEDS = (0, 1, 2, 3, 4, 5), (100, 101)
ARMS = ("verifier", "orm-grpo", "prm-grpo", "orm-ppo", "prm-ppo")
GRID = (3e-5, 1e-4, 3e-4, 1e-3)
GRIDS = {**{name: GRID for name in ARMS}, "orm-grpo": (1e-5, *GRID)}  # orm-grpo's best sat at 3e-5, GRID's edge
TERMS = 3
STEPS, EVAL_EVERY, N_EVAL = 60, 15, 4
FIELDS = ["run", "seed", "lr", "step", "correct", "well_formed", "step_accuracy", "steps", "prm_min", "orm", "kl"]


@functools.cache
def reward_models() -> dict:
    """The shipped PRM and ORM (`python -m minirl.train.process_models`): the same completions, each at its tuned rate."""
    return {"prm": load_process_model("prm_steps"), "orm": load_process_model("orm_steps"),
            "reference": minirl.load_model("steps")}


def arm_task(name: str):
    models = reward_models()
    if name == "verifier":
        return steps.steps_task(TERMS)
    if name.startswith("orm"):
        return process_rewards.orm_task(models["orm"], TERMS)
    return process_rewards.prm_task(models["prm"], TERMS)


@torch.no_grad()
def evaluate(policy, name: str, seed: int, lr: float, step: int) -> dict:
    prompts = steps.steps_task(TERMS).test_prompts
    out = sample(policy, prompts, max_new_tokens=steps.MAX_NEW_TOKENS[TERMS], group_size=N_EVAL,
                 generator=torch.Generator().manual_seed(60_000 + 100 * seed + step))
    models = reward_models()
    rows = list(zip(out.prompts, out.texts))
    prm_probs = step_probabilities(models["prm"], out.prompts, [completion_steps(t) for t in out.texts])
    orm_probs = step_probabilities(models["orm"], out.prompts, [[t] for t in out.texts])
    row = {"run": name, "seed": seed, "lr": lr, "step": step,
           "correct": sum(steps.final_correct(p, c) for p, c in rows) / len(rows),
           "well_formed": sum(steps.is_well_formed(p, c) for p, c in rows) / len(rows),
           "step_accuracy": sum(steps.step_accuracy(p, c) for p, c in rows) / len(rows),
           "steps": sum(len(c.split()) for _, c in rows) / len(rows),
           "prm_min": sum(prm.completion_score(p, "min") for p in prm_probs) / len(rows),
           "orm": sum(p[0] for p in orm_probs) / len(rows),
           "kl": ((out.logprobs - completion_logprobs(models["reference"], out)) * out.mask).sum().item() / len(rows)}
    return {k: round(v, 4) + 0.0 if isinstance(v, float) and k != "lr" else v for k, v in row.items()}


def run(name: str, seed: int, lr: float, steps_run: int = STEPS) -> list[dict]:
    """One run's evaluations, every EVAL_EVERY steps from step 0 (steps_run: fewer steps, the same start)."""
    torch.set_num_threads(1)
    task = arm_task(name)
    minirl.setup(seed=seed)
    policy = minirl.load_model("steps")
    rows = [evaluate(policy, name, seed, lr, 0)]

    def callback(metrics, p):
        if (metrics["step"] + 1) % EVAL_EVERY == 0:
            rows.append(evaluate(p, name, seed, lr, metrics["step"] + 1))

    if name.endswith("ppo"):
        config = PPOConfig(steps=steps_run, prompts_per_step=16, group_size=8, epochs=2, minibatches=2, lr=lr,
                           dense=name == "prm-ppo", seed=seed)
        train_ppo(policy, task, config, callback=callback)
    else:
        advantage = "process" if name == "prm-grpo" else "group"
        train_grpo(policy, task, GRPOConfig(steps=steps_run, lr=lr, seed=seed, advantage=advantage), callback=callback)
    return rows


def read_rows(name: str = "process_rl") -> list[dict]:
    with open(HERE / f"{name}.csv") as f:
        return [{k: v if k == "run" else int(v) if k in ("seed", "step") else float(v) for k, v in row.items()}
                for row in csv.DictReader(f)]


def write_rows(name: str, rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr)


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    final = [r for r in rows if r["step"] == STEPS]
    return {name: compare.sweep_rate([r for r in final if r["run"] == name], GRIDS[name], "correct", SEEDS)
            for name in ARMS}


def tuning_jobs() -> list[tuple[str, int, float]]:
    """(arm, seed, rate) of every tuning run, the PPO runs first (the longest: no worker finishes alone on one)."""
    return [(name, seed, lr) for name in ARMS[::-1] for lr in GRIDS[name] for seed in TUNING_SEEDS]


def trajectories(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """Each run's evaluations in order, by (run, seed)."""
    out: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        out.setdefault((r["run"], r["seed"]), []).append(r)
    return out


def at_step(rows: list[dict], name: str, key: str, step: int = STEPS) -> list[float]:
    """One value per reported seed: the run's evaluation at `step` (the end by default)."""
    runs = trajectories(rows)
    return [next(r[key] for r in runs[name, s] if r["step"] == step) for s in SEEDS]


PAIRS = (("prm-grpo", "orm-grpo"), ("prm-ppo", "orm-ppo"), ("prm-grpo", "verifier"), ("orm-grpo", "verifier"),
         ("prm-ppo", "verifier"), ("orm-ppo", "verifier"))


def tuning_table(tuning: list[dict]) -> None:
    """The mean over the tuning seeds at the end, at each rate of each arm's grid: the share right, and
    for the GRPO arms on a model, the model's own score of the samples (and the share well formed)."""
    rates = sorted({lr for grid in GRIDS.values() for lr in grid})
    final = [r for r in tuning if r["step"] == STEPS]
    print(f"{f'tuning, step {STEPS}, mean of {len(TUNING_SEEDS)} seeds':38s}" + "".join(f"{lr:>8g}" for lr in rates))
    rows = [(f"{name}: right", name, "correct") for name in ARMS]
    rows += [("orm-grpo: ORM score", "orm-grpo", "orm"), ("prm-grpo: PRM min", "prm-grpo", "prm_min"),
             ("prm-grpo: well formed", "prm-grpo", "well_formed")]
    for label, name, key in rows:
        means = [[r[key] for r in final if r["run"] == name and r["lr"] == lr] for lr in rates]
        print(f"  {label:36s}" + "".join(f"{sum(m) / len(m):8.3f}" if m else " " * 8 for m in means))


def ranges(rows: list[dict]) -> None:
    """The lowest and highest value over the reported seeds at the start (the same for every arm: one
    start, one evaluation sampler per seed) and each arm's at the end."""
    keys, runs = ("correct", "step_accuracy", "prm_min", "orm", "kl"), trajectories(rows)
    print(f"{len(SEEDS)} seeds, lowest-highest" + "".join(f"{k:>14s}" for k in keys))
    ends = [(f"{name}, step {STEPS}", [path[-1] for (run, _), path in runs.items() if run == name]) for name in ARMS]
    for label, at in [("step 0", [path[0] for (run, _), path in runs.items() if run == ARMS[0]]), *ends]:
        print(f"{label:22s}" + "".join(f"{min(r[k] for r in at):>9.2f}-{max(r[k] for r in at):.2f}" for k in keys))


def comparisons(rows: list[dict]) -> list[compare.Comparison]:
    """PAIRS in the held-out share right at the end, and the PRM - ORM pairs at the first evaluation
    (EVAL_EVERY), paired over the seeds: one family, shown, its p-values unadjusted. Not at matched
    KL: on some seed each PRM arm's first evaluation is already past the largest KL that one of its
    ORM arm's runs ever reaches, so no common KL has evaluations on both sides in every run."""
    family = compare.family([compare.paired(at_step(rows, a, "correct", step), at_step(rows, b, "correct", step), (a, b))
                             for step, pairs in ((STEPS, PAIRS), (EVAL_EVERY, PAIRS[:2])) for a, b in pairs],
                            adjust=False)
    compare.table(family, f"held-out share right, paired over {len(SEEDS)} seeds",
                  labels=[f"at step {STEPS}"] * len(PAIRS) + [f"at step {EVAL_EVERY}"] * 2)
    return family


def report(rows: list[dict], tuning: list[dict]) -> None:
    """Everything the lesson reads, and each run's end."""
    tuning_table(tuning)
    print("at the end: run seed lr correct step_accuracy prm_min orm kl")
    for (name, seed), path in sorted(trajectories(rows).items(), key=lambda kv: (ARMS.index(kv[0][0]), kv[0][1])):
        r = path[-1]
        print(f"  {name:9s} {seed} {r['lr']:g} {r['correct']:.3f} {r['step_accuracy']:.3f} {r['prm_min']:.3f} "
              f"{r['orm']:.3f} {r['kl']:.3f}")
    ranges(rows)
    comparisons(rows)


def resumed(name: str, jobs: list[tuple[str, int, float]], workers: int) -> list[dict]:
    """The rows of `jobs`: those the CSV holds, if it exists, and those of the jobs it lacks, which are
    run (a resumed sweep runs only those); written back in the arms' order."""
    rows = read_rows(name) if (HERE / f"{name}.csv").exists() else []
    rows = [r for r in rows if (r["run"], r["seed"], r["lr"]) in jobs]  # a job no longer asked for goes
    done = {(r["run"], r["seed"], r["lr"]) for r in rows}
    rows += run_all([job for job in jobs if job not in done], workers)
    write_rows(name, sorted(rows, key=lambda r: (ARMS.index(r["run"]), r["lr"], r["seed"], r["step"])))
    return rows


def run_all(todo: list[tuple], workers: int) -> list[dict]:
    if not todo:
        return []
    with ProcessPoolExecutor(workers) as pool:
        return [row for rows in pool.map(run, *zip(*todo)) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"),
                        help="run one point, at the rate process_rl_tuning.csv chose, and print its rows")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="print the recorded runs' comparisons")
    args = parser.parse_args()
    if args.report:
        report(read_rows(), read_rows("process_rl_tuning"))
        return
    if args.only:
        for row in run(args.only[0], int(args.only[1]), tuned_rates(read_rows("process_rl_tuning"))[args.only[0]]):
            print(row)
        return
    start = time.perf_counter()
    rates = tuned_rates(resumed("process_rl_tuning", tuning_jobs(), args.workers))
    print(f"learning rates: {rates}", file=sys.stderr)
    resumed("process_rl", [(name, seed, rates[name]) for name in ARMS[::-1] for seed in SEEDS], args.workers)
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
