"""Training a reward model (`minirl.lm.reward_head`) on preference pairs (Bradley-Terry), and
measuring it on the orders world.

Training minimizes the Bradley-Terry loss on (chosen, rejected) pairs, optionally plus the
imitation loss of Askell et al. (2021): the language-model loss of the same trunk on the chosen
completions (`lambda L_R + beta L_IL` in Hao Sun's slides "Reinforcement Learning in the Era of
LLMs", Cambridge 2023; here L_R + imitation_coef * L_IL). The head starts at zero, so the first
loss is exactly log 2. `as_reward_fn` wraps a model in the reward-function signature TRL and the
course's trainers use. The shipped models are built by `python -m minirl.train.reward_models`.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from ..core import losses, preferences, validate
from ..core.notebook import progress
from ..lm.model import GPT
from ..lm.reward_head import RewardModel, check_reward_model, from_base, score_ids, score_texts
from ..lm.sequences import (check_leading_space, check_records, check_token_lists, pair_tokens, response_mask, right_pad,
                            sequence_ids)
from ..lm.tokenizer import load_tokenizer
from ..world import generate, grammar, rewards
from .training import batches

__all__ = ["as_reward_fn", "RMConfig", "check_config", "pair_step_loss", "score_step_loss", "fit", "train_reward_model",
           "train_on_scores", "pair_metrics", "valid_order_table", "order_report", "CORRUPTIONS", "off_support_orders",
           "subset", "SHIPPED"]


def as_reward_fn(rm: RewardModel, tokenizer=None, normalized: bool = True):
    """The model as a reward function with TRL's signature,
    reward_fn(prompts, completions, **kwargs) -> list[float].

    With `completion_ids` (what minirl's trainers pass: the sampled ids through EOS) the model
    scores exactly the tokens the policy produced; without, it encodes the texts, adding EOS
    unless `truncated` says the completion hit the length limit.
    """
    check_reward_model(rm)
    enc = tokenizer or load_tokenizer()

    def reward_model_score(prompts: list[str], completions: list[str], completion_ids=None, truncated=None,
                           **kwargs) -> list[float]:
        pairs = rewards.pairs(prompts, completions)
        for name, given in (("completion_ids", completion_ids), ("truncated", truncated)):
            if given is not None and not isinstance(given, (list, tuple, torch.Tensor)):
                raise TypeError(f"{name} must be a list, one entry per completion; got {type(given).__name__}")
            if given is not None and len(given) != len(pairs):
                raise ValueError(f"{len(given)} {name}{' flags' * (name == 'truncated')} for {len(pairs)} completions: "
                                 "give one per completion")
        if completion_ids is not None:
            completion_ids = [ids.tolist() if isinstance(ids, torch.Tensor) else ids for ids in completion_ids]
            check_token_lists("completion_ids", completion_ids, rm.transformer.config.vocab_size, min_length=0)
            seqs = [enc.encode_ordinary(p) + list(ids) for (p, _), ids in zip(pairs, completion_ids, strict=True)]
        else:
            cut = truncated if truncated is not None else [False] * len(pairs)
            seqs = [sequence_ids(enc, p, c, ended=not t)[0] for (p, c), t in zip(pairs, cut, strict=True)]
        n_ctx = rm.transformer.config.n_ctx
        for i, s in enumerate(seqs):
            if len(s) > n_ctx:
                raise ValueError(f"completion {i} with its prompt is {len(s)} tokens, more than the reward model's context "
                                 f"window n_ctx={n_ctx}: sample fewer tokens (max_new_tokens)")
        return score_ids(rm, seqs, normalized).tolist()

    return reward_model_score


# ---------------------------------------------------------------- training
@validate.known_options
@dataclass
class RMConfig:
    """Settings of `train_reward_model`, `train_on_scores` and `fit` (AdamW, gradients clipped to
    global norm 1).

    steps           optimizer steps
    batch_size      preference pairs (or scored items) per step
    lr              AdamW's learning rate
    weight_decay    AdamW's weight decay
    imitation_coef  weight of the language-model loss on the chosen completions, added to the
                    Bradley-Terry loss (Askell et al., 2021; 0: off)
    seed            seeds torch's global generator and the order of the pairs
    """
    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-4
    weight_decay: float = 0.0
    imitation_coef: float = 0.0
    seed: int = 0


def check_config(config: RMConfig) -> None:
    if not isinstance(config, RMConfig):
        raise TypeError(f"config must be an RMConfig, got {type(config).__name__}")
    validate.integer("steps", config.steps)
    validate.integer("batch_size", config.batch_size)
    validate.number("lr", config.lr, 0.0, open_low=True)
    validate.number("weight_decay", config.weight_decay, 0.0)
    validate.number("imitation_coef", config.imitation_coef, 0.0)
    validate.integer("seed", config.seed, minimum=-2**63)


def pair_step_loss(rm: RewardModel, batch, imitation_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Bradley-Terry loss on a batch of tokenized pairs (+ the imitation loss on the chosen side)."""
    device = rm.score.weight.device
    chosen, prompt_lens, rejected, labels = zip(*batch)
    seqs = list(chosen) + list(rejected)
    ids = right_pad(seqs, rm.pad_token_id, device)  # (2B, T)
    scores, hidden = rm.scores_and_hidden(ids)  # (2B,), (2B, T, C)
    r_c, r_r = scores.chunk(2)
    y = torch.tensor(labels, dtype=scores.dtype, device=device)
    loss = losses.bradley_terry_loss(r_c, r_r, y)
    stats = {"loss": loss.item(), "accuracy": ((r_c > r_r).float() * y + (r_c < r_r).float() * (1 - y)
                                               + 0.5 * (r_c == r_r).float()).mean().item()}
    if imitation_coef > 0:
        B, T = len(chosen), ids.size(1)
        mask = response_mask(list(chosen), list(prompt_lens), T, device)[:, 1:]  # targets are tokens 1..T-1
        lm = losses.sft_loss(rm.transformer.logits(hidden[:B, :-1]), ids[:B, 1:], mask)
        loss = loss + imitation_coef * lm
        stats["imitation_loss"] = lm.item()
    return loss, stats


def score_step_loss(rm: RewardModel, batch, imitation_coef: float = 0.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean squared error between the reward and an annotator's absolute score (the scoring
    alternative to ranking); batch: (ids, prompt length, score) per item."""
    seqs, _, targets = zip(*batch)
    scores = rm(right_pad(list(seqs), rm.pad_token_id, rm.score.weight.device))
    loss = ((scores - torch.tensor(targets, dtype=scores.dtype, device=scores.device)) ** 2).mean()
    return loss, {"loss": loss.item()}


def fit(rm: RewardModel, items: list, step_loss, config: RMConfig, desc: str) -> list[dict]:
    """AdamW on `step_loss(rm, batch, imitation_coef)` over shuffled batches of `items`; the history."""
    check_config(config)
    if not items:
        raise ValueError("no training data: give at least one pair (or scored item)")
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    opt = torch.optim.AdamW(rm.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    rm.train()
    history = []
    for step, idx in zip(progress(range(config.steps), desc=desc), batches(len(items), config.batch_size,
                                                                          config.steps, rng)):
        loss, stats = step_loss(rm, [items[i] for i in idx], config.imitation_coef)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"reward-model loss is {loss.item()} at step {step}: lower the learning rate")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(rm.parameters(), 1.0)
        opt.step()
        history.append({"step": step, **stats})
    return history


def train_reward_model(pairs: list[dict], config: RMConfig = RMConfig(), base: GPT | None = None,
                       tokenizer=None) -> tuple[RewardModel, list[dict]]:
    """A reward model trained on preference pairs from the base model's trunk; (model, history).
    History rows: step, loss (Bradley-Terry), accuracy on the batch, imitation_loss when on.
    It trains on the base's device: base=None loads the shipped base model on the CPU; for a GPU
    pass base=minirl.load_model('base', device='cuda')."""
    enc = tokenizer or load_tokenizer()
    items = pair_tokens(pairs, enc)
    check_leading_space([r[side] for r in pairs for side in ("chosen", "rejected")], "chosen and rejected responses")
    check_config(config)
    rm = from_base(base, enc)
    history = fit(rm, items, pair_step_loss, config, "reward model")
    return rm.eval(), history


def train_on_scores(records: list[dict], config: RMConfig = RMConfig(), base: GPT | None = None,
                    tokenizer=None) -> tuple[RewardModel, list[dict]]:
    """A reward model regressed on absolute scores {'prompt', 'completion', 'score'}; (model, history).
    It trains on the base's device, as `train_reward_model` does."""
    check_records(records, "records", ("prompt", "completion"), "each record is a dict {'prompt', 'completion', "
                  "'score'}: two strings and a finite number")
    for i, r in enumerate(records):
        if "score" not in r:
            raise ValueError(f"records[{i}] has no 'score' (its keys: {', '.join(map(repr, r))}): each record is a "
                             "dict {'prompt', 'completion', 'score'}; for preference pairs use train_reward_model")
        if isinstance(r["score"], (int, float)) and not math.isfinite(r["score"]):
            raise ValueError(f"records[{i}]['score'] is {r['score']}: each score must be a finite number")
        validate.number(f"records[{i}]['score']", r["score"])
    check_config(config)
    enc = tokenizer or load_tokenizer()
    rm = from_base(base, enc)
    items = [(*sequence_ids(enc, r["prompt"], r["completion"]), float(r["score"])) for r in records]
    check_leading_space([r["completion"] for r in records], "completions")
    history = fit(rm, items, score_step_loss, config, "score regression")
    return rm.eval(), history


# ---------------------------------------------------------------- normalization and evaluation


def pair_metrics(rm: RewardModel, pairs: list[dict], tokenizer=None) -> dict[str, float]:
    """Accuracy (a tied score counts 1/2) and mean Bradley-Terry loss on labelled pairs, and the
    predicted P(chosen preferred) per pair (for a reliability diagram)."""
    check_reward_model(rm)
    enc = tokenizer or load_tokenizer()
    toks = pair_tokens(pairs, enc)
    check_leading_space([r[side] for r in pairs for side in ("chosen", "rejected")], "chosen and rejected responses")
    r_c, r_r = score_ids(rm, [t[0] for t in toks]), score_ids(rm, [t[2] for t in toks])
    agree = (r_c > r_r).double() + 0.5 * (r_c == r_r).double()
    return {"accuracy": agree.mean().item(), "loss": losses.bradley_terry_loss(r_c, r_r).item(),
            "predicted": torch.sigmoid(r_c - r_r)}


def valid_order_table(rm: RewardModel, tokenizer=None) -> dict[str, torch.Tensor | list[str]]:
    """Every valid order with its probability under the world's sampler, gold utility and raw score."""
    texts, probs = generate.order_distribution()
    return {"texts": texts, "probs": torch.tensor(probs, dtype=torch.float64),
            "gold": torch.tensor([rewards.order_utility(t) for t in texts], dtype=torch.float64),
            "score": score_texts(rm, texts, tokenizer)}


def order_report(rm: RewardModel, tokenizer=None) -> dict[str, float]:
    """Exact metrics over the pair distribution of the orders world: the expected accuracy under the
    world's Bradley-Terry labels, the ceiling, the expected calibration error of sigmoid(r_i - r_j)
    against the true P(i preferred), and the correlation of score and gold over the valid orders."""
    t = valid_order_table(rm, tokenizer)
    s, u, p = t["score"], t["gold"], t["probs"]
    cal = preferences.reliability(torch.sigmoid(s[:, None] - s[None, :]), torch.sigmoid(u[:, None] - u[None, :]),
                                  preferences.pair_weights(p))
    mean_s, mean_u = (p * s).sum(), (p * u).sum()
    cov = (p * (s - mean_s) * (u - mean_u)).sum()
    corr = cov / ((p * (s - mean_s) ** 2).sum() * (p * (u - mean_u) ** 2).sum()).sqrt()
    return {"expected_accuracy": preferences.expected_accuracy(s, u, p), "ceiling": preferences.accuracy_ceiling(u, p),
            "ece": cal["ece"], "correlation": corr.item()}


CORRUPTIONS = ("repeat_polite", "repeat_drink", "no_period", "two_orders", "reversed")


def off_support_orders(n: int = 200, seed: int = 0) -> list[str]:
    """`n` invalid orders (gold utility -2), each a valid order from the world's sampler broken one
    of five ways, in turn: a polite word said three times, the drink said twice, the final '.'
    dropped, two orders in one, the words in reverse order. Text the base model rarely writes."""
    rng = random.Random(seed)
    texts, probs = generate.order_distribution()
    out = []
    while len(out) < n:
        words = rng.choices(texts, weights=probs)[0].split(" ")
        kind = CORRUPTIONS[len(out) % len(CORRUPTIONS)]
        drink = next(d.split() for d in grammar.DRINKS if f" {d} " in " ".join(words))
        at = max(i for i in range(len(words)) if words[i:i + len(drink)] == drink) + len(drink)
        broken = {
            "repeat_polite": words[:-1] + [rng.choice(grammar.POLITE)] * 3 + ["."],
            "repeat_drink": words[:at] + drink + words[at:],
            "no_period": words[:-1],
            "two_orders": words + rng.choices(texts, weights=probs)[0].split(" ")[1:],
            "reversed": words[:1] + words[1:-1][::-1] + ["."],
        }[kind]
        text = " ".join(broken)
        if not grammar.is_order(text):
            out.append(text)
    return out


def subset(pairs: list, n: int | None, seed: int) -> list:
    """n of the pairs drawn without replacement by `seed` (all of them, in order, for None)."""
    return list(pairs) if n is None or n >= len(pairs) else random.Random(seed).sample(list(pairs), n)


SHIPPED = RMConfig()
