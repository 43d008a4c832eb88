"""A process reward model: one probability per step, each read from the GPT trunk at the step's end.

Layout, TRL's `PRMTrainer` (TRL dropped it in September 2026; the course's pinned 1.16 lacks it):
the prompt, then each step followed by a separator token (`SEP`, a newline, its default
`step_separator`); the model reads a logit at each separator, and sigmoid(logit) is its
probability that the step is right (TRL read two logits there, a class each; with the first fixed
at 0 its cross-entropy is this model's binary one). The separator keeps a
step's score from seeing the next step: read at the step's last digit, the model could not know
whether the number goes on; read at the next step's first token, it would see that step's first
digit.

An outcome reward model is the same model given one step, the whole completion: its one score, at
the separator after the completion, is its probability that the final answer is right. So the two
differ in their labels and in where they read, nothing else, and are compared at one data budget.

The steps of a sum written step by step (`minirl.world.steps`) are its words, each with one leading
space (' 46 51' -> [' 46', ' 51']), as the world labels them. Batches are right-padded with <|pad|>;
with causal attention the padding after a token does not change it.

Two are shipped (`PROCESS_MODELS`, built by `python -m minirl.train.process_models`): a PRM on the
world's exact step labels and an ORM on the final answers of the same completions.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict

import torch
import torch.nn as nn

from ..core import paths, validate
from .model import GPT, GPTConfig, load_model
from .sequences import right_pad
from .tokenizer import PAD, load_tokenizer

__all__ = ["SEP", "PROCESS_MODELS", "ProcessRewardModel", "completion_steps", "prm_input", "prm_batch", "from_policy",
           "step_probabilities", "checkpoint_path", "save_process_model", "load_process_model", "process_model_card"]

SEP = "\n"  # TRL PRMTrainer's default step_separator; one token of the course's tokenizer
PROCESS_MODELS = {
    "prm_steps": "a PRM on the world's step labels (right from the start)",
    "orm_steps": "an ORM on the final answers of the same completions",
}


class ProcessRewardModel(nn.Module):
    """A linear head (with a bias, at zero) on every position of the trunk: input_ids (B, T) ->
    logits (B, T). Only the logits at the separators mean anything (`prm_batch` says where)."""

    def __init__(self, trunk: GPT):
        if not isinstance(trunk, GPT):
            raise TypeError(f"trunk must be a minirl GPT, e.g. minirl.load_model('steps'); got {type(trunk).__name__}")
        super().__init__()
        self.transformer = trunk
        self.score = nn.Linear(trunk.config.n_embd, 1)
        nn.init.zeros_(self.score.weight)
        nn.init.zeros_(self.score.bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.score(self.transformer.hidden_states(input_ids)).squeeze(-1)  # (B, T)


def completion_steps(completion: str) -> list[str]:
    """The steps of a completion: its whitespace-separated words, each after one space."""
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a string, got {type(completion).__name__} {completion!r:.60}")
    return [" " + word for word in completion.split()]


def prm_input(enc, prompt: str, steps: list[str]) -> tuple[list[int], list[int]]:
    """The ids of prompt + step_1 + SEP + ... + step_K + SEP, and the K positions of the separators.
    Each step is encoded alone, as TRL encodes them. A step holding the separator itself is refused
    (a score would be read inside it); an empty one is allowed (an outcome model's empty completion)."""
    if isinstance(steps, str) or not isinstance(steps, (list, tuple)):
        raise TypeError(f"steps must be a list of strings (completion_steps(completion), or [completion] for an outcome "
                        f"model), got {type(steps).__name__}")
    ids, ends = enc.encode_ordinary(prompt), []
    for k, step in enumerate(steps):
        if not isinstance(step, str) or SEP in step:
            raise ValueError(f"step {k} must be a string without a newline (the separator), got {step!r:.60}")
        ids += enc.encode_ordinary(step) + [enc.encode_single_token(SEP)]
        ends.append(len(ids) - 1)
    return ids, ends


def prm_batch(enc, records: list[dict], device=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Records {'prompt', 'steps', 'labels'} (one label in [0, 1] per step) -> input_ids (B, T)
    right-padded, targets (B, T) float and mask (B, T) bool, True at the separators only."""
    seqs, ends = zip(*(prm_input(enc, r["prompt"], r["steps"]) for r in records))
    ids = right_pad(list(seqs), enc.encode_single_token(PAD), device)
    targets = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    mask = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    for i, (r, positions) in enumerate(zip(records, ends)):
        if len(r["labels"]) != len(positions):
            raise ValueError(f"record {i} has {len(r['labels'])} labels for {len(positions)} steps: give one per step")
        for position, label in zip(positions, r["labels"]):
            validate.number(f"record {i}'s label", label, 0.0, 1.0)
            targets[i, position], mask[i, position] = float(label), True
    return ids, targets, mask


def from_policy(policy: GPT | None = None) -> ProcessRewardModel:
    """A process reward model on a trainable copy of `policy`'s trunk (by default the shipped steps
    model), its head at zero: every step's probability starts at 1/2."""
    trunk = copy.deepcopy(policy) if policy is not None else load_model("steps")
    if not isinstance(trunk, GPT):
        raise TypeError(f"policy must be a minirl GPT, e.g. minirl.load_model('steps'); got {type(trunk).__name__}")
    return ProcessRewardModel(trunk.train().requires_grad_(True)).to(next(trunk.parameters()).device)


@torch.no_grad()
def step_probabilities(prm: ProcessRewardModel, prompts: list[str], steps: list[list[str]], tokenizer=None,
                       batch_size: int = 256) -> list[list[float]]:
    """The model's probability that each step is right: sigmoid of its logit at the step's separator,
    one list per (prompt, steps); an empty list where a completion has no step."""
    if not isinstance(prm, ProcessRewardModel):
        raise TypeError(f"prm must be a minirl ProcessRewardModel (minirl.lm.process_head.from_policy()), got "
                        f"{type(prm).__name__}")
    if len(prompts) != len(steps):
        raise ValueError(f"{len(prompts)} prompts for {len(steps)} step lists: give one list of steps per prompt")
    enc = tokenizer or load_tokenizer()
    was_training = prm.training
    prm.eval()
    device = prm.score.weight.device
    out: list[list[float]] = []
    for i in range(0, len(prompts), batch_size):
        records = [{"prompt": p, "steps": s, "labels": [0.0] * len(s)}
                   for p, s in zip(prompts[i:i + batch_size], steps[i:i + batch_size])]
        ids, _, mask = prm_batch(enc, records, device)
        probs = torch.sigmoid(prm(ids).double()).cpu()
        out += [probs[j][mask[j].cpu()].tolist() for j in range(len(records))]
    prm.train(was_training)
    return out


def checkpoint_path(name: str) -> str:
    validate.choice("process model", name, sorted(PROCESS_MODELS))
    return f"checkpoints/{name}.pt"


def save_process_model(model: ProcessRewardModel, path) -> None:
    torch.save({"config": asdict(model.transformer.config), "state_dict": model.state_dict()}, path)


def load_process_model(name: str = "prm_steps", device: str | torch.device = "cpu") -> ProcessRewardModel:
    """A shipped process or outcome reward model by name (see `PROCESS_MODELS`), in eval mode."""
    device = validate.resolve_device(device)
    payload = torch.load(paths.verified_path(checkpoint_path(name)), map_location=device, weights_only=True)
    model = ProcessRewardModel(GPT(GPTConfig(**payload["config"])))
    model.load_state_dict(payload["state_dict"])
    return model.to(device).eval()


def process_model_card(name: str = "prm_steps") -> dict:
    """The command, data, settings and validation metrics recorded beside a shipped process model."""
    return json.loads(paths.verified_path(checkpoint_path(name).replace(".pt", ".json")).read_text())
