"""The process and outcome reward models of the steps task over training seeds, and a PRM on
Math-Shepherd's Monte Carlo labels against one on the world's. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/prm.py                  # 16 trainings, 7 labellings (time below)
    OMP_NUM_THREADS=1 python lessons/sweeps/prm.py --only exact 1   # one model's rows, printed
    python lessons/sweeps/prm.py --report                           # what lesson 14 reads

The shipped prm_steps and orm_steps (`python -m minirl.train.process_models`) are one training of
each. Here seed s draws the same training prompts' completions afresh (`process_models.completions`
with sampler seed `sampling_seed(s)`: 27,200 completions) and trains a model on them with seed s,
at `process_models.SETTINGS`, of one of three kinds:

    exact     the world's step labels, right from the start (what prm_steps learns)
    orm       each completion's final answer, the whole completion as one step (what orm_steps learns)
    mc_soft   Math-Shepherd's soft labels: the share of ROLLOUTS continuations of the steps model
              from each step that reach the right answer (`prm.monte_carlo_labels`)

exact and orm train on every reported seed (SEEDS), at the rates the shipped cards chose. mc_soft
trains at every rate of GRID on TUNING_SEED's completions (the shipped models' own) and is measured
as the cards measure theirs, on the validation candidates (`process_models.metrics`: best of 8 by
its best aggregation, and step AUC), so prm_tuning.csv sets it against the cards' rows, copied in,
at every rate. Its reported seeds are not run: at about 13 CPU-minutes a model they would add 80
minutes to the sweep's 2 hours on two cores.

Evaluation on the held-out prompts of 3 and of 4 numbers: N_CANDIDATES completions of each from the
steps model, drawn once per seed and shared by that seed's models, so comparisons between kinds
and aggregations are paired over seeds. prm.csv: for each model, aggregation ('outcome' for the
ORM) and size, the share of prompts whose pick among the first n candidates is right, n in NS; the
rows 'oracle' (any of the n right: pass@n) and 'first' (no model) frame them. prm_steps.csv: each
PRM's AUC at telling a step right from the start from a wrong one on the candidates' steps.
prm_labels.csv: every seed's Monte Carlo labels (TUNING_SEED's and SEEDS') against the world's, among
the steps right from the start and the wrong ones: the mean soft label and the share whose hard
label (any rollout right) is 1.

Each seed's labels and each model's rows are kept in CACHE (ignored by git) as they finish, so an
interrupted sweep resumes where it stopped; delete the folder to start over.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch

import minirl
from minirl.core import compare
from minirl.lm.process_head import completion_steps, process_model_card, step_probabilities
from minirl.lm.sampling import sample
from minirl.train import prm, process_models
from minirl.world import steps

HERE = Path(__file__).parent
CACHE = HERE.parents[1] / "runs" / "prm_sweep"
SEEDS, TUNING_SEED = (1, 2, 3, 4, 5, 6), 0  # six: five pairs cannot reach p <= 0.05 by sign flips
KINDS, REPORTED = ("exact", "mc_soft", "orm"), ("exact", "orm")
SHIPPED = {"exact": "prm_steps", "orm": "orm_steps"}  # the kinds a shipped card tuned
GRID = process_models.GRID
ROLLOUTS, N_CANDIDATES, NS = 8, 16, (1, 2, 4, 8, 16)
FIELDS = {"prm": ["kind", "aggregation", "seed", "lr", "terms", "n", "correct"],
          "prm_tuning": ["kind", "seed", "lr", "val_pick", "step_auc"],
          "prm_steps": ["kind", "seed", "lr", "terms", "auc"],
          "prm_labels": ["seed", "terms", "truth", "steps", "mean_soft", "hard_one"]}


def sampling_seed(seed: int) -> int:
    """The sampler seed of a training seed's completions: the shipped models' at TUNING_SEED."""
    return process_models.SAMPLING_SEED + 1_000 * (seed - TUNING_SEED)


def cached(name: str, compute):
    """compute()'s JSON-able result, kept in CACHE under `name`: computed once, read back after."""
    path = CACHE / f"{name}.json"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(compute()))
        path.with_suffix(".tmp").rename(path)  # whole or absent, even if the sweep is stopped mid-write
    return json.loads(path.read_text())


def labelled(seed: int) -> tuple[dict[str, list[dict]], list[dict]]:
    """A seed's training records of every kind, and its label rows (Monte Carlo labels against the
    world's), kept in CACHE."""
    return tuple(cached(f"labels_{seed}", lambda: label(seed)))


def label(seed: int) -> tuple[dict[str, list[dict]], list[dict]]:
    torch.set_num_threads(1)
    prompts, texts = map(list, process_models.completions("train", sampling_seed(seed)))
    soft, _ = prm.monte_carlo_labels(minirl.load_model("steps"), prompts, texts, ROLLOUTS,
                                     torch.Generator().manual_seed(2_000 + seed))
    records = {kind: process_models.records(name, sampling_seed(seed)) for kind, name in SHIPPED.items()}
    records["mc_soft"] = [{"prompt": p, "steps": completion_steps(c), "labels": y}
                          for p, c, y in zip(prompts, texts, soft) if y]
    truth = [steps.label_steps(p, c) for p, c in zip(prompts, texts)]
    rows = []
    for terms in steps.TERMS:
        for right in (True, False):
            got = [s for p, xs, ss in zip(prompts, truth, soft) if len(steps.operands(p)) == terms
                   for x, s in zip(xs, ss) if x == right]
            rows.append({"seed": seed, "terms": terms, "truth": int(right), "steps": len(got),
                         "mean_soft": round(sum(got) / len(got), 4), "hard_one": round(sum(s > 0 for s in got) / len(got), 4)})
    return records, rows


def candidates(seed: int) -> dict[int, tuple[list[str], list[str]]]:
    """N_CANDIDATES completions of every held-out prompt, by size, grouped by prompt."""
    policy, out = minirl.load_model("steps"), {}
    for terms in steps.TERMS:
        drawn = sample(policy, steps.steps_task(terms).test_prompts, max_new_tokens=steps.MAX_NEW_TOKENS[terms],
                       group_size=N_CANDIDATES, generator=torch.Generator().manual_seed(50_000 + 10 * seed + terms))
        out[terms] = (drawn.prompts, drawn.texts)
    return out


def pick_rate(prompts: list[str], texts: list[str], score: list[float], n: int) -> float:
    """The share of prompts whose highest-scored candidate among their first n is right (the first on ties)."""
    firsts = [j for i in range(0, len(texts), N_CANDIDATES) for j in range(i, i + n)]
    return process_models.pick_rate([prompts[j] for j in firsts], [texts[j] for j in firsts],
                                    [score[j] for j in firsts], n)


def step_auc(model, prompts: list[str], texts: list[str]) -> float:
    probs = step_probabilities(model, prompts, [completion_steps(c) for c in texts])
    pairs = [(x, y) for xs, ys in zip(probs, (steps.label_steps(p, c) for p, c in zip(prompts, texts)))
             for x, y in zip(xs, ys)]
    return process_models.auc([x for x, y in pairs if y], [x for x, y in pairs if not y])


def run(kind: str, seed: int, lr: float, records: list[dict]) -> dict[str, list[dict]]:
    """One model trained on its seed's records at rate lr: its tuning row on TUNING_SEED, else its test
    rows; kept in CACHE."""
    return cached(f"{kind}_{seed}_{lr:g}", lambda: train_and_measure(kind, seed, lr, records))


def train_and_measure(kind: str, seed: int, lr: float, records: list[dict]) -> dict[str, list[dict]]:
    torch.set_num_threads(1)
    model, _ = prm.train_prm(records, replace(process_models.SETTINGS, lr=lr, seed=seed))
    name = SHIPPED.get(kind, "prm_steps")  # how process_models scores it: a PRM's steps or the ORM's whole
    if seed == TUNING_SEED:
        row = process_models.metrics(model, name)
        return {"prm_tuning": [{"kind": kind, "seed": seed, "lr": lr, "val_pick": process_models.best_pick(row),
                                "step_auc": row["step_auc"]}]}
    rows = {"prm": [], "prm_steps": []}
    for terms, (p, t) in candidates(seed).items():
        for how, s in process_models.scores(model, name, p, t).items():
            rows["prm"] += [{"kind": kind, "aggregation": how, "seed": seed, "lr": lr, "terms": terms, "n": n,
                             "correct": round(pick_rate(p, t, s, n), 4)} for n in NS]
        if kind != "orm":
            rows["prm_steps"].append({"kind": kind, "seed": seed, "lr": lr, "terms": terms,
                                      "auc": round(step_auc(model, p, t), 4)})
    return rows


def frame_rows(seed: int) -> list[dict]:
    """'oracle' (pass@n) and 'first' rows of a seed's candidates."""
    torch.set_num_threads(1)
    out = []
    for terms, (p, t) in candidates(seed).items():
        right = [float(steps.final_correct(q, c)) for q, c in zip(p, t)]
        groups = [right[i:i + N_CANDIDATES] for i in range(0, len(right), N_CANDIDATES)]
        for n in NS:
            for kind, value in (("oracle", sum(max(g[:n]) for g in groups)), ("first", sum(g[0] for g in groups))):
                out.append({"kind": kind, "aggregation": "", "seed": seed, "lr": "", "terms": terms, "n": n,
                            "correct": round(value / len(groups), 4)})
    return out


def shipped_tuning() -> list[dict]:
    """The shipped cards' rows: exact's and orm's tuning, on TUNING_SEED's completions."""
    return [{"kind": kind, "seed": TUNING_SEED, "lr": row["lr"], "val_pick": process_models.best_pick(row),
             "step_auc": row.get("step_auc", "")}
            for kind, name in SHIPPED.items() for row in process_model_card(name)["tuning"]]


def tuned_rates(rows: list[dict], kinds: tuple[str, ...] = KINDS) -> dict[str, float]:
    return {kind: compare.sweep_rate([r for r in rows if r["kind"] == kind], GRID, "val_pick", SEEDS) for kind in kinds}


def read_rows(name: str) -> list[dict]:
    with open(HERE / f"{name}.csv") as f:
        return [{k: v if k in ("kind", "aggregation") or v == "" else float(v)
                 if k in ("lr", "correct", "auc", "val_pick", "step_auc", "mean_soft", "hard_one") else int(v)
                 for k, v in row.items()} for row in csv.DictReader(f)]


def write_rows(name: str, rows: list[dict]) -> None:
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS[name])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {name}.csv ({len(rows)} rows)", file=sys.stderr)


AGGREGATION = {"exact": "min", "orm": "outcome", "first": "", "oracle": ""}  # min: the shipped PRM's choice
NAMES = {"exact": "PRM (min)", "orm": "ORM", "first": "first sample", "oracle": "any right (pass@n)"}
PAIRED_N = 8  # the lesson's best of 8: the one comparison made; the other n are shown, not tested


def best_of_n(rows: list[dict], kind: str, n: int) -> list[float]:
    """One value per reported seed: the share of the held-out prompts of both sizes (the same number of
    each) whose pick among the first n is right, a PRM's by its weakest step."""
    return [sum(r["correct"] for r in rows if (r["kind"], r["aggregation"], r["seed"], r["n"]) == (kind, AGGREGATION[kind], s, n))
            / len(steps.TERMS) for s in SEEDS]


def comparison(rows: list[dict]) -> compare.Comparison:
    """The PRM against the ORM at best of PAIRED_N, paired over the seeds (each seed's two models share its
    candidates), shown with each seed's difference."""
    c = compare.paired(best_of_n(rows, "exact", PAIRED_N), best_of_n(rows, "orm", PAIRED_N), ("PRM", "ORM"))
    compare.table([c], f"held-out prompts (600), pick right among {PAIRED_N}, paired over {len(SEEDS)} training seeds")
    return c


def best_of_n_table(rows: list[dict]) -> None:
    """The mean over the seeds at every n, and the PRM's lead over the ORM, lowest and highest over the seeds."""
    print(f"held-out, mean of {len(SEEDS)} seeds, n:" + "".join(f"{n:>12d}" for n in NS))
    for kind in AGGREGATION:
        print(f"  {NAMES[kind]:28s}" + "".join(f"{sum(best_of_n(rows, kind, n)) / len(SEEDS):12.3f}" for n in NS))
    leads = [[a - b for a, b in zip(best_of_n(rows, "exact", n), best_of_n(rows, "orm", n))] for n in NS]
    print(f"  {'PRM - ORM, lowest':28s}" + "".join(f"{min(d):+12.3f}" for d in leads))
    print(f"  {'PRM - ORM, highest':28s}" + "".join(f"{max(d):+12.3f}" for d in leads))
    for kind in ("exact", "orm"):
        fewer = [a - b for a, b in zip(best_of_n(rows, kind, NS[-1]), best_of_n(rows, kind, NS[-2]))]
        print(f"{NAMES[kind]}, best of {NS[-1]} - best of {NS[-2]}, lowest-highest: {min(fewer):+.3f} to {max(fewer):+.3f}")


def plot_best_of_n(rows: list[dict]) -> None:
    """Best of n against n, a line per seed."""
    import matplotlib.pyplot as plt

    colors = {"oracle": "0.6", "exact": "C3", "orm": "C0", "first": "0.3"}
    for kind, color in colors.items():
        for i, _ in enumerate(SEEDS):
            plt.plot(NS, [best_of_n(rows, kind, n)[i] for n in NS], color=color, alpha=0.6, marker=".",
                     ls="--" if kind in ("oracle", "first") else "-", label=NAMES[kind] if i == 0 else None)
    plt.xscale("log")
    plt.xticks(NS, NS)
    plt.xlabel("n candidates")
    plt.ylabel("pick right (600 held-out prompts)")
    plt.title(f"{len(SEEDS)} training seeds, a line each", fontsize=10)
    plt.legend(fontsize=8)
    plt.show()


def plot_tuning(tuning: list[dict]) -> None:
    """On the tuning seed, each kind's validation pick and each PRM's step AUC against the rate."""
    import matplotlib.pyplot as plt

    for kind, color in (("exact", "C3"), ("mc_soft", "C2"), ("orm", "C0")):
        for key, ls in (("val_pick", "--"), ("step_auc", "-")):
            at = sorted((r["lr"], r[key]) for r in tuning if r["kind"] == kind and r[key] != "")
            if at:
                plt.plot(*zip(*at), color=color, ls=ls, marker="o", label=f"{kind}: {key}")
    plt.xscale("log")
    plt.xlabel("learning rate")
    plt.title(f"tuning seed {TUNING_SEED}, validation prompts", fontsize=10)
    plt.legend(fontsize=8, loc="center left", bbox_to_anchor=(1, 0.5))
    plt.show()


def labels_table(label_rows: list[dict]) -> None:
    """Monte Carlo labels against the world's, lowest-highest over the seeds' completions."""
    seeds = sorted({r["seed"] for r in label_rows})
    print(f"{ROLLOUTS} rollouts a step, {len(seeds)} seeds, lowest-highest    mean soft label  hard label 1")
    for terms in steps.TERMS:
        for truth, name in ((1, "right"), (0, "wrong")):
            at = [r for r in label_rows if (r["terms"], r["truth"]) == (terms, truth)]
            print(f"  {terms} numbers, steps {name} from the start {'':8s}" + "".join(
                f"{min(r[k] for r in at):>12.2f}-{max(r[k] for r in at):.2f}" for k in ("mean_soft", "hard_one")))


def tuning_table(tuning: list[dict]) -> None:
    """Each kind's validation pick (best of 8, by its best aggregation) and step AUC at each rate, on TUNING_SEED."""
    print(f"tuning seed {TUNING_SEED}, validation{'':8s}" + "".join(f"{lr:>8g}" for lr in GRID))
    for kind in KINDS:
        for key in ("val_pick", "step_auc"):
            at = {r["lr"]: r[key] for r in tuning if r["kind"] == kind}
            if any(at[lr] != "" for lr in GRID):
                print(f"  {kind + ': ' + key:32s}" + "".join(f"{at[lr]:8.3f}" for lr in GRID))


def report() -> None:
    """Everything the lesson reads, and the exact PRM's step AUC over the seeds."""
    rows, tuning = read_rows("prm"), read_rows("prm_tuning")
    tuning_table(tuning)
    labels_table(read_rows("prm_labels"))
    best_of_n_table(rows)
    aucs = [sum(r["auc"] for r in read_rows("prm_steps") if r["seed"] == s) / len(steps.TERMS) for s in SEEDS]
    print(f"exact PRM's step AUC on the held-out candidates, {len(SEEDS)} seeds: {min(aucs):.3f}-{max(aucs):.3f}")
    comparison(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=2, metavar=("KIND", "SEED"),
                        help="train one model, at the rate prm_tuning.csv chose, and print its rows")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="print what the lesson reads from the CSVs")
    args = parser.parse_args()
    if args.report:
        return report()
    if args.only:
        kind, seed = args.only[0], int(args.only[1])
        for name, rows in run(kind, seed, tuned_rates(read_rows("prm_tuning"))[kind], labelled(seed)[0][kind]).items():
            for row in rows:
                print(name, row)
        return
    start = time.perf_counter()
    seeds = (TUNING_SEED, *SEEDS)
    with ProcessPoolExecutor(args.workers) as pool:
        data = dict(zip(seeds, pool.map(labelled, seeds)))
        print(f"labelled: {time.perf_counter() - start:.0f} s", file=sys.stderr)
        known = tuned_rates(shipped_tuning(), REPORTED)
        todo = [("mc_soft", TUNING_SEED, lr) for lr in GRID] + [(k, s, known[k]) for s in SEEDS for k in REPORTED]
        done = list(pool.map(run, *zip(*todo), [data[s][0][k] for k, s, _ in todo]))
        frames = [r for rows in pool.map(frame_rows, SEEDS) for r in rows]
    write_rows("prm_tuning", shipped_tuning() + [r for rows in done for r in rows.get("prm_tuning", [])])
    write_rows("prm", frames + [r for rows in done for r in rows.get("prm", [])])
    write_rows("prm_steps", [r for rows in done for r in rows.get("prm_steps", [])])
    write_rows("prm_labels", [r for s in seeds for r in data[s][1]])
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
