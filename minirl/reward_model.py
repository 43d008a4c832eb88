"""A reward model: a scalar head on the GPT trunk, trained on preference pairs (Bradley-Terry).

The shipped models (`REWARD_MODELS`) are built by `python -m minirl.train_reward_models`.

Layout, Hugging Face's `GPT2ForSequenceClassification`: the trunk under `transformer.`, a linear
`score` head with no bias, and the score read at the last real token of prompt + completion,
found as the rightmost token that is not padding. Padding is the course's <|pad|>, distinct from
EOS, so a completion that ended keeps its EOS and is scored there (had padding been EOS, the
score would be read one token early, before the EOS). Batches are right-padded: with causal
attention nothing after a token changes its hidden state, so the padding needs no mask.

Training minimizes the Bradley-Terry loss on (chosen, rejected) pairs, optionally plus the
imitation loss of Askell et al. (2021): the language-model loss of the same trunk on the chosen
completions (`lambda L_R + beta L_IL` in Hao Sun's slides "Reinforcement Learning in the Era of
LLMs", Cambridge 2023; here L_R + imitation_coef * L_IL). The head starts at zero, so the first
loss is exactly log 2.

A reward is identified only up to a constant per prompt (Bradley-Terry sees differences), so the
shipped models are normalized: mean 0 and standard deviation 1 over samples of the base model
(`normalize`). `as_reward_fn` wraps a model in the reward-function signature TRL and the course's
trainers use.
"""
from __future__ import annotations

import copy
import json
import math
import random
import warnings
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from . import grammar, losses, paths, preferences, rewards, validate, world
from .model import GPT, GPTConfig, load_model
from .notebook import progress
from .sampling import sample
from .tokenizer import PAD, load_tokenizer

__all__ = ["RewardModel", "last_token_index", "sequence_ids", "check_leading_space", "right_pad", "response_mask",
           "from_base", "score_ids", "score_texts", "as_reward_fn", "RMConfig", "pair_tokens", "batches",
           "pair_step_loss", "score_step_loss", "fit", "train_reward_model", "train_on_scores", "normalize",
           "pair_metrics", "valid_order_table", "order_report", "CORRUPTIONS", "off_support_orders", "subset",
           "REWARD_MODELS", "SHIPPED", "checkpoint_path", "save_reward_model", "load_reward_model",
           "reward_model_card"]


class RewardModel(nn.Module):
    """r(prompt + completion): a bias-free linear head on the trunk's last real token.

    input_ids (B, T), right-padded with `pad_token_id` -> raw scores (B,). `normalized` applies
    the stored normalization (reward_mean, reward_std): (r - mean) / std.
    """

    def __init__(self, trunk: GPT, pad_token_id: int):
        super().__init__()
        self.transformer = trunk
        self.score = nn.Linear(trunk.config.n_embd, 1, bias=False)
        nn.init.zeros_(self.score.weight)
        self.pad_token_id = pad_token_id
        self.register_buffer("reward_mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("reward_std", torch.ones((), dtype=torch.float64))

    def forward(self, input_ids: torch.Tensor, last: torch.Tensor | None = None) -> torch.Tensor:
        return self.scores_and_hidden(input_ids, last)[0]

    def scores_and_hidden(self, input_ids: torch.Tensor, last: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw scores (B,) and the trunk's hidden states (B, T, C), which the imitation loss reuses.
        last: (B,) each row's last real position when the caller knows the lengths; by default it
        is found as the rightmost token that is not padding (Hugging Face's rule), which needs a
        text free of the pad token itself."""
        hidden = self.transformer.hidden_states(input_ids)  # (B, T, C)
        if last is None:
            last = last_token_index(input_ids, self.pad_token_id)  # (B,)
        return self.score(hidden[torch.arange(input_ids.size(0), device=input_ids.device), last]).squeeze(-1), hidden

    def normalized(self, raw: torch.Tensor) -> torch.Tensor:
        return (raw - self.reward_mean.to(raw.dtype)) / self.reward_std.to(raw.dtype)


def last_token_index(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """(B,) position of each row's last real token: the rightmost one that is not padding (as
    Hugging Face's sequence classifiers find it). Rows must be right-padded and not all padding."""
    real = input_ids != pad_token_id  # (B, T)
    if not bool(real.any(dim=1).all()):
        raise ValueError("a row is all padding: every sequence needs at least one real token")
    positions = torch.arange(input_ids.size(1), device=input_ids.device)
    last = (positions * real).argmax(dim=1)  # (B,) rightmost real token
    if bool((real.sum(dim=1) != last + 1).any()):
        raise ValueError("padding found before a real token: a reward model's batch must be right-padded "
                         "(prompt + completion first, padding after)")
    return last


# ---------------------------------------------------------------- tokens
def sequence_ids(enc, prompt: str, completion: str, ended: bool = True) -> tuple[list[int], int]:
    """(ids, prompt length): prompt and completion encoded apart (as the sampler sees them), then
    EOS when the completion ended (not when it was cut at the length limit)."""
    p = enc.encode_ordinary(prompt)
    return p + enc.encode_ordinary(completion) + ([enc.eot_token] if ended else []), len(p)


def check_leading_space(responses: list[str], what: str = "responses") -> None:
    """Warn, once for the lot, when non-empty responses do not start with a space. The tiny world
    puts the space between prompt and response at the start of the response (prompt 'q: 17+25= a:',
    response ' 42'), and its tokens carry that space (' 4' is not '4'): a response without it reads
    'a:42', which no grammar accepts, and is scored as text the models never saw, silently."""
    bare = [r for r in responses if r and not r.startswith(" ")]
    if bare:
        warnings.warn(f"{len(bare)} of {len(responses)} {what} do not start with a space (the first: {bare[0]!r}). "
                      "The course's responses begin with the space that follows the prompt (prompt 'q: 17+25= a:', "
                      "response ' 42'); without it they are scored as invalid text. Add it: ' ' + response (and "
                      "take it off the end of the prompt, if it is there).", stacklevel=3)


def right_pad(seqs: list[list[int]], pad: int, device=None) -> torch.Tensor:
    """(B, T) ids, each row padded on the right with `pad` to the longest."""
    T = max(len(s) for s in seqs)
    return torch.tensor([s + [pad] * (T - len(s)) for s in seqs], dtype=torch.long, device=device)


def response_mask(seqs: list[list[int]], prompt_lengths: list[int], T: int, device=None) -> torch.Tensor:
    """(B, T) 1 on completion tokens (EOS included), 0 on the prompt and the padding."""
    mask = torch.zeros(len(seqs), T, device=device)
    for i, (s, p) in enumerate(zip(seqs, prompt_lengths)):
        mask[i, p:len(s)] = 1.0
    return mask


# ---------------------------------------------------------------- building, scoring
def from_base(base: GPT | None = None, tokenizer=None) -> RewardModel:
    """A reward model on a trainable copy of the base model's trunk, its head at zero."""
    enc = tokenizer or load_tokenizer()
    trunk = copy.deepcopy(base) if base is not None else load_model("base")
    device = next(trunk.parameters()).device
    return RewardModel(trunk.train().requires_grad_(True), enc.encode_single_token(PAD)).to(device)


@torch.no_grad()
def score_ids(rm: RewardModel, seqs: list[list[int]], normalized: bool = False, batch_size: int = 256) -> torch.Tensor:
    """(B,) float64 scores of token-id sequences (prompt + completion [+ EOS]) on the CPU. Each is
    read at its own last token, known from its length: a policy under optimization pressure can
    write the pad token itself, and such a row must not be mistaken for a padded one."""
    was_training = rm.training
    rm.eval()
    device = rm.score.weight.device
    out = []
    for i in range(0, len(seqs), batch_size):
        chunk = seqs[i:i + batch_size]
        last = torch.tensor([len(s) - 1 for s in chunk], device=device)
        raw = rm(right_pad(chunk, rm.pad_token_id, device), last).double()
        out.append(rm.normalized(raw) if normalized else raw)
    rm.train(was_training)
    return torch.cat(out).cpu() if out else torch.zeros(0, dtype=torch.float64)


def score_texts(rm: RewardModel, texts: list[str], tokenizer=None, normalized: bool = False) -> torch.Tensor:
    """(B,) scores of full texts (prompt + completion) that ended with EOS."""
    enc = tokenizer or load_tokenizer()
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings")
    return score_ids(rm, [enc.encode_ordinary(t) + [enc.eot_token] for t in texts], normalized)


def as_reward_fn(rm: RewardModel, tokenizer=None, normalized: bool = True):
    """The model as a reward function with TRL's signature,
    reward_fn(prompts, completions, **kwargs) -> list[float].

    With `completion_ids` (what minirl's trainers pass: the sampled ids through EOS) the model
    scores exactly the tokens the policy produced; without, it encodes the texts, adding EOS
    unless `truncated` says the completion hit the length limit.
    """
    enc = tokenizer or load_tokenizer()

    def reward_model_score(prompts: list[str], completions: list[str], completion_ids=None, truncated=None,
                           **kwargs) -> list[float]:
        pairs = rewards.pairs(prompts, completions)
        if completion_ids is not None:
            seqs = [enc.encode_ordinary(p) + list(ids) for (p, _), ids in zip(pairs, completion_ids, strict=True)]
        else:
            cut = truncated if truncated is not None else [False] * len(pairs)
            seqs = [sequence_ids(enc, p, c, ended=not t)[0] for (p, c), t in zip(pairs, cut, strict=True)]
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


def pair_tokens(pairs: list[dict], enc) -> list[tuple[list[int], int, list[int], float]]:
    """Each pair {'prompt', 'chosen', 'rejected'[, 'label']} as (chosen ids, prompt length,
    rejected ids, label); label = P(chosen preferred), 1 unless given."""
    out = []
    for r in pairs:
        chosen, prompt_len = sequence_ids(enc, r["prompt"], r["chosen"])
        out.append((chosen, prompt_len, sequence_ids(enc, r["prompt"], r["rejected"])[0], float(r.get("label", 1.0))))
    return out


def batches(n: int, batch_size: int, steps: int, rng: random.Random):
    """`steps` lists of indices into range(n): shuffled epochs, cut into batches of batch_size."""
    order: list[int] = []
    for _ in range(steps):
        if len(order) < min(batch_size, n):
            fresh = list(range(n))
            rng.shuffle(fresh)
            order += fresh
        yield order[:batch_size]
        order = order[batch_size:]


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
    History rows: step, loss (Bradley-Terry), accuracy on the batch, imitation_loss when on."""
    enc = tokenizer or load_tokenizer()
    items = pair_tokens(pairs, enc)
    check_leading_space([r[side] for r in pairs for side in ("chosen", "rejected")], "chosen and rejected responses")
    rm = from_base(base, enc)
    history = fit(rm, items, pair_step_loss, config, "reward model")
    return rm.eval(), history


def train_on_scores(records: list[dict], config: RMConfig = RMConfig(), base: GPT | None = None,
                    tokenizer=None) -> tuple[RewardModel, list[dict]]:
    """A reward model regressed on absolute scores {'prompt', 'completion', 'score'}; (model, history)."""
    enc = tokenizer or load_tokenizer()
    rm = from_base(base, enc)
    items = [(*sequence_ids(enc, r["prompt"], r["completion"]), float(r["score"])) for r in records]
    check_leading_space([r["completion"] for r in records], "completions")
    history = fit(rm, items, score_step_loss, config, "score regression")
    return rm.eval(), history


# ---------------------------------------------------------------- normalization and evaluation
def normalize(rm: RewardModel, policy: GPT, samples: int = 512, seed: int = 0, tokenizer=None) -> dict[str, float]:
    """Set the stored normalization to mean 0, sd 1 over `samples` orders sampled from `policy`
    (the base model) at temperature 1; returns {'mean', 'std'} of the raw scores."""
    enc = tokenizer or load_tokenizer()
    gen = torch.Generator().manual_seed(seed)  # on the CPU: the same samples on every device
    out = sample(policy, ["order:"], max_new_tokens=16, group_size=samples, generator=gen, tokenizer=enc)
    lengths = out.mask.sum(dim=1).long().tolist()
    seqs = [enc.encode_ordinary("order:") + row[:n] for row, n in zip(out.tokens.tolist(), lengths)]
    raw = score_ids(rm, seqs)
    rm.reward_mean.fill_(raw.mean().item())
    rm.reward_std.fill_(raw.std().item())
    return {"mean": raw.mean().item(), "std": raw.std().item()}


def pair_metrics(rm: RewardModel, pairs: list[dict], tokenizer=None) -> dict[str, float]:
    """Accuracy (a tied score counts 1/2) and mean Bradley-Terry loss on labelled pairs, and the
    predicted P(chosen preferred) per pair (for a reliability diagram)."""
    enc = tokenizer or load_tokenizer()
    toks = pair_tokens(pairs, enc)
    check_leading_space([r[side] for r in pairs for side in ("chosen", "rejected")], "chosen and rejected responses")
    r_c, r_r = score_ids(rm, [t[0] for t in toks]), score_ids(rm, [t[2] for t in toks])
    agree = (r_c > r_r).double() + 0.5 * (r_c == r_r).double()
    return {"accuracy": agree.mean().item(), "loss": losses.bradley_terry_loss(r_c, r_r).item(),
            "predicted": torch.sigmoid(r_c - r_r)}


def valid_order_table(rm: RewardModel, tokenizer=None) -> dict[str, torch.Tensor | list[str]]:
    """Every valid order with its probability under the world's sampler, gold utility and raw score."""
    texts, probs = world.order_distribution()
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
    texts, probs = world.order_distribution()
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


# ---------------------------------------------------------------- checkpoints
REWARD_MODELS = {
    "rm_all": {"pairs": None, "seed": 0},  # every training pair (2,250)
    "rm_100": {"pairs": 100, "seed": 0},  # 100 of them: lesson 07's weak, overconfident reward model
}
SHIPPED = RMConfig()


def checkpoint_path(name: str) -> str:
    validate.choice("reward model", name, sorted(REWARD_MODELS))
    return f"checkpoints/{name}.pt"


def save_reward_model(rm: RewardModel, path) -> None:
    torch.save({"config": asdict(rm.transformer.config), "pad_token_id": rm.pad_token_id,
                "state_dict": rm.state_dict()}, path)


def load_reward_model(name: str = "rm_all", device: str | torch.device = "cpu") -> RewardModel:
    """A shipped reward model by name (see `REWARD_MODELS`), in eval mode, with its normalization."""
    device = validate.resolve_device(device)
    payload = torch.load(paths.verified_path(checkpoint_path(name)), map_location=device, weights_only=True)
    rm = RewardModel(GPT(GPTConfig(**payload["config"])), payload["pad_token_id"])
    rm.load_state_dict(payload["state_dict"])
    return rm.to(device).eval()


def reward_model_card(name: str = "rm_all") -> dict:
    """The command, seed, settings and metrics recorded beside a shipped reward model."""
    return json.loads(paths.verified_path(checkpoint_path(name).replace(".pt", ".json")).read_text())
