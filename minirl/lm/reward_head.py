"""A reward head: a scalar read from the GPT trunk's last real token, and the shipped reward models.

Layout, Hugging Face's `GPT2ForSequenceClassification`: the trunk under `transformer.`, a linear
`score` head with no bias, and the score read at the last real token of prompt + completion,
found as the rightmost token that is not padding. Padding is the course's <|pad|>, distinct from
EOS, so a completion that ended keeps its EOS and is scored there (had padding been EOS, the
score would be read one token early, before the EOS). Batches are right-padded: with causal
attention nothing after a token changes its hidden state, so the padding needs no mask.

A reward is identified only up to a constant per prompt (Bradley-Terry sees differences), so the
shipped models are normalized: mean 0 and standard deviation 1 over samples of the base model
(`normalize`). Training is in `minirl.train.reward_model`; the shipped models (`REWARD_MODELS`)
are built by `python -m minirl.train.reward_models`.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict

import torch
import torch.nn as nn

from ..core import paths, validate
from .model import GPT, GPTConfig, load_model
from .sampling import sample
from .sequences import check_token_lists, right_pad
from .tokenizer import EOS, PAD, SPECIAL_TOKENS, load_tokenizer

__all__ = ["RewardModel", "check_pad_id", "check_reward_model", "last_token_index", "from_base", "score_ids", "score_texts",
           "normalize", "REWARD_MODELS", "checkpoint_path", "save_reward_model", "load_reward_model",
           "reward_model_card"]


class RewardModel(nn.Module):
    """r(prompt + completion): a bias-free linear head on the trunk's last real token.

    input_ids (B, T), right-padded with `pad_token_id` -> raw scores (B,). `normalized` applies
    the stored normalization (reward_mean, reward_std): (r - mean) / std. `pad_token_id` must be
    the tokenizer's <|pad|>, not EOS (`check_pad_id`).
    """

    def __init__(self, trunk: GPT, pad_token_id: int):
        if not isinstance(trunk, GPT):
            raise TypeError(f"trunk must be a minirl GPT, e.g. minirl.load_model('base'); got {type(trunk).__name__}")
        check_pad_id(pad_token_id, trunk.config.vocab_size)
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


def check_pad_id(pad_token_id, vocab_size: int) -> None:
    """Check a reward model's pad id lies in the vocabulary and is not EOS. A minirl tokenizer ends
    with its special tokens, EOS then <|pad|> (ids vocab_size - 2 and vocab_size - 1): were padding
    EOS, a completion's own EOS would count as padding and its score be read one token early."""
    validate.integer("pad_token_id", pad_token_id, minimum=-2**63)
    if not 0 <= pad_token_id < vocab_size:
        raise ValueError(f"pad_token_id must lie in [0, {vocab_size}), the model's vocabulary; got {pad_token_id}. "
                         "Pass the tokenizer's <|pad|> id: enc.encode_single_token(PAD)")
    eos, pad = (vocab_size - len(SPECIAL_TOKENS) + SPECIAL_TOKENS.index(t) for t in (EOS, PAD))
    if pad_token_id == eos:
        raise ValueError(f"pad_token_id={pad_token_id} is EOS ({EOS}): a completion's EOS would be taken for padding and "
                         f"its score read one token early. Pass <|pad|>'s id, {pad} (enc.encode_single_token(PAD))")


def check_reward_model(rm, name: str = "rm") -> None:
    if not isinstance(rm, RewardModel):
        raise TypeError(f"{name} must be a minirl RewardModel, e.g. minirl.lm.reward_head.load_reward_model('rm_all'); "
                        f"got {type(rm).__name__}")


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


def from_base(base: GPT | None = None, tokenizer=None, device: str | torch.device | None = None) -> RewardModel:
    """A reward model on a trainable copy of the base model's trunk, its head at zero. It lives on
    `device` ('cpu', 'cuda', ...); by default on the base's device, and for base=None (the shipped
    base model, loaded here) on the CPU."""
    if base is not None and not isinstance(base, GPT):
        raise TypeError(f"base must be a minirl GPT (or None for the shipped base model), got {type(base).__name__}")
    device = validate.resolve_device(device) if device is not None else None
    enc = tokenizer or load_tokenizer()
    trunk = copy.deepcopy(base) if base is not None else load_model("base")
    if device is None:
        device = next(trunk.parameters()).device
    return RewardModel(trunk.train().requires_grad_(True), enc.encode_single_token(PAD)).to(device)


@torch.no_grad()
def score_ids(rm: RewardModel, seqs: list[list[int]], normalized: bool = False, batch_size: int = 256) -> torch.Tensor:
    """(B,) float64 scores of token-id sequences (prompt + completion [+ EOS]) on the CPU. Each is
    read at its own last token, known from its length: a policy under optimization pressure can
    write the pad token itself, and such a row must not be mistaken for a padded one. Each must
    hold 1 to n_ctx ids inside the vocabulary (lists or tuples of ints)."""
    check_reward_model(rm)
    config = rm.transformer.config
    check_token_lists("seqs", seqs, config.vocab_size, config.n_ctx)
    validate.integer("batch_size", batch_size)
    seqs = [list(s) for s in seqs]
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
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a string (prompt + completion), got {type(t).__name__} {t!r:.60}")
    return score_ids(rm, [enc.encode_ordinary(t) + [enc.eot_token] for t in texts], normalized)


def normalize(rm: RewardModel, policy: GPT, samples: int = 512, seed: int = 0, tokenizer=None) -> dict[str, float]:
    """Set the stored normalization to mean 0, sd 1 over `samples` orders sampled from `policy`
    (the base model) at temperature 1; returns {'mean', 'std'} of the raw scores. A standard
    deviation needs two samples at least."""
    check_reward_model(rm)
    if not isinstance(policy, GPT):
        raise TypeError(f"policy must be a minirl GPT (the base model, minirl.load_model('base')); got "
                        f"{type(policy).__name__}")
    validate.integer("samples", samples, minimum=2)
    enc = tokenizer or load_tokenizer()
    gen = torch.Generator().manual_seed(seed)  # on the CPU: the same samples on every device
    out = sample(policy, ["order:"], max_new_tokens=16, group_size=samples, generator=gen, tokenizer=enc)
    lengths = out.mask.sum(dim=1).long().tolist()
    seqs = [enc.encode_ordinary("order:") + row[:n] for row, n in zip(out.tokens.tolist(), lengths)]
    raw = score_ids(rm, seqs)
    rm.reward_mean.fill_(raw.mean().item())
    rm.reward_std.fill_(raw.std().item())
    return {"mean": raw.mean().item(), "std": raw.std().item()}


REWARD_MODELS = {
    "rm_all": {"pairs": None, "seed": 0},  # every training pair (2,250)
    "rm_100": {"pairs": 100, "seed": 0},  # 100 of them: lesson 08's weak, overconfident reward model
}


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
