"""Direct preference optimization on the tiny GPT: learn from preference pairs with no reward model
and no sampling during training, against a frozen reference.

Each step takes `batch_size` pairs (prompt, chosen, rejected), computes the sequence log-probs of
both responses (completion + EOS) under the policy, with gradient, and under the reference
(computed once per pair, without), and minimizes `losses.dpo_loss` (loss_type 'sigmoid' or
'ipo') or `losses.simpo_loss` ('simpo', no reference). Offline (the default) the pairs are the ones
given, reshuffled each epoch; with `online_every = k` the trainer instead labels fresh pairs every
k steps: 2 * batch_size * k samples of the current policy, paired at random and labelled by the
orders world's gold Bradley-Terry annotator (`rlhf.gold_pairs`), batch_size * k of them, so both
modes spend batch_size labels per step.

Metrics per step: loss, preference accuracy (a tie counts 1/2), mean margin of the implicit
rewards, mean chosen and rejected sequence log-probs and implicit rewards. Every `eval_every`
steps (and at the start and the end) the policy is judged like lesson 09's: `rlhf.policy_report`
on `eval_samples` fresh samples of 'order:' (gold, valid share, KL(pi || pi_ref), length).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from ..core import losses, validate
from ..core.notebook import progress
from ..lm.model import GPT
from ..lm.sequences import PAIR_FORM, check_leading_space, check_records, pair_tokens, tokenized_logprobs
from ..lm.tokenizer import PAD, load_tokenizer
from ..world import rewards
from . import rlhf
from .training import batches
from .training import check_finite, frozen_reference, optimizer_step

__all__ = ["LOSS_TYPES", "DPOConfig", "check_pairs", "label_noise", "pair_logprobs", "reference_logprobs", "objective",
           "train_dpo"]

LOSS_TYPES = losses.DPO_LOSS_TYPES + ("simpo",)


@validate.known_options
@dataclass
class DPOConfig:
    """Settings of `train_dpo`.

    steps             optimizer steps
    batch_size        preference pairs per step
    beta              how hard the policy is held to the reference: the implicit reward is
                      beta * log(pi / pi_ref) (0.1: TRL's default); for 'ipo' the margin's target is
                      1 / (2 beta), for 'simpo' beta scales the length-normalized reward
    loss_type         'sigmoid' (DPO), 'ipo' or 'simpo' (SimPO, no reference); see `LOSS_TYPES`
    label_smoothing   the probability that a label is flipped (conservative DPO), in [0, 0.5): at
                      0.5 every label is a coin flip and nothing trains
    average_logprobs  score each response by its per-token mean log-prob instead of the sum
                      ('simpo' always averages)
    simpo_gamma       SimPO's margin: the chosen side must win by this much ('simpo' only)
    lr                AdamW's learning rate (no weight decay)
    max_grad_norm     gradients are clipped to this global norm (inf: no clipping)
    online_every      0: offline, on the pairs given; k: every k steps, fresh pairs of the policy's
                      own samples labelled by the gold annotator (pass pairs=None)
    eval_every        evaluate the policy every this many steps (`rlhf.policy_report`); 0: at the
                      start and the end only
    eval_samples      samples of 'order:' per evaluation
    seed              seeds the order of the pairs (or the online samples) and the evaluations' samples
    """
    steps: int = 60
    batch_size: int = 32
    beta: float = 0.1
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    average_logprobs: bool = False
    simpo_gamma: float = 0.5
    lr: float = 1e-5
    max_grad_norm: float = 1.0
    online_every: int = 0
    eval_every: int = 0
    eval_samples: int = 256
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_samples"):
            validate.integer(name, getattr(self, name))
        for name in ("online_every", "eval_every"):
            validate.integer(name, getattr(self, name), minimum=0)
        validate.number("beta", self.beta, 0.0, open_low=True)
        validate.choice("loss_type", self.loss_type, LOSS_TYPES)
        losses.check_label_smoothing(self.label_smoothing)
        validate.number("simpo_gamma", self.simpo_gamma, 0.0)
        validate.number("lr", self.lr, 0.0, open_low=True)
        validate.number("max_grad_norm", self.max_grad_norm, 0.0, open_low=True, finite=False)
        validate.integer("seed", self.seed, minimum=-2**63)

    @property
    def averaged(self) -> bool:
        return self.average_logprobs or self.loss_type == "simpo"


def check_pairs(pairs: list[dict], labels: bool = False) -> None:
    """Check `pairs` is a non-empty list of dicts with string 'prompt', 'chosen' and 'rejected'; with
    `labels`, that no pair carries a 'label' other than 1 (DPO trains each pair as 'chosen preferred')."""
    check_records(pairs, "pairs", ("prompt", "chosen", "rejected"), PAIR_FORM)
    for k, pair in enumerate(pairs):
        if labels and "label" in pair and pair["label"] != 1:
            raise ValueError(f"pairs[{k}] has label {pair['label']!r}, but DPO trains every pair as 'chosen preferred' "
                             "(label 1) and would silently ignore it. Where the label is 0, swap chosen and rejected; "
                             "drop ties (1/2); for noisy labels set DPOConfig(label_smoothing=eps), one flip "
                             "probability for all pairs (per-pair soft labels: the Bradley-Terry loss on the implicit "
                             "rewards, as minirl.exact.micro_dpo.dpo_pair_loss does)")


def label_noise(pairs: list[dict]) -> float:
    """The orders world's label noise: the mean over the pairs of the probability that the gold
    Bradley-Terry annotator labels the worse response as chosen, sigmoid(-|u(y_c) - u(y_r)|), a
    number known here because the annotator is (conservative DPO's eps; a tie counts 1/2)."""
    check_pairs(pairs)
    flips = [1 / (1 + math.exp(abs(rewards.order_utility(p["prompt"] + p["chosen"])
                                   - rewards.order_utility(p["prompt"] + p["rejected"])))) for p in pairs]
    return sum(flips) / len(flips)


def pair_logprobs(model: GPT, items: list, pad: int, average: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected) sequence log-probs, (B,) each, of tokenized pairs (chosen ids, prompt length,
    rejected ids, label) under `model`, in one forward pass over the 2B responses."""
    _check_items(items)
    chosen = [(c, n) for c, n, _, _ in items]
    rejected = [(r, n) for _, n, r, _ in items]
    return tokenized_logprobs(model, chosen + rejected, pad, average).chunk(2)


def _check_items(items: list) -> None:
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError("no pairs: pass a non-empty list of tokenized pairs (chosen ids, prompt length, rejected ids, "
                         "label), as minirl.lm.sequences.pair_tokens makes them")


@torch.no_grad()
def reference_logprobs(reference: GPT, items: list, pad: int, average: bool, batch_size: int = 256) -> torch.Tensor:
    """(N, 2) the reference's (chosen, rejected) log-probs of every tokenized pair, without gradient."""
    _check_items(items)
    rows = [torch.stack(pair_logprobs(reference, items[k:k + batch_size], pad, average), dim=1)
            for k in range(0, len(items), batch_size)]
    return torch.cat(rows)


def objective(config: DPOConfig, chosen: torch.Tensor, rejected: torch.Tensor,
              ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The configured loss and the two sides' rewards; ref (B, 2) is unused by SimPO."""
    if config.loss_type == "simpo":
        return losses.simpo_loss(chosen, rejected, config.beta, config.simpo_gamma)
    return losses.dpo_loss(chosen, rejected, ref[:, 0], ref[:, 1], config.beta, config.loss_type,
                           config.label_smoothing)


def online_pairs(policy: GPT, n_pairs: int, seed: int, enc) -> list[dict]:
    """`n_pairs` pairs of the policy's own samples of 'order:', labelled by the gold annotator."""
    return rlhf.gold_pairs(rlhf.order_samples(policy, 2 * n_pairs, seed, enc).texts, n_pairs, seed)


def evaluate(policy: GPT, reference: GPT, step: int, config: DPOConfig, enc) -> dict:
    report = rlhf.policy_report(policy, reference, samples=config.eval_samples, seed=config.seed + 123, tokenizer=enc)
    return {"step": step, **{k: report[k] for k in ("gold", "valid", "kl", "kl_se", "length")}}


def train_dpo(policy: GPT, pairs: list[dict] | None, config: DPOConfig = DPOConfig(), reference: GPT | None = None,
              tokenizer=None, callback=None, desc: str = "DPO") -> tuple[list[dict], list[dict]]:
    """Train `policy` in place by DPO (or IPO, SimPO) on preference pairs {'prompt', 'chosen',
    'rejected'} (a 'label', if present, must be 1: see `check_pairs`); `reference` defaults to a
    frozen copy of the policy at the start, and must otherwise be another model on its device. With
    `config.online_every` > 0, `pairs` must be None: the trainer labels its own (module docstring).
    callback(metrics, policy), if given, runs after each step. Returns (history, evals): one
    metrics dict per step, and the evaluations (step 0 = before training)."""
    if not isinstance(policy, GPT):
        raise TypeError(f"policy must be a minirl GPT, e.g. minirl.load_model('sft'); got {type(policy).__name__}")
    if not isinstance(config, DPOConfig):
        raise TypeError(f"config must be a DPOConfig, got {type(config).__name__}")
    if config.online_every and pairs is not None:
        raise ValueError("online DPO labels its own pairs: pass pairs=None with online_every > 0")
    if not config.online_every and (isinstance(pairs, dict) or not pairs):
        raise ValueError("offline DPO needs a non-empty list of {'prompt', 'chosen', 'rejected'} pairs")
    if pairs is not None:
        check_pairs(pairs, labels=True)
    if reference is not None:
        rlhf.check_reference(reference, next(policy.parameters()).device, policy)
    enc = tokenizer or load_tokenizer()
    if pairs is not None:
        check_leading_space([r[side] for r in pairs for side in ("chosen", "rejected")],
                            "chosen and rejected responses")
    pad = enc.encode_single_token(PAD)
    reference = reference or frozen_reference(policy)
    policy.eval()  # the GPT has no dropout; eval mode only keeps sampling and scoring alike
    evals = [evaluate(policy, reference, 0, config, enc)]
    items, ref, order = [], None, iter(())
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    history = []
    for step in progress(range(config.steps), desc=desc):
        if config.online_every and step % config.online_every == 0:
            fresh = online_pairs(policy, config.batch_size * config.online_every, config.seed + step, enc)
            items, ref = pair_tokens(fresh, enc), None
            order = iter([list(range(k, k + config.batch_size)) for k in range(0, len(items), config.batch_size)])
        elif not items:
            items = pair_tokens(pairs, enc)
            order = batches(len(items), config.batch_size, config.steps, random.Random(config.seed))
        if ref is None:
            ref = reference_logprobs(reference, items, pad, config.averaged)
        idx = next(order)
        chosen, rejected = pair_logprobs(policy, [items[i] for i in idx], pad, config.averaged)
        loss, r_c, r_r = objective(config, chosen, rejected, ref[idx])
        check_finite(loss, step, "DPO loss")
        optimizer_step(opt, list(policy.parameters()), loss, config.max_grad_norm)
        metrics = {"step": step + 1, "loss": loss.item(), "accuracy": losses.preference_accuracy(r_c, r_r),
                   "margin": (r_c - r_r).mean().item(), "chosen_logps": chosen.mean().item(),
                   "rejected_logps": rejected.mean().item(), "chosen_rewards": r_c.mean().item(),
                   "rejected_rewards": r_r.mean().item()}
        history.append(metrics)
        if callback is not None:
            callback(metrics, policy)
        if step + 1 == config.steps or (config.eval_every and (step + 1) % config.eval_every == 0):
            evals.append(evaluate(policy, reference, step + 1, config, enc))
    return history, evals
