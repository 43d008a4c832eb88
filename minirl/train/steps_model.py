"""Train, measure and save the shipped steps model: the base model fine-tuned to write sums of three
or four numbers step by step (`minirl.world.steps`), the start of the process-reward material.

    python -m minirl.train.steps_model    # data/checkpoints/steps.pt and steps.json (about 13 minutes at 1 thread)

The base model cannot write the format: asked 'q: 12+34+5= a:' it writes one number and stops. It
can add two numbers, about half the time. So each demonstration (`step_demos`) is built from the
base model's own additions: on a training prompt, step k is the base model's sample for
'q: prev+x= a:' asked alone, where prev is the value the demonstration wrote before and x the next
number. A slip is carried forward, as a model that writes its steps carries it: the later steps
are then right locally and wrong from the start, the two labels a process reward model learns
from. Each training prompt gets CHAINS demonstrations, drawn anew. One deviation: a sample that is
not one number after a space (about 1 in 400) is drawn again, so every demonstration is in the
format. The base model itself is never retrained (other lessons use it).

SFT on them teaches the format (well formed on 99% of the test prompts of 3 and of 4 numbers)
and gets the final answer about as often as the base model asked each step alone (27% and 15%,
against 30% and 16%). It does not keep all of the base model's skill at a step: asked in the long
prompt, it adds right 40% and 36% of the time (locally), where the base model asked each step
alone does 51% and 45%. Other runs did worse (1 or 4 demonstrations a prompt, or batches of 32;
learning rates 5e-4 and 1e-3; 2,000 to 4,000 steps: 24% to 38%). RL has the final answer, and
each step, left to improve.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict

import torch

from ..core import paths
from ..lm.model import CHECKPOINTS, GPT, load_model, save_checkpoint
from ..lm.sampling import sample
from ..lm.sequences import demo_tokens
from ..lm.tokenizer import PAD, load_tokenizer
from ..world import grammar, steps
from .sft import SFTConfig, fit

__all__ = ["CONFIG", "CHAINS", "REDRAWS", "one_number", "add_alone", "chain_steps", "step_demos", "rates", "steps_report",
           "measured", "build", "main"]

CONFIG = SFTConfig(steps=3000, batch_size=64, lr=5e-4)  # the shipped model's settings
CHAINS = 16  # demonstrations per training prompt, each drawn anew
REDRAWS = 20  # a step's sample is drawn at most this many times until it is one number


def one_number(text: str) -> int | None:
    """The number a plain sum's answer writes (' 46' -> 46), or None if it is not one number after a space."""
    values = steps.step_values(text)
    return values[0] if len(values) == 1 and values[0] is not None and text == f" {values[0]}" else None


@torch.no_grad()
def add_alone(model: GPT, pairs: list[tuple[int, int]], generator: torch.Generator) -> list[int]:
    """One sample of `model` (temperature 1) for each 'q: a+b= a:', drawn again where it is not one number."""
    values: list[int | None] = [None] * len(pairs)
    for _ in range(REDRAWS):
        todo = [i for i, v in enumerate(values) if v is None]
        if not todo:
            return values
        prompts = [steps.step_prompt(pairs[i]) for i in todo]
        texts = sample(model, prompts, max_new_tokens=grammar.MAX_NEW_TOKENS["arithmetic"], generator=generator).texts
        for i, text in zip(todo, texts):
            values[i] = one_number(text)
    raise RuntimeError(f"the model wrote no single number for {sum(v is None for v in values)} plain sums in "
                       f"{REDRAWS} draws: is it the course's base model? Rebuild it with `python -m minirl.train.pretrain`.")


def chain_steps(model: GPT, problems: list[dict], generator: torch.Generator) -> list[str]:
    """For each problem of `steps.step_problems`, a completion written one step at a time by `model`
    asked each step alone as a plain sum 'q: prev+x= a:', prev being the value written before
    (the first number at the first step): ' 46 51' for 12+34+5 when both sums come out right."""
    written: list[list[int]] = [[] for _ in problems]
    for k in range(max(len(p["partial_sums"]) for p in problems)):
        rows = [i for i, p in enumerate(problems) if k < len(p["partial_sums"])]
        pairs = [((written[i] or [problems[i]["operands"][0]])[-1], problems[i]["operands"][k + 1]) for i in rows]
        for i, value in zip(rows, add_alone(model, pairs, generator)):
            written[i].append(value)
    return ["".join(f" {v}" for v in values) for values in written]


def step_demos(seed: int) -> list[dict]:
    """The demonstrations {'prompt', 'completion'}: CHAINS for every training prompt of 3 and 4
    numbers, each step the base model's own sample asked alone (`chain_steps`)."""
    base, generator, demos = load_model("base"), torch.Generator().manual_seed(seed), []
    for terms in steps.TERMS:
        problems = steps.step_problems(terms, "train")
        for _ in range(CHAINS):
            completions = chain_steps(base, problems, generator)
            demos += [{"prompt": p["prompt"], "completion": c} for p, c in zip(problems, completions)]
    return demos


def rates(prompts: list[str], completions: list[str]) -> dict[str, float]:
    """Well formed, final answer right, and step accuracy from the start and local: shares over the completions."""
    rows = list(zip(prompts, completions))
    return {"well_formed": sum(steps.is_well_formed(p, c) for p, c in rows) / len(rows),
            "correct": sum(steps.final_correct(p, c) for p, c in rows) / len(rows),
            "step_accuracy": sum(steps.step_accuracy(p, c, "from_start") for p, c in rows) / len(rows),
            "step_accuracy_local": sum(steps.step_accuracy(p, c, "local") for p, c in rows) / len(rows)}


@torch.no_grad()
def steps_report(model: GPT, terms: int, seed: int = 0) -> dict[str, float]:
    """`rates` of one sample of `model` per test prompt of `terms` numbers (temperature 1)."""
    prompts = [p["prompt"] for p in steps.step_problems(terms, "test")]
    rollout = sample(model, prompts, max_new_tokens=steps.MAX_NEW_TOKENS[terms],
                     generator=torch.Generator().manual_seed(seed))
    return rates(prompts, rollout.texts)


def measured(seed: int, policy: GPT) -> dict[str, float]:
    """On the test prompts of 3 and 4 numbers: the trained model, the base model asked the whole
    sum, and the base model asked each step alone (`chain_steps`, what the demonstrations hold)."""
    base, generator, out = load_model("base"), torch.Generator().manual_seed(seed + 1), {}
    for terms in steps.TERMS:
        problems = steps.step_problems(terms, "test")
        chained = chain_steps(base, problems, generator)
        for who, result in (("model", steps_report(policy, terms, seed)), ("base", steps_report(base, terms, seed)),
                            ("base_alone", rates([p["prompt"] for p in problems], chained))):
            out.update({f"{who}_{name}_{terms}": round(v, 4) for name, v in result.items()})
    return out


def build(seed: int = 0) -> dict:
    """Train the shipped steps model from the base model, measure it, save it with its card."""
    config = SFTConfig(**{**asdict(CONFIG), "seed": seed})
    demos = step_demos(seed)
    policy, enc = load_model("base"), load_tokenizer()
    start = time.time()
    history = fit(policy, demo_tokens(demos, enc), config, enc.encode_single_token(PAD), desc="steps SFT")
    seconds = time.time() - start
    root = paths.data_dir()
    out = root / CHECKPOINTS["steps"]
    save_checkpoint(policy, out)
    right = sum(steps.final_correct(d["prompt"], d["completion"]) for d in demos)
    card = {
        "command": f"python -m minirl.train.steps_model --seed {seed}",
        "seed": seed,
        "data": f"{len(demos)} demonstrations, the training prompts of 3 and 4 numbers, each step the base model's "
                f"own sample for that step asked alone as a plain sum, slips carried forward; {right} end on the right sum",
        "settings": asdict(config),
        "train_seconds": round(seconds),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "metrics": {"train_loss_last_20": round(sum(h["loss"] for h in history[-20:]) / 20, 4),
                    **measured(seed, policy)},
    }
    out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    paths.write_manifest(root)
    return card


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m minirl.train.steps_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.seed)["metrics"], indent=1))


if __name__ == "__main__":
    main()
