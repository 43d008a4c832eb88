"""Training a process reward model (`minirl.lm.process_head`): its labels, its loss, and how its step
scores become one score per completion.

A step's label comes two ways on the steps task (`minirl.world.steps`):

    exact        the world's: is the step right from the start (`steps.label_steps`)
    Monte Carlo  Math-Shepherd's (Wang et al., 2024): from the prompt and the steps up to and
                 including step k, the policy writes `rollouts` continuations at temperature 1;
                 the soft label is the share that end on the right final answer, the hard label
                 1 if any does

The Monte Carlo label estimates the step's value under the policy, P(right answer | the steps so
far), not whether the step is right. A right step from which the policy often slips later gets a
soft label well below 1, and with few rollouts sometimes a hard 0; a wrong step reaches the right
answer only when a later slip lands back on the right sum, which the steps model's slips do often
enough: with 8 rollouts, 19% of its wrong steps on sums of 3 numbers and 30% on sums of 4 got a hard
label of 1 (of 94 and 148 wrong steps in one draw). It needs no step labels, only the outcome's
verifier, and is paid for in samples: `rollouts` for every step.

The loss is binary cross-entropy at every separator, averaged over the labelled steps of the batch
(TRL's token-classification loss averages over its labelled tokens the same way); soft labels are
targets in [0, 1].

A completion's step probabilities become one score (`AGGREGATIONS`), best-of-N keeping the highest:

    min       its weakest step (Math-Shepherd's choice)
    product   the chance every step is right were the steps independent (Lightman et al., 2023)
    last      its last step alone

A completion with no step scores 0: it answered nothing.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core import validate
from ..core.notebook import progress
from ..lm.model import GPT
from ..lm.process_head import ProcessRewardModel, completion_steps, from_policy, prm_batch
from ..lm.sampling import sample
from ..lm.tokenizer import load_tokenizer
from ..world import steps as steps_world
from .training import batches, check_finite, optimizer_step

__all__ = ["AGGREGATIONS", "PREFIXES_PER_BATCH", "prefixes", "monte_carlo_label", "monte_carlo_labels", "hard_labels",
           "prm_loss", "PRMConfig", "train_prm", "completion_score"]

AGGREGATIONS = ("min", "product", "last")
PREFIXES_PER_BATCH = 256  # prefixes sampled together: their rollouts share one KV cache


def prefixes(completion: str) -> list[str]:
    """The completion up to and including each of its steps: ' 46 51' -> [' 46', ' 46 51']."""
    steps = completion_steps(completion)
    return ["".join(steps[:k + 1]) for k in range(len(steps))]


def monte_carlo_label(prompt: str, prefix: str, continuations: list[str]) -> float:
    """Math-Shepherd's soft label of the step that ends `prefix`: the share of `continuations` (texts
    the policy wrote after the prefix) whose prefix + continuation ends on the right final answer
    (`steps.final_correct`). A continuation that goes on writing the step's last number (its text
    starts with neither a space nor the end) changed the step, so it does not count as reaching the
    answer from it."""
    if not continuations:
        raise ValueError("no continuations: a Monte Carlo label needs at least one rollout from the step")
    right = [c[:1] in ("", " ") and steps_world.final_correct(prompt, prefix + c) for c in continuations]
    return sum(right) / len(continuations)


@torch.no_grad()
def monte_carlo_labels(policy: GPT, prompts: list[str], completions: list[str], rollouts: int,
                       generator: torch.Generator, tokenizer=None) -> tuple[list[list[float]], list[tuple[str, str]]]:
    """Math-Shepherd's soft label of every step (`monte_carlo_label`), from `rollouts` continuations of
    the prompt and the steps so far sampled from `policy` at temperature 1, each up to a whole
    completion's tokens (30 of 20,488 rollouts of the steps model went on writing the step's last
    number). Returns the labels, one list per completion, and every rollout as (prompt, completion),
    the prefix and its continuation joined."""
    validate.integer("rollouts", rollouts)
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions: give one prompt per completion")
    starts = [(p, prefix) for p, c in zip(prompts, completions) for prefix in prefixes(c)]
    written: list[list[str]] = [[] for _ in starts]
    for terms in sorted({len(steps_world.operands(p)) for p in prompts}):  # a length budget per number of terms
        todo = [j for j, (p, _) in enumerate(starts) if len(steps_world.operands(p)) == terms]
        for chunk in (todo[i:i + PREFIXES_PER_BATCH] for i in range(0, len(todo), PREFIXES_PER_BATCH)):
            out = sample(policy, [starts[j][0] + starts[j][1] for j in chunk],
                         max_new_tokens=steps_world.MAX_NEW_TOKENS[terms], group_size=rollouts, generator=generator,
                         tokenizer=tokenizer)
            for i, text in enumerate(out.texts):
                written[chunk[i // rollouts]].append(text)
    shares = iter([monte_carlo_label(p, prefix, texts) for (p, prefix), texts in zip(starts, written)])
    labels = [[next(shares) for _ in prefixes(c)] for c in completions]
    samples = [(p, prefix + text) for (p, prefix), texts in zip(starts, written) for text in texts]
    return labels, samples


def hard_labels(soft: list[list[float]]) -> list[list[float]]:
    """Math-Shepherd's hard estimate: 1.0 where any rollout reached the right answer, else 0.0."""
    return [[float(x > 0) for x in row] for row in soft]


def prm_loss(prm: ProcessRewardModel, ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the logits at the separators (mask, (B, T) bool) against targets
    (B, T) in [0, 1], averaged over the labelled steps of the batch."""
    if not bool(mask.any()):
        raise ValueError("the batch has no labelled step: every record needs at least one step")
    return F.binary_cross_entropy_with_logits(prm(ids)[mask], targets[mask])


@validate.known_options()
@dataclass
class PRMConfig:
    """Settings of `train_prm`.

    steps          AdamW steps (no weight decay), each on a batch of records
    batch_size     records per step, drawn in shuffled epochs
    lr             AdamW's learning rate
    max_grad_norm  gradients are clipped to this global norm (inf: no clipping)
    seed           orders the batches (a generator of its own: torch's global seed is left alone)
    """
    steps: int = 600
    batch_size: int = 64
    lr: float = 1e-4
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size"):
            validate.integer(name, getattr(self, name))
        validate.number("lr", self.lr, 0.0, open_low=True)
        validate.number("max_grad_norm", self.max_grad_norm, 0.0, open_low=True, finite=False)
        validate.integer("seed", self.seed, minimum=-2**63)


def train_prm(records: list[dict], config: PRMConfig = PRMConfig(), policy: GPT | None = None,
              tokenizer=None) -> tuple[ProcessRewardModel, list[dict]]:
    """A process reward model on a copy of `policy` (default: the shipped steps model), trained on
    records {'prompt', 'steps', 'labels'}; returns it in eval mode and one {'step', 'loss'} per
    step. An outcome reward model is trained here too: records whose steps are [completion]."""
    if not isinstance(config, PRMConfig):
        raise TypeError(f"config must be a PRMConfig, got {type(config).__name__}")
    if isinstance(records, dict) or not isinstance(records, (list, tuple)) or not records:
        raise ValueError("records must be a non-empty list of {'prompt', 'steps', 'labels'}")
    enc = tokenizer or load_tokenizer()
    prm = from_policy(policy)
    device = prm.score.weight.device
    opt = torch.optim.AdamW(prm.parameters(), lr=config.lr, weight_decay=0.0)
    history = []
    order = batches(len(records), config.batch_size, config.steps, random.Random(config.seed))
    for step, idx in zip(progress(range(config.steps), desc="PRM"), order):
        loss = prm_loss(prm, *prm_batch(enc, [records[i] for i in idx], device))
        check_finite(loss, step, "PRM loss")
        optimizer_step(opt, list(prm.parameters()), loss, config.max_grad_norm)
        history.append({"step": step, "loss": loss.item()})
    return prm.eval(), history


def completion_score(step_probs: list[float], how: str = "min") -> float:
    """One score for a completion from its steps' probabilities, by `how` (`AGGREGATIONS`); 0.0 for no step."""
    validate.choice("how", how, AGGREGATIONS)
    if not step_probs:
        return 0.0
    if how == "min":
        return min(step_probs)
    if how == "product":
        return math.prod(step_probs)
    return step_probs[-1]
