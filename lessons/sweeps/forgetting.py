"""Lesson 13's forgetting runs on the tiny GPT: the base model taught arithmetic by RL (GRPO on the
verifier's reward) and by SFT (on correct answers to the training prompts), both watched on the
world's other three families as they go. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/forgetting.py            # 16 tuning and 12 reported runs: about 12 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/forgetting.py --only sft 1   # one run's rows, printed

Neither method has an anchor: GRPO runs with beta = 0 (no KL penalty), as SFT has none. Each
method's learning rate is chosen the same way, before the sweep: the one of its grid with the best
mean held-out pass@1 at the end over TUNING_SEEDS (forgetting_tuning.csv; a choice at the grid's
end stops the sweep); the reported seeds (SEEDS) are not among them. GRPO: STEPS_RL steps of 16
prompts x 8 completions, one gradient step per batch. SFT: STEPS_SFT steps of 32 demonstrations
from the 2,000 training prompts, each with its correct sum.

Every EVAL_EVERY steps (the start included) a run's policy is measured, all on held-out prompts at
temperature 1: `pass1` (arithmetic, N_ARITH samples of each prompt); for each family F of reviews,
orders and plans, `valid_F` (the share of N_OTHER samples that parse) and `kl_F`, KL(pi || base)
per completion (the sum over its tokens of log pi - log base, averaged over the same samples);
and `kl_arithmetic` on the arithmetic samples. The lesson compares the two methods where each
run's own pass@1 path first reaches common levels (`minirl.core.compare.at_kl`). Rows go to
forgetting_tuning.csv and forgetting.csv beside this file.
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
from minirl.core.kl import kl_k1
from minirl.core.ops import masked_sum
from minirl.lm.sampling import completion_logprobs, sample
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.train.sft import SFTConfig, train_sft
from minirl.world import datasets, grammar, rewards
from minirl.world.tasks import arithmetic_task

HERE = Path(__file__).parent
SEEDS, TUNING_SEEDS = (0, 1, 2, 3, 4, 5), (100, 101)
STEPS_RL, STEPS_SFT, EVAL_EVERY = 60, 60, 10
N_ARITH, N_OTHER = 4, 256
GRIDS = {"rl": (2.5e-4, 5e-4, 1e-3, 2e-3), "sft": (1e-4, 3e-4, 1e-3, 3e-3)}
OTHERS = ("reviews", "orders", "plans")
FIELDS = ["run", "seed", "lr", "step", "pass1", "kl_arithmetic", *[f"{m}_{f}" for f in OTHERS for m in ("valid", "kl")]]


def family_samples(policy, base, enc, family: str, n: int, seed: int) -> tuple[list[str], list[str], torch.Tensor]:
    """n samples spread over the family's held-out prompts: prompts, texts, (n,) KL(pi || base) each."""
    prompts = [r["prompt"] for r in datasets.load_prompts(family, "test")]
    group = max(1, n // len(prompts))
    out = sample(policy, prompts, max_new_tokens=grammar.MAX_NEW_TOKENS[family], group_size=group,
                 generator=torch.Generator().manual_seed(seed), tokenizer=enc)
    kl = masked_sum(kl_k1(out.logprobs, completion_logprobs(base, out)), out.mask, dim=1)
    return out.prompts, out.texts, kl


@torch.no_grad()
def evaluate(policy, base, enc, name: str, seed: int, lr: float, step: int) -> dict:
    row = {"run": name, "seed": seed, "lr": lr, "step": step}
    eval_seed = 30_000 + 100 * seed + step
    prompts, texts, kl = family_samples(policy, base, enc, "arithmetic", N_ARITH * 300, eval_seed)
    row.update(pass1=sum(rewards.arithmetic_reward(prompts, texts)) / len(texts), kl_arithmetic=kl.mean().item())
    for family in OTHERS:
        prompts, texts, kl = family_samples(policy, base, enc, family, N_OTHER, eval_seed)
        row[f"valid_{family}"] = sum(grammar.VALIDATORS[family](p + t) for p, t in zip(prompts, texts)) / len(texts)
        row[f"kl_{family}"] = kl.mean().item()
    return {k: round(v, 4) + 0.0 if isinstance(v, float) and k != "lr" else v for k, v in row.items()}  # + 0.0: no "-0.0"


def demonstrations() -> list[dict]:
    return [{"prompt": r["prompt"], "completion": f" {r['answer']}"} for r in datasets.load_prompts("arithmetic", "train")]


def run(name: str, seed: int, lr: float) -> list[dict]:
    """One run's evaluations, every EVAL_EVERY steps from step 0; name 'rl' or 'sft'."""
    torch.set_num_threads(1)
    minirl.setup(seed=seed)
    enc, base, policy = minirl.load_tokenizer(), minirl.load_model("base"), minirl.load_model("base")
    rows = [evaluate(policy, base, enc, name, seed, lr, 0)]
    if name == "rl":
        def callback(metrics, p):
            if (metrics["step"] + 1) % EVAL_EVERY == 0:
                rows.append(evaluate(p, base, enc, name, seed, lr, metrics["step"] + 1))
        train_grpo(policy, arithmetic_task(), GRPOConfig(steps=STEPS_RL, prompts_per_step=16, group_size=8, lr=lr,
                                                         beta=0.0, seed=seed), enc, callback=callback)
    else:
        demos = demonstrations()
        for start in range(0, STEPS_SFT, EVAL_EVERY):  # the demonstrations' order seeded per chunk
            train_sft(policy, demos, SFTConfig(steps=EVAL_EVERY, batch_size=32, lr=lr, seed=seed * 1000 + start), enc)
            rows.append(evaluate(policy, base, enc, name, seed, lr, start + EVAL_EVERY))
    return rows


def read_rows(name: str) -> list[dict]:
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
    return [(name, seed, lr) for name, grid in GRIDS.items() for lr in grid for seed in TUNING_SEEDS]


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each method's rate: the best mean final held-out pass@1 over the tuning seeds."""
    final = [r for r in rows if r["step"] == (STEPS_RL if r["run"] == "rl" else STEPS_SFT)]
    return {name: compare.sweep_rate([r for r in final if r["run"] == name], grid, "pass1", SEEDS)
            for name, grid in GRIDS.items()}


def jobs(rates: dict[str, float]) -> list[tuple]:
    return [(name, seed, rates[name]) for name in GRIDS for seed in SEEDS]


def run_all(todo: list[tuple], workers: int) -> list[dict]:
    with ProcessPoolExecutor(workers) as pool:
        return [row for rows in pool.map(run, *zip(*todo)) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("RUN", "SEED"),
                        help="run one point, with the learning rate forgetting_tuning.csv chose, and print its rows")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        for row in run(args.only[0], int(args.only[1]), tuned_rates(read_rows("forgetting_tuning"))[args.only[0]]):
            print(row)
        return
    tuning = run_all(tuning_jobs(), args.workers)
    write_rows("forgetting_tuning", tuning)
    rates = tuned_rates(tuning)
    print(f"learning rates: {rates}", file=sys.stderr)
    write_rows("forgetting", run_all(jobs(rates), args.workers))


if __name__ == "__main__":
    main()
