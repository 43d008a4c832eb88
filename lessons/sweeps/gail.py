"""Lesson 10's sweep, too long for the lesson's two minutes: GAIL and behaviour cloning on the plans
world, every policy scored exactly against the expert over all 1,296 plans. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/gail.py                 # every job: about 30 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/gail.py --only gail 2000 1  # one run, its eval rows printed

Every run starts from the shipped base model (trained on uniformly random plans) and uses the
first seed-shuffled N of the 2,000 demonstrations (`datasets.load_demos`, drawn from the expert's
exp(R)/Z), N in DEMOS. Rows of gail_evals.csv, one per evaluation: `kl`, the exact
KL(expert || policy) (`gail.expert_kl`); `reward`, the policy's exact expected true reward over the
plans, its mass elsewhere counted at the invalid-plan reward (`gail.expected_true_reward`);
`plan_mass`, its total probability of the plans; for GAIL also the discriminator's mean D on the
step's demonstrations and samples. Runs:

- gail   `gail.train_gail` with GAIL_CONFIG and PPO_CONFIG, the discriminator first pretrained
         PRETRAIN_STEPS steps against the base; evaluated every EVAL_EVERY generator steps
- bc     behaviour cloning = SFT on the same demonstrations (`sft.train_sft`, BC_CONFIG), evaluated
         every BC_EVAL_EVERY steps

gail_disc.csv holds the logit of a discriminator trained PRETRAIN_STEPS steps against the fixed base
(GAIL's warm start, seed 0, all demonstrations) on every plan: a learned reward, set beside MaxEnt
IRL's in the lesson.

Learning rates are tuned the same way for both methods before the reported runs
(gail_tuning.csv): each of its LEARNING_RATES on TUNING_SEED with all demonstrations, the one with the
lowest final KL kept; the reported seeds (SEEDS) are not the tuning seed, and the 100-demonstration
runs use the rate tuned at 2,000. GAIL's other settings were chosen by hand from short runs on seed 0
(issue 15's notes): a discriminator replay buffer, a warm start and a KL penalty of 0.2 kept the
policy out of the bursts of invalid text that runs without them fell into.
"""
from __future__ import annotations

import argparse
import csv
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl import datasets, gail
from minirl.ppo_trainer import PPOConfig
from minirl.reward_model import sequence_ids
from minirl.sft import SFTConfig, train_sft

HERE = Path(__file__).parent
SEEDS, TUNING_SEED, DEMOS = (0, 1, 2), 100, (100, 2000)
LEARNING_RATES = {"gail": (1e-5, 3e-5, 1e-4), "bc": (3e-5, 1e-4, 3e-4)}
PRETRAIN_STEPS, EVAL_EVERY, BC_EVAL_EVERY = 150, 10, 50
GAIL_CONFIG = dict(disc_lr=1e-3, disc_steps=1, expert_batch=256, policy_batches=4, reward_form="logit")
PPO_CONFIG = dict(steps=100, prompts_per_step=16, group_size=4, beta=0.2)
BC_CONFIG = dict(steps=300, batch_size=32)
EVAL_FIELDS = ["run", "demos", "seed", "lr", "step", "kl", "reward", "plan_mass", "d_expert", "d_policy"]
TUNING_FIELDS = ["run", "lr", "seed", "kl", "reward"]
DISC_FIELDS = ["plan", "logit"]


def demonstrations(n: int, seed: int) -> list[dict]:
    demos = datasets.load_demos()
    random.Random(seed).shuffle(demos)
    return demos[:n]


def evaluate(policy, run: str, n: int, seed: int, lr: float, step: int) -> dict:
    _, probs = gail.plan_distribution(policy)
    return {"run": run, "demos": n, "seed": seed, "lr": lr, "step": step, "kl": round(gail.expert_kl(policy), 5),
            "reward": round(gail.expected_true_reward(probs), 5), "plan_mass": round(probs.sum().item(), 5),
            "d_expert": "", "d_policy": ""}


def gail_run(n: int, seed: int, lr: float) -> list[dict]:
    minirl.setup(seed=seed)
    policy = minirl.load_model("base")
    rows = [evaluate(policy, "gail", n, seed, lr, 0)]

    def callback(metrics, p):
        if (metrics["step"] + 1) % EVAL_EVERY == 0:
            rows.append(evaluate(p, "gail", n, seed, lr, metrics["step"] + 1))

    history, _ = gail.train_gail(policy, demonstrations(n, seed), gail.GAILConfig(seed=seed, **GAIL_CONFIG),
                                 PPOConfig(seed=seed, lr=lr, **PPO_CONFIG), pretrain_steps=PRETRAIN_STEPS, callback=callback)
    for row in rows[1:]:
        h = history[row["step"] - 1]
        row.update(d_expert=round(h["d_expert"], 5), d_policy=round(h["d_policy"], 5))
    return rows


def bc_run(n: int, seed: int, lr: float) -> list[dict]:
    minirl.setup(seed=seed)
    policy, demos = minirl.load_model("base"), demonstrations(n, seed)
    rows = [evaluate(policy, "bc", n, seed, lr, 0)]
    for start in range(0, BC_CONFIG["steps"], BC_EVAL_EVERY):
        train_sft(policy, demos, SFTConfig(**{**BC_CONFIG, "steps": BC_EVAL_EVERY}, lr=lr, seed=seed * 1000 + start))
        rows.append(evaluate(policy, "bc", n, seed, lr, start + BC_EVAL_EVERY))
    return rows


def disc_logits(seed: int = 0) -> list[dict]:
    """A discriminator trained against the fixed base, its logit on every plan."""
    minirl.setup(seed=seed)
    base, enc = minirl.load_model("base"), minirl.load_tokenizer()
    batch = PPO_CONFIG["prompts_per_step"] * PPO_CONFIG["group_size"]
    disc = gail.Discriminator(datasets.load_demos(), gail.GAILConfig(seed=seed, **GAIL_CONFIG))
    gail.pretrain(disc, base, PRETRAIN_STEPS, batch, torch.Generator().manual_seed(seed))
    plans, _ = gail.plan_distribution(base)
    disc.model.eval()
    with torch.no_grad():
        logits = disc.logits([sequence_ids(enc, gail.PROMPT, " " + " ".join(p) + " .")[0] for p in plans])
    return [{"plan": " ".join(p), "logit": round(x, 5)} for p, x in zip(plans, logits.tolist())]


RUNS = {"gail": gail_run, "bc": bc_run}


def run_job(run: str, n: int, seed: int, lr: float) -> list[dict]:
    return RUNS[run](n, seed, lr)


def tuning_jobs() -> list[tuple[str, int, int, float]]:
    return [(run, max(DEMOS), TUNING_SEED, lr) for run in RUNS for lr in LEARNING_RATES[run]]


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each method's rate with the lowest final KL on the tuning seed."""
    return {run: min((r for r in rows if r["run"] == run), key=lambda r: r["kl"])["lr"] for run in RUNS}


def jobs(rates: dict[str, float]) -> list[tuple[str, int, int, float]]:
    return [(run, n, s, rates[run]) for run in RUNS for n in DEMOS for s in SEEDS]


def read_rows(name: str) -> list[dict]:
    def value(k, v):
        if k in ("run", "plan") or v == "":
            return v if v != "" else None
        return int(v) if k in ("demos", "seed", "step") else float(v)
    with open(HERE / f"{name}.csv") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_rows(name: str, fields: list[str], rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=3, metavar=("RUN", "DEMOS", "SEED"), help="run one job and print its eval rows")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        lr = tuned_rates(read_rows("gail_tuning"))[args.only[0]]
        for row in run_job(args.only[0], int(args.only[1]), int(args.only[2]), lr):
            print(row)
        return
    with ProcessPoolExecutor(args.workers) as pool:
        disc = pool.submit(disc_logits)
        tuning = [rows[-1] for rows in pool.map(run_job, *zip(*tuning_jobs()))]
        write_rows("gail_tuning", TUNING_FIELDS, [{k: r[k] for k in TUNING_FIELDS} for r in tuning])
        rates = tuned_rates(tuning)
        print(f"tuned learning rates: {rates}", file=sys.stderr, flush=True)
        results = list(pool.map(run_job, *zip(*jobs(rates))))
        write_rows("gail_disc", DISC_FIELDS, disc.result())
    write_rows("gail_evals", EVAL_FIELDS, [r for rows in results for r in rows])


if __name__ == "__main__":
    main()
