"""Lesson 11's sweep, too long for the lesson's two minutes: DPO and its variants on the orders
pairs, judged against the hidden gold utility. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/dpo.py                  # every job: about 30 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/dpo.py --only dpo 1.0 0  # one run, its eval rows printed

Every run starts from the shipped SFT model, which is also its frozen reference (as lesson 09's
PPO runs), and is judged by `minirl.train.rlhf.policy_report` on EVAL_SAMPLES fresh samples every
EVAL_EVERY steps (gold, valid share, KL(pi || pi_sft), length), plus, on the same steps:
`valid_mass`, the policy's total probability of the 1,008 valid orders (in their canonical
tokens), `pair_mass`, its total probability of the distinct responses of the training pairs, and
the mean chosen and rejected log-probs, log-ratio margin h and preference accuracy over the first
PROBE_PAIRS training pairs (a fixed set, so the curves are not batch noise), and `win_rate`, the
gold Bradley-Terry probability that a sample of the policy beats a sample of the SFT model (exact
over EVAL_SAMPLES samples of each, `rlhf.win_rate`). Runs (RUNS):

- dpo         the sigmoid loss on the 2,250 training pairs, summed log-probs, at each beta of BETAS
- dpo-mean    the same with per-token mean log-probs, at beta = MEAN_BETA (about beta times the
              mean response length, so the two start with comparable step sizes in reward units)
- cdpo        conservative DPO, label smoothing = the world's label noise (`minirl.train.dpo.label_noise`)
- ipo         IPO's squared loss
- simpo       SimPO (no reference), beta = SIMPO_BETA, gamma = SIMPO_GAMMA
- online      online DPO: fresh pairs of the policy's own samples labelled by the gold annotator
              every ONLINE_EVERY steps, for ONLINE_STEPS steps: the same number of labels (and of
              steps) as one epoch of the offline pairs, which is the 'dpo' run at that step

Each run's learning rate was chosen the same way before the sweep (dpo_tuning.csv): the one of
its LEARNING_RATES with the best mean final gold over TUNING_SEEDS (`minirl.core.compare.choose_rate`),
at beta = MAIN_BETA for dpo; the reported seeds (SEEDS) are not among them. Every grid brackets
its choice: the grids began at 3e-5, 1e-4, 3e-4, and a choice at an end extended that end (1e-3
for dpo, dpo-mean, simpo and online; 1e-5 for cdpo and ipo); a choice at an end stops the sweep.
The other betas of 'dpo' use its rate. In all: 48 tuning runs (each grid at the 2 tuning seeds) and
54 reported runs (dpo at 4 betas and the 5 other runs, at the 6 seeds 0-5).

What a seed shares: every offline run of one seed (dpo at every beta, dpo-mean, cdpo, ipo, simpo)
draws its batches of the same 2,250 pairs in the same order (`random.Random(seed)`); every run of a
seed, online included, starts from the same SFT model and draws its evaluation samples from the same
generator seed (seed + 123), so their step-0 evaluations are identical; the win rate's samples use
fixed seeds (WIN_SEED) in every run. So runs of one seed are compared paired (`compare.paired`);
lesson 09's PPO runs share none of this (other data, other seeds: `compare.unpaired`).
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
from minirl.lm.sequences import pair_tokens
from minirl.lm.tokenizer import PAD
from minirl.train import dpo, rlhf
from minirl.train.dpo import DPOConfig, train_dpo
from minirl.world import datasets

HERE = Path(__file__).parent
SEEDS, TUNING_SEEDS = (0, 1, 2, 3, 4, 5), (100, 101)
GRID, UP, DOWN = (3e-5, 1e-4, 3e-4), (1e-3,), (1e-5,)
LEARNING_RATES = {"dpo": GRID + UP, "dpo-mean": GRID + UP, "simpo": GRID + UP, "online": GRID + UP,
                  "cdpo": DOWN + GRID, "ipo": DOWN + GRID}
STEPS, EVAL_EVERY, EVAL_SAMPLES, PROBE_PAIRS, WIN_SEED = 140, 10, 256, 512, 777
MAIN_BETA, BETAS, MEAN_BETA, SIMPO_BETA, SIMPO_GAMMA = 1.0, (0.1, 0.3, 1.0, 3.0), 8.0, 2.0, 0.5
ONLINE_EVERY, ONLINE_STEPS = 10, 70
RUNS = {"dpo": {}, "dpo-mean": {"average_logprobs": True}, "cdpo": {"label_smoothing": "noise"},
        "ipo": {"loss_type": "ipo"}, "simpo": {"loss_type": "simpo", "simpo_gamma": SIMPO_GAMMA},
        "online": {"online_every": ONLINE_EVERY, "steps": ONLINE_STEPS}}
RUN_BETA = {"dpo-mean": MEAN_BETA, "simpo": SIMPO_BETA}

EVAL_FIELDS = ["run", "beta", "seed", "lr", "step", "gold", "valid", "kl", "kl_se", "length", "valid_mass", "pair_mass",
               "probe_chosen_logp", "probe_rejected_logp", "probe_margin", "probe_accuracy", "win_rate"]
STEP_FIELDS = ["run", "beta", "seed", "lr", "step", "loss", "accuracy", "margin", "chosen_logps", "rejected_logps",
               "chosen_rewards", "rejected_rewards"]
TUNING_FIELDS = ["method", "lr", "seed", "gold", "valid", "kl"]


def rounded(row: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) and k not in ("lr", "beta") else v for k, v in row.items()}


def config_for(run: str, beta: float, seed: int, lr: float) -> DPOConfig:
    settings = dict(RUNS[run])
    if settings.get("label_smoothing") == "noise":
        settings["label_smoothing"] = round(dpo.label_noise(datasets.load_preferences("train")), 4)
    settings.setdefault("steps", STEPS)
    return DPOConfig(beta=beta, lr=lr, seed=seed, eval_every=EVAL_EVERY, eval_samples=EVAL_SAMPLES, **settings)


@torch.no_grad()
def sample_gold(policy, seed: int) -> list[float]:
    out = rlhf.order_samples(policy, EVAL_SAMPLES, seed)
    return minirl.world.rewards.order_gold_reward(out.prompts, out.texts)


@torch.no_grad()
def probe(policy, ref, items, pad, pair_texts, sft_gold) -> dict:
    """The masses, the fixed probe pairs' log-probs and the win rate (see the module docstring);
    ref (N, 2) the reference's log-probs of the probe pairs, sft_gold the SFT samples' gold."""
    c, r = dpo.pair_logprobs(policy, items, pad)
    h = (c - ref[:, 0]) - (r - ref[:, 1])
    texts, probs, mass = rlhf.valid_order_distribution(policy)
    index = {t: k for k, t in enumerate(texts)}
    pair_mass = mass * probs[[index[t] for t in pair_texts]].sum().item()
    return {"valid_mass": mass, "pair_mass": pair_mass, "probe_chosen_logp": c.mean().item(),
            "probe_rejected_logp": r.mean().item(), "probe_margin": h.mean().item(),
            "probe_accuracy": minirl.losses.preference_accuracy(h, torch.zeros_like(h)),
            "win_rate": rlhf.win_rate(sample_gold(policy, WIN_SEED), sft_gold)}


def dpo_run(run: str, beta: float, seed: int, lr: float, probed: bool = True) -> tuple[list[dict], list[dict]]:
    """One run from the SFT model; (eval rows, step rows). Without `probed` (the tuning runs) the
    probe columns are left out."""
    torch.set_num_threads(1)
    enc = minirl.load_tokenizer()
    pad = enc.encode_single_token(PAD)
    policy, sft = minirl.load_model("sft"), minirl.load_model("sft")
    pairs = datasets.load_preferences("train")
    items = pair_tokens(pairs[:PROBE_PAIRS], enc)
    pair_texts = sorted({"order:" + p[side] for p in pairs for side in ("chosen", "rejected")})
    ref = dpo.reference_logprobs(sft, items, pad, average=False)
    config = config_for(run, beta, seed, lr)
    head = {"run": run, "beta": beta, "seed": seed, "lr": lr}
    sft_gold = sample_gold(sft, WIN_SEED + 1)
    probes = {0: probe(policy, ref, items, pad, pair_texts, sft_gold) if probed else {}}

    def callback(metrics, policy):
        if metrics["step"] % EVAL_EVERY == 0 or metrics["step"] == config.steps:
            probes[metrics["step"]] = probe(policy, ref, items, pad, pair_texts, sft_gold) if probed else {}
    history, evals = train_dpo(policy, None if config.online_every else pairs, config, reference=sft, callback=callback)
    eval_rows = [rounded({**head, **{k: e[k] for k in EVAL_FIELDS[4:10]}, **probes[e["step"]]}) for e in evals]
    return eval_rows, [rounded({**head, **{k: h[k] for k in STEP_FIELDS[4:]}}) for h in history]


def tuning_run(method: str, lr: float, seed: int) -> dict:
    beta = RUN_BETA.get(method, MAIN_BETA)
    try:
        last = dpo_run(method, beta, seed, lr, probed=False)[0][-1]
    except FloatingPointError:  # diverged: never the chosen rate
        last = {"gold": float("nan"), "valid": float("nan"), "kl": float("nan")}
    return {"method": method, "lr": lr, "seed": seed, **{k: last[k] for k in ("gold", "valid", "kl")}}


def tuning_jobs() -> list[tuple]:
    return [(m, lr, s) for m in RUNS for lr in LEARNING_RATES[m] for s in TUNING_SEEDS]


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each run's rate with the best mean final gold over the tuning seeds (a diverged run: never);
    a choice at its grid's end stops the sweep (extend the grid)."""
    return {m: compare.sweep_rate([r for r in rows if r["method"] == m], LEARNING_RATES[m], "gold", SEEDS)
            for m in RUNS}


def jobs(rates: dict[str, float]) -> list[tuple]:
    out = [("dpo", b, s, rates["dpo"]) for b in BETAS for s in SEEDS]
    return out + [(run, RUN_BETA.get(run, MAIN_BETA), s, rates[run]) for run in RUNS if run != "dpo" for s in SEEDS]


def read_rows(name: str) -> list[dict]:
    def value(k, v):
        if k in ("run", "method"):
            return v
        return int(v) if k in ("seed", "step") else float(v)
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
    parser.add_argument("--only", nargs=3, metavar=("RUN", "BETA", "SEED"), help="run one job and print its eval rows")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        run, beta, seed = args.only[0], float(args.only[1]), int(args.only[2])
        job = next(j for j in jobs(tuned_rates(read_rows("dpo_tuning"))) if j[:3] == (run, beta, seed))
        for row in dpo_run(*job)[0]:
            print(row)
        return
    with ProcessPoolExecutor(args.workers) as pool:
        tuning = list(pool.map(tuning_run, *zip(*tuning_jobs())))
        write_rows("dpo_tuning", TUNING_FIELDS, [rounded(r) for r in tuning])
        rates = tuned_rates(tuning)
        print(f"tuned learning rates: {rates}", file=sys.stderr, flush=True)
        results = list(pool.map(dpo_run, *zip(*jobs(rates))))
    write_rows("dpo_evals", EVAL_FIELDS, [r for evals, _ in results for r in evals])
    write_rows("dpo_steps", STEP_FIELDS, [r for _, steps in results for r in steps])


if __name__ == "__main__":
    main()
