"""Lesson 08's sweeps, too long for the lesson's two minutes: reward models trained on 50 to all
2,250 preference pairs, with and without the imitation loss, and regressed on the same numbers of
absolute scores. Recorded command:

    OMP_NUM_THREADS=1 python lessons/sweeps/reward_models.py                 # 84 runs: about 40 min on 2 cores
    OMP_NUM_THREADS=1 python lessons/sweeps/reward_models.py --only pairs 250 0 1   # one row, printed

Every run is trained the same way (`minirl.train.reward_model.RMConfig()`: 300 steps of 32 items,
AdamW at 3e-4, one fixed rate for every run, from the base model's trunk), so a row differs from
another only in its data. Six seeds, 0-5 (the 42 runs of seeds 3-5 took about 53 min on 2 cores
shared with other work). A seed draws the subset and the batch order: the runs with and without the
imitation loss at one seed and size share both (the lesson compares them paired); pairs against
scores, and 1,000 against 2,250 pairs, share no data at one seed (compared unpaired).

- kind 'pairs': `labels` preference pairs from the world's Bradley-Terry annotator
  (data/world/order_prefs.jsonl, train split), drawn by the seed; Bradley-Terry loss, plus the
  imitation loss on the chosen completions with weight `imitation` (0: off);
- kind 'scores': `labels` single orders with an absolute score each (data/world/order_scores.jsonl,
  train split), drawn by the seed; squared error. The noise model of those scores was fixed in
  `minirl.world` before any run (annotator k reports offset_k + scale_k * u + noise, offset_k ~
  N(0, 1), scale_k ~ LogNormal(0, 0.5), noise ~ N(0, 1)). Budget: one label is one judgment, a
  comparison of two orders or a score of one.

Each row is judged against the truth: the expected accuracy under the world's Bradley-Terry labels
over the whole pair distribution (exact, `minirl.train.reward_model.order_report`), its calibration
error, its correlation with the gold utility over the valid orders, the accuracy on the 750
held-out pairs, and the scores of 200 invalid orders (`off_support_orders`): their mean in units
of the valid orders' spread (z), and the share scored above the best valid order.
"""
from __future__ import annotations

import argparse
import csv
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from minirl.lm import reward_head
from minirl.train import reward_model as rmod
from minirl.world import datasets

HERE = Path(__file__).parent
LABELS, SEEDS, IMITATION, IMITATION_LABELS = (50, 100, 250, 500, 1000, 2250), (0, 1, 2, 3, 4, 5), 1.0, (250, 2250)
FIELDS = ["kind", "labels", "imitation", "seed", "expected_accuracy", "ceiling", "ece", "correlation",
          "heldout_accuracy", "off_support_z", "off_support_above_best"]


def off_support(rm) -> dict[str, float]:
    """Invalid orders' scores against the valid ones: mean z and share above the best valid order."""
    table = rmod.valid_order_table(rm)
    s, p = table["score"], table["probs"]
    mean = (p * s).sum()
    sd = (p * (s - mean) ** 2).sum().sqrt()
    probe = reward_head.score_texts(rm, rmod.off_support_orders())
    return {"off_support_z": ((probe - mean) / sd).mean().item(), "off_support_above_best": (probe > s.max()).double().mean().item()}


def run(kind: str, labels: int, seed: int, imitation: float) -> dict:
    torch.set_num_threads(1)
    config = rmod.RMConfig(seed=seed, imitation_coef=imitation)
    if kind == "pairs":
        rm, _ = rmod.train_reward_model(rmod.subset(datasets.load_preferences("train"), labels, seed), config)
    else:
        rm, _ = rmod.train_on_scores(rmod.subset(datasets.load_order_scores("train"), labels, seed), config)
    row = {"kind": kind, "labels": labels, "imitation": imitation, "seed": seed,
           **{k: v for k, v in rmod.order_report(rm).items()},
           "heldout_accuracy": rmod.pair_metrics(rm, datasets.load_preferences("test"))["accuracy"], **off_support(rm)}
    return {k: round(v, 4) if isinstance(v, float) and k != "imitation" else v for k, v in row.items()}


def jobs() -> list[tuple]:
    return ([("pairs", n, s, 0.0) for n in LABELS for s in SEEDS]
            + [("pairs", n, s, IMITATION) for n in IMITATION_LABELS for s in SEEDS]
            + [("scores", n, s, 0.0) for n in LABELS for s in SEEDS])


def read_rows() -> list[dict]:
    with open(HERE / "reward_models.csv") as f:
        return [{k: (v if k == "kind" else int(v) if k in ("labels", "seed") else float(v)) for k, v in row.items()}
                for row in csv.DictReader(f)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs=4, metavar=("KIND", "LABELS", "SEED", "IMITATION"), help="run one point and print its row")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.only:
        kind, n, seed, imitation = args.only
        print(run(kind, int(n), int(seed), float(imitation)))
        return
    todo = jobs()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(run, *zip(*todo)))
    with open(HERE / "reward_models.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote reward_models.csv ({len(rows)} rows)", file=sys.stderr)


if __name__ == "__main__":
    main()
