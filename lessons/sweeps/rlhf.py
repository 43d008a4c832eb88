"""Lessons 09 and 10's sweeps, too long for the lesson's two minutes: RLHF on the orders world against
reward models, measured against the hidden gold utility. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/rlhf.py                  # every job: about 45 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/rlhf.py --only ppo 0.3 1  # one PPO run, its rows printed
    OMP_NUM_THREADS=1 python lessons/sweeps/rlhf.py --runs hack-iterated   # re-run one run's jobs, rows replaced
    OMP_NUM_THREADS=1 python lessons/sweeps/rlhf.py --seeds 3 4 5    # add these seeds' jobs, the others' rows kept

Every RL run starts from the shipped SFT model (`minirl.load_model("sft")`), which is also the
reference its KL is measured against, and is judged the same way: `minirl.train.rlhf.policy_report`
on EVAL_SAMPLES fresh samples (gold, valid share, KL(pi || pi_sft) with the course's estimator,
the reward model's normalized score as `proxy`, length, repetition). Jobs, by CSV:

- rlhf_tuning.csv: each method's learning rate, chosen the same way before the sweep: the one of
  its LEARNING_RATES with the best mean final gold over TUNING_SEEDS (PPO at beta = PIPELINE_BETA for
  TUNING_STEPS steps; RAFT for RAFT_ROUNDS rounds; `minirl.core.compare.choose_rate`, and a choice at a
  grid's end stops the sweep: RAFT's grid, first 3e-5..3e-4, was extended to 1e-3). The reported
  seeds (SEEDS) are not among them.
  Lesson 09's live pipeline run is PPO at PIPELINE_BETA for PIPELINE_STEPS steps: a point of the
  'ppo' rows below (their evals at that step).
- rlhf_evals.csv / rlhf_steps.csv: PPO against rm_all at each beta of BETAS (the pipeline's beta
  among them; 'ppo'), and with the critic initialized from rm_all ('ppo-rm-critic'), at the tuned
  rate for STEPS steps; RAFT round by round ('raft'); and the over-optimization runs at
  HACK_BETA with PPO's default rate HACK_LR: against rm_all ('hack'), with a stronger beta
  ('hack-strong-beta'), against the mean or the minimum of three reward models trained on all
  pairs with seeds 0-2 ('hack-ensemble-mean', 'hack-ensemble-min'), and two forms of iterated RLHF.
  'hack-iterated-continue' refits a copy of rm_all every ITERATE_EVERY steps of the run itself on
  ITERATE_PAIRS fresh pairs, each a sample of the policy against one of the SFT model labelled by the
  gold Bradley-Terry model; 'hack-iterated' first runs ITERATE_ROUNDS rounds (a fresh run of
  ITERATE_ROUND_STEPS steps from SFT against the current reward model, then the same refit), and
  then the run itself from SFT against the refitted model (its rounds in iterated_rounds.csv).
  Evals every few steps go to rlhf_evals.csv (step 0 is the SFT model), each step's training
  metrics to rlhf_steps.csv.
- best_of_n.csv: best-of-N from the SFT model against rm_all for each N of N_VALUES, BON_PICKS
  picks per seed: gold, valid, proxy of the picks, the KL bound log N - (N-1)/N and the plug-in
  estimate (`minirl.train.best_of_n.kl_plugin_estimate`, 16,384 plain draws).
- rm_scores.csv: reward models trained like lesson 08's (RMConfig(), base trunk) on LABELS pairs
  with SEEDS, normalized on base samples, and their scores of the 1,008 valid orders, one column
  per model: lesson 10 computes the exact over-optimization curves from them.

History: seeds 0-2 ran as one sweep (about 45 min on 2 cores). Seeds 3-5 were added later with
`--seeds 3 4 5` (about 48 min on 2 cores of an AMD EPYC with AVX-512), at the rates of
rlhf_tuning.csv, nothing chosen on them; seeds 0-2's rows are unchanged. The ensembles' members
for seeds 3-5's runs were retrained there (see `extend`), so they are the same recipe as seeds
0-2's members, not bit for bit the same models.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

import minirl
from minirl.core import compare
from minirl.lm import reward_head
from minirl.lm.tokenizer import PAD
from minirl.train import best_of_n as bon, reward_model as rmod, rlhf
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.train.raft import RAFTConfig, train_raft
from minirl.world import datasets, generate
from minirl.world.tasks import orders_task, reward_scores

HERE = Path(__file__).parent
SEEDS, TUNING_SEEDS = (0, 1, 2, 3, 4, 5), (100, 101)
LEARNING_RATES = {"ppo": (3e-5, 1e-4, 3e-4), "raft": (3e-5, 1e-4, 3e-4, 1e-3)}
PIPELINE_BETA, PIPELINE_STEPS, TUNING_STEPS = 0.3, 20, 30
BETAS, STEPS, EVAL_EVERY, EVAL_SAMPLES = (0.0, 0.03, 0.1, 0.3, 1.0), 60, 5, 256
HACK_BETA, HACK_LR, HACK_STEPS, HACK_EVAL_EVERY, HACK_STRONG_BETA = 0.01, 3e-4, 40, 4, 0.3
ITERATE_EVERY, ITERATE_PAIRS, ITERATE_RM = 8, 500, rmod.RMConfig(steps=100)
ITERATE_ROUNDS, ITERATE_ROUND_STEPS = 4, 20
RAFT_ROUNDS = 10
RAFT = RAFTConfig(rounds=RAFT_ROUNDS, prompts_per_round=256, n=8, sft_steps=8)
N_VALUES, BON_PICKS, BON_REFERENCE_DRAWS = (1, 2, 4, 8, 16, 32, 64, 128), 128, 16384
LABELS = (50, 100, 250, 500, 1000, 2250)
PPO = PPOConfig(steps=STEPS, prompts_per_step=16, group_size=4)

EVAL_FIELDS = ["run", "beta", "seed", "lr", "step", "gold", "valid", "kl", "kl_se", "proxy", "length", "repetition",
               "truncated"]
STEP_FIELDS = ["run", "beta", "seed", "lr", "step", "reward", "kl", "gold", "valid", "entropy", "length",
               "explained_variance", "value_loss", "clip_fraction"]
TUNING_FIELDS = ["method", "lr", "seed", "gold", "valid", "kl"]
BON_FIELDS = ["n", "seed", "gold", "valid", "proxy", "kl_bound", "kl_plugin"]
ROUND_FIELDS = ["seed", "round", "gold", "valid", "kl", "valid_vs_invalid_pairs"]


def rounded(row: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) and k not in ("lr", "beta") else v for k, v in row.items()}


def evaluate(policy, sft, reward_fn) -> dict:
    """The eval every run gets: `policy_report` against the SFT model, with rm_all's score as proxy."""
    report = rlhf.policy_report(policy, sft, samples=EVAL_SAMPLES, reward_fn=reward_fn)
    return {k: report[k] for k in EVAL_FIELDS[5:]}


# ---------------------------------------------------------------- reward functions
def ensemble_fn(models: list, how: str):
    """The mean or the minimum of several reward models' normalized scores (each mean 0, sd 1 on base samples)."""
    fns = [rmod.as_reward_fn(m) for m in models]
    combine = {"mean": lambda s: s.mean(dim=0), "min": lambda s: s.min(dim=0).values}[how]

    def ensemble(prompts, completions, **kwargs):
        return combine(torch.tensor([f(prompts, completions, **kwargs) for f in fns])).tolist()
    return ensemble


def load_rm(path: Path):
    rm = reward_head.RewardModel(minirl.GPT(minirl.GPTConfig()), minirl.load_tokenizer().encode_single_token(PAD))
    rm.load_state_dict(torch.load(path, weights_only=True))
    return rm.eval()


# ---------------------------------------------------------------- jobs
def ppo_run(run: str, beta: float, seed: int, lr: float, steps: int = STEPS, eval_every: int = EVAL_EVERY,
            rm_dir: str | None = None) -> tuple[list[dict], list[dict], list[dict]]:
    """One PPO run from the SFT model; (eval rows, step rows, iterated RLHF's round rows)."""
    torch.set_num_threads(1)
    policy, sft, base = minirl.load_model("sft"), minirl.load_model("sft"), minirl.load_model("base")
    rm_all = reward_head.load_reward_model("rm_all")
    judge = rmod.as_reward_fn(rm_all)  # the proxy every run is judged by
    reward_fn, critic_from, pool, current, rounds = judge, None, None, rm_all, []
    if run == "ppo-rm-critic":
        critic_from = rm_all
    elif run.startswith("hack-ensemble"):
        members = [rm_all] + [load_rm(Path(rm_dir) / f"rm_2250_{s}.pt") for s in (1, 2)]
        reward_fn = ensemble_fn(members, run.rsplit("-", 1)[1])
    elif run == "hack-iterated-continue":
        current = reward_head.load_reward_model("rm_all")  # a copy that is refitted; the judge stays rm_all
        reward_fn, pool = rmod.as_reward_fn(current), list(datasets.load_preferences("train"))
    elif run == "hack-iterated":
        current, rounds = iterated_reward_model(beta, seed, lr, sft, base)
        reward_fn = rmod.as_reward_fn(current)
    head = {"run": run, "beta": beta, "seed": seed, "lr": lr}
    evals = [rounded({**head, "step": 0, **evaluate(policy, sft, judge)})]
    steps_rows = []

    def callback(metrics, policy):
        done = metrics["step"] + 1
        steps_rows.append(rounded({**head, "step": done, **{k: metrics[k] for k in STEP_FIELDS[5:]}}))
        if pool is not None and done % ITERATE_EVERY == 0 and done < steps:
            config = dataclasses.replace(ITERATE_RM, seed=seed * 1000 + done)
            rlhf.refit_on_own_samples(current, policy, pool, base, sft, ITERATE_PAIRS, seed * 1000 + done, config)
        if done % eval_every == 0:
            evals.append(rounded({**head, "step": done, **evaluate(policy, sft, judge)}))

    config = dataclasses.replace(PPO, beta=beta, seed=seed, lr=lr, steps=steps)
    train_ppo(policy, orders_task(), config, reward_fn=reward_fn, critic_from=critic_from, callback=callback)
    return evals, steps_rows, rounds


def iterated_reward_model(beta: float, seed: int, lr: float, sft, base):
    """Iterated RLHF's reward model: ITERATE_ROUNDS rounds of (a fresh PPO run of ITERATE_ROUND_STEPS
    steps from the SFT model against the current reward model; ITERATE_PAIRS of its samples against
    the SFT model's, labelled by the gold Bradley-Terry model; the reward model refitted on all the
    pairs so far). Returns the reward model and a row per round for iterated_rounds.csv."""
    current, pool, rounds = reward_head.load_reward_model("rm_all"), list(datasets.load_preferences("train")), []
    judge = rmod.as_reward_fn(reward_head.load_reward_model("rm_all"))
    for r in range(ITERATE_ROUNDS):
        policy = minirl.load_model("sft")
        config = dataclasses.replace(PPO, beta=beta, seed=seed, lr=lr, steps=ITERATE_ROUND_STEPS)
        train_ppo(policy, orders_task(), config, reward_fn=rmod.as_reward_fn(current))
        row = {"seed": seed, "round": r + 1, **{k: evaluate(policy, sft, judge)[k] for k in ("gold", "valid", "kl")}}
        fresh = rlhf.refit_on_own_samples(current, policy, pool, base, sft, ITERATE_PAIRS, seed * 1000 + r,
                                          dataclasses.replace(ITERATE_RM, seed=seed * 1000 + r))
        mixed = [p for p in fresh if minirl.world.grammar.is_order("order:" + p["chosen"]) != minirl.world.grammar.is_order("order:" + p["rejected"])]
        rounds.append(rounded({**row, "valid_vs_invalid_pairs": len(mixed) / len(fresh)}))
    return current, rounds


def raft_run(seed: int, lr: float, rounds: int = RAFT_ROUNDS) -> list[dict]:
    """RAFT from the SFT model against rm_all; an eval after every round."""
    torch.set_num_threads(1)
    policy, sft = minirl.load_model("sft"), minirl.load_model("sft")
    judge = rmod.as_reward_fn(reward_head.load_reward_model("rm_all"))
    head = {"run": "raft", "beta": 0.0, "seed": seed, "lr": lr}
    evals = [rounded({**head, "step": 0, **evaluate(policy, sft, judge)})]
    config = dataclasses.replace(RAFT, seed=seed, lr=lr, rounds=rounds)
    train_raft(policy, orders_task(), config, reward_fn=judge,
               callback=lambda m, p: evals.append(rounded({**head, "step": m["round"] + 1, **evaluate(p, sft, judge)})))
    return evals


def tuning_run(method: str, lr: float, seed: int) -> dict:
    if method == "ppo":
        evals = ppo_run("ppo", PIPELINE_BETA, seed, lr, steps=TUNING_STEPS, eval_every=TUNING_STEPS)[0]
    else:
        evals = raft_run(seed, lr)
    last = evals[-1]
    return {"method": method, "lr": lr, "seed": seed, **{k: last[k] for k in ("gold", "valid", "kl")}}


def best_of_n_run(n: int, seed: int) -> dict:
    """BON_PICKS best-of-n picks from the SFT model against rm_all."""
    torch.set_num_threads(1)
    sft = minirl.load_model("sft")
    judge = rmod.as_reward_fn(reward_head.load_reward_model("rm_all"))
    picks = bon.best_of_n(sft, ["order:"] * BON_PICKS, n, judge, max_new_tokens=rlhf.MAX_NEW_TOKENS,
                          generator=torch.Generator().manual_seed(seed))
    plain = rlhf.order_samples(sft, BON_REFERENCE_DRAWS, seed=10_000 + seed)
    plain_scores = reward_scores(judge, plain).double()  # scored like the picks: from the sampled ids
    gold = torch.tensor(minirl.world.rewards.order_gold_reward(["order:"] * BON_PICKS, picks.texts))
    return rounded({"n": n, "seed": seed, "gold": gold.mean().item(), "valid": (gold > -2).double().mean().item(),
                    "proxy": picks.best_scores.mean().item(), "kl_bound": bon.kl_bound(n),
                    "kl_plugin": bon.kl_plugin_estimate(picks.best_scores, plain_scores, n)})


def rm_scores_run(labels: int, seed: int, rm_dir: str) -> tuple[str, list[float]]:
    """A reward model on `labels` training pairs (subset drawn by `seed`), normalized on base
    samples; its normalized scores of the valid orders. Saved for the ensemble when it uses all pairs."""
    torch.set_num_threads(1)
    rm, _ = rmod.train_reward_model(rmod.subset(datasets.load_preferences("train"), labels, seed), rmod.RMConfig(seed=seed))
    reward_head.normalize(rm, minirl.load_model("base"))
    if labels == LABELS[-1]:
        torch.save(rm.state_dict(), Path(rm_dir) / f"rm_{labels}_{seed}.pt")
    texts, _ = generate.order_distribution()
    return f"rm_{labels}_{seed}", [round(x, 5) for x in reward_head.score_texts(rm, texts, normalized=True).tolist()]


# ---------------------------------------------------------------- the plan
def tuning_jobs() -> list[tuple]:
    return [(m, lr, s) for m in ("ppo", "raft") for lr in LEARNING_RATES[m] for s in TUNING_SEEDS]


def tuned_rates(rows: list[dict]) -> dict[str, float]:
    """Each method's rate with the best mean final gold over the tuning seeds; a choice at its grid's
    end stops the sweep (extend the grid)."""
    return {m: compare.sweep_rate([r for r in rows if r["method"] == m], LEARNING_RATES[m], "gold", SEEDS)
            for m in ("ppo", "raft")}


def ppo_jobs(rates: dict[str, float]) -> list[tuple]:
    lr = rates["ppo"]
    jobs = [("ppo", b, s, lr) for b in BETAS for s in SEEDS] + [("ppo-rm-critic", PIPELINE_BETA, s, lr) for s in SEEDS]
    hack = [("hack", HACK_BETA), ("hack-strong-beta", HACK_STRONG_BETA), ("hack-ensemble-mean", HACK_BETA),
            ("hack-ensemble-min", HACK_BETA), ("hack-iterated-continue", HACK_BETA), ("hack-iterated", HACK_BETA)]
    return jobs + [(run, b, s, HACK_LR, HACK_STEPS, HACK_EVAL_EVERY) for run, b in hack for s in SEEDS]


def read_rows(name: str) -> list[dict]:
    def value(k, v):
        if k in ("run", "method", "order"):
            return v
        return int(v) if k in ("seed", "step", "n", "round") else float(v)
    with open(HERE / f"{name}.csv") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_rows(name: str, fields: list[str], rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr, flush=True)


def rerun(names: list[str], workers: int) -> None:
    """Re-run the PPO jobs of the named runs and put their rows where the whole sweep would write
    them; every other row is kept as it is."""
    if any(name.startswith("hack-ensemble") for name in names):
        sys.exit("the ensemble runs need the sweep's reward models (seeds 1 and 2 on all pairs): run the whole sweep")
    jobs = ppo_jobs(tuned_rates(read_rows("rlhf_tuning")))
    with ProcessPoolExecutor(workers) as pool:
        fresh = {job: pool.submit(ppo_run, *job) for job in jobs if job[0] in names}
        fresh = {job: future.result() for job, future in fresh.items()}
    old_evals, old_steps = read_rows("rlhf_evals"), read_rows("rlhf_steps")

    def rows(old, job, part):
        if job in fresh:
            return fresh[job][part]
        return [r for r in old if (r["run"], r["beta"], r["seed"], r["lr"]) == job[:4]]
    write_rows("rlhf_evals", EVAL_FIELDS, [r for job in jobs for r in rows(old_evals, job, 0)]
               + [r for r in old_evals if r["run"] == "raft"])
    write_rows("rlhf_steps", STEP_FIELDS, [r for job in jobs for r in rows(old_steps, job, 1)])
    if "hack-iterated" in names:
        write_rows("iterated_rounds", ROUND_FIELDS, [r for job in jobs if job in fresh for r in fresh[job][2]])


def extend(seeds: list[int], workers: int) -> None:
    """Run every per-seed job of `seeds` (reward models, best-of-N, PPO and RAFT runs) at the rates of
    rlhf_tuning.csv and write every CSV in the order a whole sweep writes it, the other seeds' rows
    kept. The ensembles' members (all pairs, seeds 1 and 2) are retrained here, so on another CPU
    than the one that ran the kept seeds they are not bit for bit the members those seeds used."""
    rates, rm_dir = tuned_rates(read_rows("rlhf_tuning")), tempfile.mkdtemp(prefix="rlhf_rms_")
    jobs = ppo_jobs(rates)
    with ProcessPoolExecutor(workers) as pool:
        scores = dict(pool.map(rm_scores_run, *zip(*[(n, s, rm_dir) for n in LABELS for s in seeds])))
        list(pool.map(rm_scores_run, [LABELS[-1]] * 2, [1, 2], [rm_dir] * 2))  # the ensembles' other members
        bon = dict(zip([(n, s) for n in N_VALUES for s in seeds],
                       pool.map(best_of_n_run, *zip(*[(n, s) for n in N_VALUES for s in seeds]))))
        futures = {job: pool.submit(ppo_run, *job[:4], *job[4:], rm_dir=rm_dir) for job in jobs if job[2] in seeds}
        raft = dict(zip(seeds, pool.map(raft_run, seeds, [rates["raft"]] * len(seeds))))
        fresh = {job: future.result() for job, future in futures.items()}
    old = {name: read_rows(name) for name in ("rlhf_evals", "rlhf_steps", "iterated_rounds", "best_of_n")}

    def kept(name, job):
        return [r for r in old[name] if (r["run"], r["beta"], r["seed"], r["lr"]) == job[:4]]
    evals = [r for job in jobs for r in (fresh[job][0] if job in fresh else kept("rlhf_evals", job))]
    raft_rows = [r for s in SEEDS for r in (raft[s] if s in seeds else
                                            [r for r in old["rlhf_evals"] if r["run"] == "raft" and r["seed"] == s])]
    write_rows("rlhf_evals", EVAL_FIELDS, evals + raft_rows)
    write_rows("rlhf_steps", STEP_FIELDS, [r for job in jobs for r in (fresh[job][1] if job in fresh else kept("rlhf_steps", job))])
    iterated = [job for job in jobs if job[0] == "hack-iterated"]
    write_rows("iterated_rounds", ROUND_FIELDS, [r for job in iterated for r in
                                                 (fresh[job][2] if job in fresh else
                                                  [r for r in old["iterated_rounds"] if r["seed"] == job[2]])])
    write_rows("best_of_n", BON_FIELDS, [bon[n, s] if s in seeds else next(r for r in old["best_of_n"] if (r["n"], r["seed"]) == (n, s))
                                         for n in N_VALUES for s in SEEDS])
    with open(HERE / "rm_scores.csv") as f:
        table = list(csv.DictReader(f))
    names = [f"rm_{n}_{s}" for n in LABELS for s in SEEDS]
    write_rows("rm_scores", ["order", "gold"] + names,
               [{"order": row["order"], "gold": row["gold"],
                 **{name: scores[name][i] if name in scores else row[name] for name in names}} for i, row in enumerate(table)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=3, metavar=("RUN", "BETA", "SEED"), help="run one PPO job and print its eval rows")
    parser.add_argument("--runs", nargs="+", metavar="RUN", help="re-run every PPO job of these runs (not the ensembles) "
                        "and replace their rows in rlhf_evals.csv and rlhf_steps.csv (and iterated_rounds.csv)")
    parser.add_argument("--seeds", nargs="+", type=int, choices=SEEDS,
                        help="run every per-seed job of these seeds, the other seeds' rows kept (see `extend`)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.seeds:
        extend(args.seeds, args.workers)
        return
    if args.runs:
        rerun(args.runs, args.workers)
        return
    if args.only:
        run, beta, seed = args.only[0], float(args.only[1]), int(args.only[2])
        job = next(j for j in ppo_jobs(tuned_rates(read_rows("rlhf_tuning"))) if j[:3] == (run, beta, seed))
        if run.startswith("hack-ensemble"):
            sys.exit("the ensemble runs need the sweep's reward models (seeds 1 and 2 on all pairs): run the whole sweep")
        for row in ppo_run(*job)[0]:
            print(row)
        return
    rm_dir = tempfile.mkdtemp(prefix="rlhf_rms_")
    with ProcessPoolExecutor(args.workers) as pool:
        scores = list(pool.map(rm_scores_run, *zip(*[(n, s, rm_dir) for n in LABELS for s in SEEDS])))
        texts, _ = generate.order_distribution()
        gold = [minirl.world.rewards.order_utility(t) for t in texts]
        write_rows("rm_scores", ["order", "gold"] + [name for name, _ in scores],
                   [{"order": t, "gold": g, **{name: s[i] for name, s in scores}} for i, (t, g) in enumerate(zip(texts, gold))])
        tuning = list(pool.map(tuning_run, *zip(*tuning_jobs())))
        write_rows("rlhf_tuning", TUNING_FIELDS, [rounded(r) for r in tuning])
        rates = tuned_rates(tuning)
        print(f"tuned learning rates: {rates}", file=sys.stderr, flush=True)
        bon_rows = list(pool.map(best_of_n_run, *zip(*[(n, s) for n in N_VALUES for s in SEEDS])))
        write_rows("best_of_n", BON_FIELDS, bon_rows)
        jobs = ppo_jobs(rates)
        futures = [pool.submit(ppo_run, *job[:4], *job[4:], rm_dir=rm_dir) for job in jobs]
        raft = list(pool.map(raft_run, SEEDS, [rates["raft"]] * len(SEEDS)))
        results = [f.result() for f in futures]
    write_rows("rlhf_evals", EVAL_FIELDS, [r for evals, _, _ in results for r in evals] + [r for evals in raft for r in evals])
    write_rows("rlhf_steps", STEP_FIELDS, [r for _, steps, _ in results for r in steps])
    write_rows("iterated_rounds", ROUND_FIELDS, [r for _, _, rounds in results for r in rounds])


if __name__ == "__main__":
    main()
