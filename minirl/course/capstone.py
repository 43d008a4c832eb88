"""The capstone: the best arithmetic policy under a compute budget and a KL budget, scored on a
test set the instructor draws from a private seed. The student's page is docs/capstone.md.

    python -m minirl.course capstone testset --seed SECRET --out private_test.jsonl   # keep it private
    python -m minirl.course capstone evaluate SUBMISSIONS --test private_test.jsonl   # leaderboard.csv, .html
    python -m minirl.course capstone baseline    # data/checkpoints/capstone_baseline.pt and .json (about 1 minute)
    python -m minirl.course.site --leaderboard SUBMISSIONS/leaderboard.csv   # the board on the site

The test set: `prompts` sums drawn without replacement, from the instructor's seed, out of the pairs
the public training prompts are drawn from (operands 0-99; the pairs the world generator held out
of the corpus are not among them), with every public prompt, train and test, left out. The
distribution is the training split's; only the draw is secret.

A submission is a folder per student with `model.pt` (`save`, as minirl saves checkpoints) and
`card.json` (the compute spent: `samples`, completions sampled in training, and
`optimizer_steps`). The evaluator samples `SAMPLES_PER_PROMPT` completions of each test prompt
from the policy at temperature 1 (one fixed generator for everyone) and measures on them:

    pass@1  the share right; its standard error from the per-prompt shares (prompts are the units)
    KL      KL(policy || base) per completion: the sum of log pi - log pi_base over a completion's
            tokens, averaged over the completions (the policy's own samples); its standard error
            likewise from the per-prompt means

Verified: the checkpoint loads, has the base model's architecture and size (the same config, the
same parameter names and shapes), and its KL and pass@1. Declared, and only checked against the
budget: the card's samples and optimizer steps (a checkpoint cannot prove what made it).
Rows within both budgets are ranked by pass@1; the others are listed after them, unranked, each
with its reason. The course's baseline (plain GRPO, `baseline`) is always on the board.
"""
from __future__ import annotations

import argparse
import csv
import html
import json
import math
import platform
import random
import re
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..core import paths, validate
from ..core.kl import kl_k1
from ..core.ops import masked_sum
from ..lm.model import GPT, GPTConfig, load_model, save_checkpoint
from ..lm.sampling import completion_logprobs, sample
from ..train.grpo import GRPOConfig, train_grpo
from ..world import datasets, grammar, rewards, tasks
from ..world.generate import arithmetic_prompt

__all__ = ["KL_BUDGET", "SAMPLE_BUDGET", "STEP_BUDGET", "TEST_PROMPTS", "SAMPLES_PER_PROMPT", "EVAL_SEED", "BASELINE", "BASELINE_NAME",
           "BASELINE_CONFIG", "COLUMNS", "public_prompts", "candidate_pairs", "testset", "write_testset",
           "read_testset", "grpo_cost", "save", "load_submission", "card_problems", "read_card", "evaluate_policy",
           "submission_row", "measured_row", "rank", "leaderboard", "write_leaderboard", "read_leaderboard", "leaderboard_html",
           "train_baseline", "main"]

KL_BUDGET = 1.0            # nats per completion, KL(policy || base) on the test prompts
SAMPLE_BUDGET = 20_000     # completions sampled in training, over every run that led to the checkpoint
STEP_BUDGET = 500          # optimizer steps (gradient updates), likewise
TEST_PROMPTS = 1000        # the private test set's size
SAMPLES_PER_PROMPT = 4     # completions the evaluator samples per test prompt
EVAL_SEED = 0              # the evaluator's sampling generator: the same draws for every submission
BASELINE = "checkpoints/capstone_baseline.pt"
BASELINE_NAME = "course baseline (plain GRPO)"
BASELINE_CONFIG = GRPOConfig()  # the course's defaults (lesson 06): 120 steps of 16 prompts x 8 completions
PROMPT = re.compile(r"q: (\d+)\+(\d+)= a:")
COLUMNS = ["rank", "student", "status", "pass_at_1", "pass_at_1_se", "kl", "kl_se", "samples", "optimizer_steps",
           "method", "test_prompts", "baseline"]


# ---------------------------------------------------------------- the private test set
def public_prompts() -> set[str]:
    """Every arithmetic prompt of the world's public splits, train and test."""
    return {r["prompt"] for split in ("train", "test") for r in datasets.load_prompts("arithmetic", split)}


def candidate_pairs() -> list[tuple[int, int]]:
    """The operand pairs a private test prompt may use: those the training prompts are drawn from
    (every pair but the held-out test pairs in either order), less the training prompts' own."""
    public = public_prompts()
    held = {tuple(map(int, PROMPT.fullmatch(r["prompt"]).groups())) for r in datasets.load_prompts("arithmetic", "test")}
    held |= {pair[::-1] for pair in held}
    every = [(a, b) for a in range(grammar.MAX_OPERAND + 1) for b in range(grammar.MAX_OPERAND + 1)]
    return [p for p in every if p not in held and arithmetic_prompt(*p) not in public]


def testset(seed: int, prompts: int = TEST_PROMPTS) -> list[dict]:
    """`prompts` test records {'prompt', 'answer'} drawn without replacement from `candidate_pairs`
    by a random stream seeded with `seed`: the same seed gives the same set on every machine."""
    validate.integer("seed", seed, minimum=0)
    pairs = candidate_pairs()
    if validate.integer("prompts", prompts) > len(pairs):
        raise ValueError(f"a capstone test set holds at most {len(pairs)} prompts (the pairs no public prompt uses), "
                         f"got prompts={prompts}")
    drawn = random.Random(f"capstone:{seed}").sample(pairs, prompts)  # a str seed: hashed the same everywhere
    return [{"prompt": arithmetic_prompt(a, b), "answer": a + b} for a, b in drawn]


def write_testset(seed: int, out: Path, prompts: int = TEST_PROMPTS) -> list[dict]:
    """`testset(seed, prompts)` written to `out` as JSON lines; returns the records."""
    records = testset(seed, prompts)
    Path(out).write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def read_testset(path: Path) -> list[str]:
    """The prompts of a test set file, refused (ValueError) if a line is not an arithmetic prompt,
    is a public prompt, or is not from the capstone's pool (`candidate_pairs`)."""
    public, pool = public_prompts(), {arithmetic_prompt(*p) for p in candidate_pairs()}
    fix = "write the test set with `python -m minirl.course capstone testset`"
    prompts = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        try:
            prompt = json.loads(line)["prompt"]
        except (ValueError, TypeError, KeyError):
            prompt = None
        if not isinstance(prompt, str) or not PROMPT.fullmatch(prompt):
            raise ValueError(f"{path} line {i} is not a capstone test prompt ('q: a+b= a:'): {line[:80]!r}; {fix}")
        if prompt in public:
            raise ValueError(f"{path} line {i} holds a public prompt, {prompt!r}: students could have trained on it; {fix}")
        if prompt not in pool:
            raise ValueError(f"{path} line {i}, {prompt!r}, is not from the training prompts' distribution; {fix}")
        prompts.append(prompt)
    if not prompts:
        raise ValueError(f"{path} holds no prompts; {fix}")
    return prompts


# ---------------------------------------------------------------- submissions
def grpo_cost(config) -> dict[str, int]:
    """The compute of one `train_grpo` run with this GRPOConfig: completions sampled and optimizer steps."""
    return {"samples": config.steps * config.prompts_per_step * config.group_size,
            "optimizer_steps": config.steps * config.inner_steps}


def save(policy: GPT, folder: Path, samples: int, optimizer_steps: int, method: str) -> None:
    """A submission: `folder`/model.pt (the checkpoint, as minirl saves one) and card.json (the
    compute spent, summed over every run that led to the policy, and a line saying how)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(policy, folder / "model.pt")
    card = {"samples": validate.integer("samples", samples, minimum=0),
            "optimizer_steps": validate.integer("optimizer_steps", optimizer_steps, minimum=0), "method": str(method)}
    (folder / "card.json").write_text(json.dumps(card, indent=1) + "\n")


def load_submission(path: Path, base: GPT) -> GPT:
    """A checkpoint file as a GPT in eval mode, refused (ValueError) unless it loads and has the
    base model's architecture and size: the same config, parameter names and shapes."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated file, a pickle of something else, not a torch file at all
        raise ValueError(f"unreadable model.pt ({type(e).__name__}): save it with minirl.course.capstone.save") from None
    if not isinstance(payload, dict) or not {"config", "state_dict"} <= set(payload):
        raise ValueError("model.pt is not a minirl checkpoint (no config and state_dict): save it with "
                         "minirl.course.capstone.save")
    if payload["config"] != asdict(base.config):
        raise ValueError(f"not the base model's architecture: config {payload['config']} != {asdict(base.config)}")
    state, expected = payload["state_dict"], base.state_dict()
    shapes = {k: tuple(v.shape) for k, v in state.items()} if isinstance(state, dict) else None
    if shapes != {k: tuple(v.shape) for k, v in expected.items()}:
        raise ValueError("not the base model's size: its parameters differ in names or shapes from the base model's")
    model = GPT(GPTConfig(**payload["config"]))
    model.load_state_dict(state)
    return model.eval()


def card_problems(card) -> list[str]:
    """What is wrong with a card: unreadable fields, or compute over the budget; [] if nothing."""
    if not isinstance(card, dict):
        return ["card.json is not a JSON object"]
    problems = []
    for field, budget in (("samples", SAMPLE_BUDGET), ("optimizer_steps", STEP_BUDGET)):
        value = card.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"card.json has no count of {field} (a whole number >= 0)")
        elif value > budget:
            problems.append(f"over the compute budget ({field} {value:,} > {budget:,})")
    return problems


@torch.no_grad()
def evaluate_policy(policy: GPT, base: GPT, prompts: list[str], samples: int = SAMPLES_PER_PROMPT,
                    chunk: int = 256) -> dict[str, float]:
    """pass@1 and KL(policy || base) per completion on `samples` completions of each prompt
    (temperature 1, the generator seeded with EVAL_SEED), each with its standard error over prompts."""
    generator = torch.Generator().manual_seed(EVAL_SEED)
    right, kl = [], []
    for i in range(0, len(prompts), chunk):
        out = sample(policy, prompts[i:i + chunk], max_new_tokens=grammar.MAX_NEW_TOKENS["arithmetic"],
                     group_size=samples, generator=generator)
        right.append(torch.tensor(rewards.arithmetic_reward(out.prompts, out.texts)))
        kl.append(masked_sum(kl_k1(out.logprobs, completion_logprobs(base, out)), out.mask, dim=1))
    per_prompt = {name: torch.cat(v).double().view(-1, samples).mean(1) for name, v in (("pass_at_1", right), ("kl", kl))}
    n = len(prompts)
    return {**{name: v.mean().item() for name, v in per_prompt.items()},
            **{f"{name}_se": (v.std().item() / math.sqrt(n) if n > 1 else math.nan) for name, v in per_prompt.items()}}


def read_card(folder: Path) -> tuple[dict | None, list[str]]:
    """A submission's card.json and what is wrong with it (`card_problems`); None if it cannot be read."""
    path = folder / "card.json"
    if not path.is_file():
        return None, ["no card.json"]
    try:
        card = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        return None, ["unreadable card.json (not JSON)"]
    return (card if isinstance(card, dict) else None), card_problems(card)


def submission_row(folder: Path, base: GPT, prompts: list[str]) -> dict:
    """One student's row: the measured pass@1 and KL where the checkpoint loads and samples, the
    card's counts, and a status: 'within budget' or every reason the row is not ranked."""
    card, problems = read_card(folder)
    if not (folder / "model.pt").is_file():
        return {**_card_fields(folder.name, card, "no"), "status": "; ".join(problems + ["no model.pt"])}
    return measured_row(folder.name, folder / "model.pt", card, problems, base, prompts)


def _card_fields(student: str, card: dict | None, baseline: str) -> dict:
    return {"student": student, "baseline": baseline, "method": str((card or {}).get("method", "")),
            **{k: (card or {}).get(k, "") for k in ("samples", "optimizer_steps")}}


def measured_row(student: str, model_path: Path, card: dict | None, problems: list[str], base: GPT,
                 prompts: list[str], baseline: str = "no") -> dict:
    """A row with the checkpoint's measured pass@1 and KL (where it loads and samples) and its
    status: 'within budget', or every reason it is not ranked (the card's `problems`, the KL budget)."""
    row = _card_fields(student, card, baseline)
    try:
        row.update(evaluate_policy(load_submission(model_path, base), base, prompts))
    except (ValueError, RuntimeError, FloatingPointError) as e:  # refused, or diverged: non-finite logits
        problems = problems + [str(e).split("\n")[0]]
    else:
        if row["kl"] > KL_BUDGET:
            problems = [f"over the KL budget ({row['kl']:.2f} > {KL_BUDGET} nats)"] + problems
    return {**row, "status": "; ".join(problems) or "within budget"}


def rank(rows: list[dict]) -> list[dict]:
    """Rows within budget first, by pass@1 (then lower KL), numbered 1, 2, ...; then the rest,
    unranked: those measured by pass@1, then those that could not be."""
    def key(row):
        measured = "pass_at_1" in row
        return (row["status"] != "within budget", not measured, -row.get("pass_at_1", 0.0), row.get("kl", 0.0), row["student"])
    ordered = sorted(rows, key=key)
    for i, row in enumerate(ordered, 1):
        row["rank"] = i if row["status"] == "within budget" else ""
    return ordered


def leaderboard(folder: Path, testset_path: Path) -> list[dict]:
    """Every student folder under `folder` and the course's baseline, evaluated on the test set, ranked."""
    prompts = read_testset(testset_path)
    base = load_model("base")
    students = sorted(p for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith("."))
    rows = []
    for student in students:
        rows.append(submission_row(student, base, prompts))
        print(f"{student.name}: {rows[-1]['status']}", flush=True)
    card = json.loads(paths.verified_path(BASELINE.replace(".pt", ".json")).read_text())
    rows.append(measured_row(BASELINE_NAME, paths.verified_path(BASELINE), card, card_problems(card), base, prompts,
                             baseline="yes"))
    for row in rows:
        row["test_prompts"] = len(prompts)
    return rank(rows)


# ---------------------------------------------------------------- the board
def write_leaderboard(rows: list[dict], out: Path) -> None:
    """The board as CSV at `out` (numbers to 4 places) and as a page beside it (`out` with .html)."""
    with Path(out).open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({c: (f"{row[c]:.4f}" if isinstance(row.get(c), float) else row.get(c, "")) for c in COLUMNS})
    Path(out).with_suffix(".html").write_text(leaderboard_html(read_leaderboard(out)), encoding="utf-8")


def read_leaderboard(path: Path) -> list[dict]:
    """The rows of a leaderboard CSV, refused unless it has the board's columns."""
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path} is not a capstone leaderboard (columns {reader.fieldnames}, expected {COLUMNS}); "
                             "write one with `python -m minirl.course capstone evaluate`")
        return list(reader)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Capstone leaderboard</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ border-bottom: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
tr.baseline {{ background: #eef4fb; font-weight: bold; }}
tr.unranked {{ color: #777; }}
</style></head><body>
{nav}<h1>Capstone leaderboard</h1>
<p>The task: arithmetic of the tiny world (<code>q: a+b= a:</code>), scored on {prompts} private test prompts,
{samples} completions each at temperature 1. pass@1 is the share right; KL is KL(policy || base) per
completion on the same samples; &plusmn; one standard error over prompts.</p>
<p>Budgets: KL at most {kl} nats per completion (measured); at most {sample_budget:,} completions sampled and
{step_budget:,} optimizer steps in training (declared on the card). Rows within both are ranked by pass@1;
the others follow, unranked, with the reason. The course's baseline is marked.</p>
<table>
<thead><tr><th>rank</th><th>student</th><th>pass@1</th><th>KL (nats)</th><th>samples</th><th>optimizer steps</th><th>method</th><th>status</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""


def leaderboard_html(rows: list[dict], nav: str = "") -> str:
    """The board as a self-contained page (no script, no file beside it): the budgets stated, the
    rows in the CSV's order, the baseline marked. `nav`: HTML put above the title (the site's links)."""
    def cell(value, se=""):
        return f'<td class="num">{html.escape(value)}{" &plusmn; " + html.escape(se) if value and se else ""}</td>'

    lines = []
    for row in rows:
        kind = "baseline" if row["baseline"] == "yes" else ("ranked" if row["rank"] else "unranked")
        lines.append(f'<tr class="{kind}"><td>{html.escape(row["rank"])}</td><td>{html.escape(row["student"])}</td>'
                     f'{cell(row["pass_at_1"], row["pass_at_1_se"])}{cell(row["kl"], row["kl_se"])}'
                     f'{cell(row["samples"])}{cell(row["optimizer_steps"])}<td>{html.escape(row["method"])}</td>'
                     f'<td>{html.escape(row["status"])}</td></tr>')
    prompts = rows[0]["test_prompts"] if rows else "no"
    return PAGE.format(nav=nav, prompts=html.escape(prompts), samples=SAMPLES_PER_PROMPT, kl=KL_BUDGET,
                       sample_budget=SAMPLE_BUDGET, step_budget=STEP_BUDGET, rows="\n".join(lines))


# ---------------------------------------------------------------- the course's baseline
def train_baseline(seed: int = 0) -> dict:
    """Plain GRPO from the base model on the arithmetic task's training prompts (BASELINE_CONFIG),
    saved as the baseline checkpoint with its card, measured on the public test split."""
    config = GRPOConfig(**{**asdict(BASELINE_CONFIG), "seed": seed})
    policy = load_model("base")
    start = time.time()
    train_grpo(policy, tasks.arithmetic_task(), config)
    seconds = time.time() - start
    root = paths.data_dir()
    save_checkpoint(policy, root / BASELINE)
    public = evaluate_policy(policy.eval(), load_model("base"), tasks.arithmetic_task().test_prompts)
    card = {"command": f"python -m minirl.course.capstone baseline --seed {seed}", "seed": seed,
            "method": "plain GRPO from the base model on the 2,000 training prompts, the course's default settings",
            **grpo_cost(config), "settings": asdict(config), "train_seconds": round(seconds),
            "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads", "torch": torch.__version__,
            "metrics": {f"{k}_public_test": round(v, 4) for k, v in public.items()}}
    (root / BASELINE).with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    paths.write_manifest(root)
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minirl.course capstone",
                                     description="The capstone: a private test set, the evaluator and leaderboard, the baseline.")
    sub = parser.add_subparsers(dest="command", required=True)
    drawn = sub.add_parser("testset", help="draw the private test set from your secret seed")
    drawn.add_argument("--seed", type=int, required=True, help="a secret whole number; keep it and the file private")
    drawn.add_argument("--prompts", type=int, default=TEST_PROMPTS)
    drawn.add_argument("--out", type=Path, required=True)
    board = sub.add_parser("evaluate", help="evaluate every submission, write the leaderboard (CSV and HTML)")
    board.add_argument("folder", type=Path, help="one folder per student holding model.pt and card.json")
    board.add_argument("--test", type=Path, required=True, help="the private test set (capstone testset)")
    board.add_argument("--out", type=Path, help="CSV to write (default: leaderboard.csv in the folder; .html beside it)")
    baseline = sub.add_parser("baseline", help=f"train the course's baseline into data/{BASELINE}")
    baseline.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "testset":
        write_testset(args.seed, args.out, args.prompts)
        print(f"wrote {args.prompts} prompts to {args.out}: keep it and the seed private")
    elif args.command == "evaluate":
        out = args.out or args.folder / "leaderboard.csv"
        write_leaderboard(leaderboard(args.folder, args.test), out)
        print(f"wrote {out} and {out.with_suffix('.html')}")
    else:
        print(json.dumps(train_baseline(args.seed)["metrics"], indent=1))


if __name__ == "__main__":
    main()
