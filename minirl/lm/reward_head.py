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
from .sequences import right_pad
from .tokenizer import PAD, load_tokenizer

__all__ = ["RewardModel", "last_token_index", "from_base", "score_ids", "score_texts", "normalize", "REWARD_MODELS",
           "checkpoint_path", "save_reward_model", "load_reward_model", "reward_model_card"]


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


REWARD_MODELS = {
    "rm_all": {"pairs": None, "seed": 0},  # every training pair (2,250)
    "rm_100": {"pairs": 100, "seed": 0},  # 100 of them: lesson 07's weak, overconfident reward model
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
