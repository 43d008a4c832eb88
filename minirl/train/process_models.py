"""Train, measure and save the shipped process and outcome reward models
(`minirl.lm.process_head.PROCESS_MODELS`), both on the same completions.

    python -m minirl.train.process_models              # both: about 90 minutes at 1 thread
    python -m minirl.train.process_models prm_steps    # one of them

The data: the first TRAIN_PROMPTS training prompts of 3 numbers and as many of 4
(`steps.step_problems`, train split), PER_PROMPT completions of each sampled from the steps model at
temperature 1 (27,200 completions). `prm_steps` learns each step's label from the world (right from
the start); `orm_steps` learns each completion's final answer, the whole completion as one step.
Both take SETTINGS (`train_prm`) from a copy of the steps model, each at every rate of GRID; the
one kept is the rate whose best-of-8 pick is right most often on VAL_PROMPTS other training prompts
of each size, PER_PROMPT candidates each (a PRM by its best aggregation). The card holds, for every
rate, on those prompts: the AUC at telling a right step from a wrong one (a PRM) or a right
completion from a wrong one (both), and the share of prompts whose best-of-8 pick is right by each
aggregation. The lesson compares the two on the held-out prompts, which none of this has seen.

Each lands in data/checkpoints/<name>.pt with its card <name>.json, and data/MANIFEST.json is
rewritten. A rebuild reproduces the metrics closely, not the bytes. The shipped cards come from one
training of each model at each rate on 2026-12-07, at one thread, two trainings at a time on a
2-core AMD EPYC (about 10 minutes each); their `train_seconds` are those runs'.
"""
from __future__ import annotations

import functools
import json
import platform
import time
from dataclasses import asdict, replace

import torch
from scipy import stats

from ..core import paths, validate
from ..lm.model import load_model
from ..lm.process_head import (PROCESS_MODELS, checkpoint_path, completion_steps, save_process_model,
                               step_probabilities)
from ..lm.sampling import sample
from ..world import steps
from .prm import AGGREGATIONS, PRMConfig, completion_score, train_prm

__all__ = ["TRAIN_PROMPTS", "VAL_PROMPTS", "PER_PROMPT", "SETTINGS", "GRID", "auc", "completions", "records", "scores",
           "pick_rate", "metrics", "train_at", "best_pick", "build", "save", "main"]

TRAIN_PROMPTS, VAL_PROMPTS, PER_PROMPT = 1700, 300, 8
SETTINGS = PRMConfig(steps=3000, batch_size=64, seed=0)  # the rate: GRID's best on the validation prompts
GRID = (3e-5, 1e-4, 3e-4, 1e-3)
TRAINING = ("train_seconds", "final_loss_mean_last_100")  # a row's keys that are not validation metrics
SAMPLING_SEED = 1_000


def auc(right: list[float], wrong: list[float]) -> float:
    """P(a right item's score > a wrong one's), ties counting 1/2: the Mann-Whitney U over the pairs."""
    return float(stats.mannwhitneyu(right, wrong).statistic) / (len(right) * len(wrong))


@functools.cache
def completions(split: str, seed: int = SAMPLING_SEED) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(prompts, completions): PER_PROMPT samples of the steps model for each prompt of `split`
    ('train': the first TRAIN_PROMPTS of each size; 'val': the next VAL_PROMPTS), grouped by prompt;
    `seed` seeds the sampler (another seed: another draw of the same prompts' completions)."""
    validate.choice("split", split, ("train", "val"))
    policy, prompts, texts = load_model("steps"), [], []
    for terms in steps.TERMS:
        rows = steps.step_problems(terms, "train")
        chosen = rows[:TRAIN_PROMPTS] if split == "train" else rows[TRAIN_PROMPTS:TRAIN_PROMPTS + VAL_PROMPTS]
        generator = torch.Generator().manual_seed(seed + terms + 100 * (split == "val"))
        out = sample(policy, [r["prompt"] for r in chosen], max_new_tokens=steps.MAX_NEW_TOKENS[terms],
                     group_size=PER_PROMPT, generator=generator)
        prompts += out.prompts
        texts += out.texts
    return tuple(prompts), tuple(texts)


def records(name: str, seed: int = SAMPLING_SEED) -> list[dict]:
    """The training records of one shipped model: every step labelled (PRM) or the whole completion
    (ORM); `seed`: the completions' (`completions`)."""
    prompts, texts = completions("train", seed)
    if name == "orm_steps":
        return [{"prompt": p, "steps": [c], "labels": [float(steps.final_correct(p, c))]} for p, c in zip(prompts, texts)]
    labelled = [{"prompt": p, "steps": completion_steps(c), "labels": [float(x) for x in steps.label_steps(p, c)]}
                for p, c in zip(prompts, texts)]
    return [r for r in labelled if r["labels"]]


def scores(model, name: str, prompts: list[str], texts: list[str]) -> dict[str, list[float]]:
    """Each completion's score by every aggregation of a PRM, or by the ORM's one probability ('outcome')."""
    if name == "orm_steps":
        return {"outcome": [p[0] for p in step_probabilities(model, prompts, [[c] for c in texts])]}
    probs = step_probabilities(model, prompts, [completion_steps(c) for c in texts])
    return {how: [completion_score(p, how) for p in probs] for how in AGGREGATIONS}


def pick_rate(prompts: list[str], texts: list[str], score: list[float], group: int) -> float:
    """The share of prompts whose highest-scored completion of its group is right (the first on ties)."""
    right = 0
    for i in range(0, len(texts), group):
        best = max(range(i, i + group), key=lambda j: (score[j], -j))
        right += steps.final_correct(prompts[best], texts[best])
    return right / (len(texts) // group)


def metrics(model, name: str) -> dict:
    prompts, texts = map(list, completions("val"))
    right = [steps.final_correct(p, c) for p, c in zip(prompts, texts)]
    out = {"val_prompts": len(prompts) // PER_PROMPT, "candidates": PER_PROMPT,
           "first": round(pick_rate(prompts, texts, [0.0] * len(texts), PER_PROMPT), 4),
           "oracle": round(sum(any(right[i:i + PER_PROMPT]) for i in range(0, len(right), PER_PROMPT))
                           / (len(right) // PER_PROMPT), 4)}
    for how, s in scores(model, name, prompts, texts).items():
        out[f"pick_{how}"] = round(pick_rate(prompts, texts, s, PER_PROMPT), 4)
        out[f"completion_auc_{how}"] = round(auc([x for x, y in zip(s, right) if y], [x for x, y in zip(s, right) if not y]), 4)
    if name == "prm_steps":
        probs = step_probabilities(model, prompts, [completion_steps(c) for c in texts])
        pairs = [(x, y) for xs, ys in zip(probs, (steps.label_steps(p, c) for p, c in zip(prompts, texts)))
                 for x, y in zip(xs, ys)]
        out["step_auc"] = round(auc([x for x, y in pairs if y], [x for x, y in pairs if not y]), 4)
    return out


def train_at(name: str, lr: float):
    """One model trained at rate lr; returns it and its row: lr, seconds, final loss, validation metrics."""
    start = time.time()
    model, history = train_prm(records(name), replace(SETTINGS, lr=lr))
    row = {"lr": lr, "train_seconds": round(time.time() - start),
           "final_loss_mean_last_100": round(sum(h["loss"] for h in history[-100:]) / len(history[-100:]), 4)}
    return model, {**row, **metrics(model, name)}


def best_pick(row: dict) -> float:
    """A row's best-of-8 pick rate on the validation prompts (a PRM's best aggregation)."""
    return max(v for k, v in row.items() if k.startswith("pick_"))


def build(name: str) -> dict:
    """Train one shipped model at each rate of GRID, keep the one whose validation pick is right most
    often (the smaller rate on a tie), save it with its card; returns the card."""
    validate.choice("process model", name, sorted(PROCESS_MODELS))
    best, rows = None, []
    for lr in GRID:
        model, row = train_at(name, lr)
        rows.append(row)
        if best is None or best_pick(row) > best_pick(best[1]):
            best = model, row
    return save(name, *best, rows)


def save(name: str, model, chosen: dict, rows: list[dict]) -> dict:
    """Write the chosen model and its card (every rate's row under 'tuning')."""
    out = paths.data_dir() / checkpoint_path(name)
    save_process_model(model, out)
    card = {"command": f"python -m minirl.train.process_models {name}", "what": PROCESS_MODELS[name],
            "train_prompts": 2 * TRAIN_PROMPTS, "completions": len(completions("train")[1]),
            "records": len(records(name)), "settings": asdict(replace(SETTINGS, lr=chosen["lr"])),
            **{k: chosen[k] for k in TRAINING}, "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
            "torch": torch.__version__, "metrics": {k: v for k, v in chosen.items() if k not in ("lr", *TRAINING)},
            "tuning": rows}
    out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def main() -> None:
    paths.build_named("python -m minirl.train.process_models", __doc__.split("\n\n")[0], "process model",
                      list(PROCESS_MODELS), build)


if __name__ == "__main__":
    main()
