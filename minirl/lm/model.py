"""A tiny GPT laid out exactly like GPT-2, with a KV cache for sampling.

Layout (GPT-2): token + learned position embeddings; n_layer pre-LayerNorm blocks of causal
self-attention and a tanh-GELU MLP; a final LayerNorm; the output layer tied to the token
embedding. Parameter names follow Hugging Face's GPT-2 (`wte`, `h.0.attn.c_attn`, ...), so an
export is a rename plus a transpose (GPT-2 stores linear weights as Conv1D, in x out).
Dropout is left out entirely: RL steps need it off, and the tiny world does not need it.

Batches may be left-padded (prompts of different lengths): `key_mask` marks real tokens and
`positions` gives each token's position id. Left padding keeps every row's newest token in the
same column, which is what makes batched decoding with one cache simple.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core import validate
from ..core.paths import DataError, rebuild_command, verified_path
from .tokenizer import load_tokenizer

__all__ = ["GPTConfig", "KVCache", "GPT", "CHECKPOINTS", "save_checkpoint", "load_model", "checkpoint_card"]


@validate.known_options
@dataclass
class GPTConfig:
    """The GPT's shape; the defaults are the shipped base model's (1.26M parameters).

    vocab_size  rows of the token embedding: the tokenizer's n_vocab (506: 504 BPE tokens, EOS, PAD)
    n_ctx       the context window: the most positions a sequence (prompt + completion) may take
    n_embd      width of the residual stream
    n_layer     transformer blocks
    n_head      attention heads per block (n_embd must be divisible by it)
    """
    vocab_size: int = 506
    n_ctx: int = 64
    n_embd: int = 128
    n_layer: int = 6
    n_head: int = 4

    def __post_init__(self):
        for name in ("vocab_size", "n_ctx", "n_embd", "n_layer", "n_head"):
            validate.integer(name, getattr(self, name))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head} (each head gets n_embd / n_head)")


class KVCache:
    """Keys and values of every layer for a batch, preallocated to `max_len` slots.

    kv: (n_layer, 2, B, n_head, max_len, head_dim), keys at [:, 0] and values at [:, 1];
    slots [0, length) are filled. One tensor, so each step writes a layer's keys and values
    with a single copy.
    """

    def __init__(self, kv: torch.Tensor, length: int = 0):
        self.kv, self.length = kv, length

    @classmethod
    def empty(cls, config: GPTConfig, batch: int, max_len: int, device=None, dtype=None) -> "KVCache":
        if max_len > config.n_ctx:
            raise ValueError(f"a cache of {max_len} slots exceeds the context window n_ctx={config.n_ctx}")
        shape = (config.n_layer, 2, batch, config.n_head, max_len, config.n_embd // config.n_head)
        return cls(torch.empty(shape, device=device, dtype=dtype))  # unfilled slots are never read

    def repeat_interleave(self, repeats: int) -> "KVCache":
        """A new cache with each row copied `repeats` times (a real copy, not an expanded view,
        so one row's later writes never leak into its siblings)."""
        return KVCache(self.kv.repeat_interleave(repeats, dim=2), self.length)


def attention_mask(key_mask: torch.Tensor | None, start: int, t: int, s: int, device) -> torch.Tensor | None:
    """Boolean (B or 1, 1, t, s) mask: query slot start+i may see key slot j <= start+i that is real.

    A query may always see itself, so a padding query never has an empty row (which would give
    NaN and leak into real rows through 0 * NaN). Returns None when plain causal masking suffices.
    """
    if key_mask is None and (t == 1 or start == 0):
        return None
    q_slot = torch.arange(start, start + t, device=device)[:, None]  # (t, 1)
    k_slot = torch.arange(s, device=device)[None, :]  # (1, s)
    allowed = k_slot <= q_slot  # (t, s)
    if key_mask is not None:
        allowed = allowed & (key_mask[:, None, :].bool() | (k_slot == q_slot))  # (B, t, s)
    return allowed[:, None] if allowed.dim() == 3 else allowed[None, None]


def single_query_attention(q, k, v, mask):
    """softmax(q k^T / sqrt(d)) v for q (B, nh, 1, hd) against k, v (B, nh, S, hd); mask (B|1, 1, 1, S) or None."""
    scores = (q @ k.transpose(-2, -1)) * (q.size(-1) ** -0.5)  # (B, nh, 1, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, mask, cache: KVCache | None, layer: int, prefix=None, record=None):
        B, T, C = x.shape
        # (B, T, 3C) -> (3, B, n_head, T, head_dim): queries, keys, values
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if record is not None:
            record.append(qkv[1:])
        if prefix is not None:  # keys/values of earlier tokens, kept with autograd (no in-place cache writes)
            k, v = torch.cat([prefix[layer][0], k], dim=2), torch.cat([prefix[layer][1], v], dim=2)
            is_causal = False
        elif cache is not None:
            start = cache.length
            cache.kv[layer, :, :, :, start : start + T] = qkv[1:]
            k, v = cache.kv[layer, 0, :, :, : start + T], cache.kv[layer, 1, :, :, : start + T]
            is_causal = mask is None and start == 0 and T > 1
        else:
            is_causal = mask is None
        if T == 1:  # one query (decoding): two small matmuls beat the fused CPU kernel's overhead
            y = single_query_attention(q, k, v, mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)  # (B, nh, T, hd)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, mask, cache, layer, prefix=None, record=None):
        x = x + self.attn(self.ln_1(x), mask, cache, layer, prefix, record)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_ctx, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by 1/sqrt(2 L)
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def hidden_states(self, idx, *, positions=None, key_mask=None, cache: KVCache | None = None, prefix=None,
                      record: list | None = None):
        """Final-LayerNorm hidden states (B, T, n_embd) for tokens `idx` (B, T).

        positions: (B, T) position ids, default start..start+T-1 (start = cache.length or 0).
        key_mask: (B, S) with 1 for real tokens over every slot so far (S = start + T), or None.
        cache: filled in place with this chunk's keys and values, and advanced by T (for sampling).
        record: a list that receives each layer's keys and values (2, B, n_head, T, head_dim).
        prefix: such a list for tokens that come before `idx` (start = their length); unlike the
        cache it keeps gradients, so a shared prompt can be computed once for its group in training.
        """
        B, T = idx.shape
        start = cache.length if cache is not None else (prefix[0].size(3) if prefix is not None else 0)
        if start + T > self.config.n_ctx:
            raise ValueError(
                f"sequence of {start + T} tokens is longer than the context window n_ctx={self.config.n_ctx}"
            )
        if key_mask is not None and tuple(key_mask.shape) != (B, start + T):
            raise ValueError(f"key_mask has shape {tuple(key_mask.shape)}; it needs (B, S) = {(B, start + T)}, one entry "
                             "per token so far")
        if positions is None:
            positions = torch.arange(start, start + T, device=idx.device)[None]  # (1, T)
        x = self.wte(idx) + self.wpe(positions)  # (B, T, C)
        mask = attention_mask(key_mask, start, T, start + T, idx.device)
        for layer, block in enumerate(self.h):
            x = block(x, mask, cache, layer, prefix, record)
        if cache is not None:
            cache.length += T
        return self.ln_f(x)

    def forward(self, idx, *, positions=None, key_mask=None, cache: KVCache | None = None):
        """Next-token logits (B, T, vocab_size); arguments as in `hidden_states`.

        Called without a cache (a student's own forward pass), the ids are checked first: a (B, T)
        integer tensor inside the vocabulary. Decoding steps (with a cache) and the training passes
        (`hidden_states` on a rollout) feed tokens the sampler drew, and skip the check.
        """
        if cache is None:
            if not isinstance(idx, torch.Tensor) or idx.is_floating_point() or idx.dim() != 2:
                got = f"{idx.dtype} of shape {tuple(idx.shape)}" if isinstance(idx, torch.Tensor) else type(idx).__name__
                raise TypeError(f"token ids must be a (B, T) integer tensor, got {got}; a single sequence is ids[None]")
            validate.token_ids("token ids", idx, self.config.vocab_size)
        return self.logits(self.hidden_states(idx, positions=positions, key_mask=key_mask, cache=cache))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The tied output layer: hidden states (..., n_embd) -> logits (..., vocab_size)."""
        return hidden @ self.wte.weight.T


# ---------------------------------------------------------------- checkpoints
CHECKPOINTS = {"base": "checkpoints/base.pt", "sft": "checkpoints/sft.pt", "tool": "checkpoints/tool.pt",
               "steps": "checkpoints/steps.pt"}


def save_checkpoint(model: GPT, path) -> None:
    torch.save({"config": asdict(model.config), "state_dict": model.state_dict()}, path)


def load_model(name: str = "base", device: str | torch.device = "cpu") -> GPT:
    """Load a shipped checkpoint by name (see `CHECKPOINTS`), in eval mode, on `device` ('cpu',
    'cuda', 'cuda:N' or 'mps'; checked to exist on this machine)."""
    validate.choice("model", name, sorted(CHECKPOINTS))
    device = validate.resolve_device(device)
    payload = torch.load(verified_path(CHECKPOINTS[name]), map_location=device, weights_only=True)
    model = GPT(GPTConfig(**payload["config"]))
    model.load_state_dict(payload["state_dict"])
    vocab = load_tokenizer().n_vocab
    if model.config.vocab_size != vocab:
        raise DataError(f"checkpoint data/{CHECKPOINTS[name]} has a vocabulary of {model.config.vocab_size} tokens but "
                        f"data/tokenizer.json has {vocab}: the tokenizer was rebuilt after the model was trained. "
                        f"Restore data/ with `git checkout data/` or retrain with `{rebuild_command(CHECKPOINTS[name])}`.")
    return model.to(device).eval()


def checkpoint_card(name: str = "base") -> dict:
    """The command, seed and metrics recorded beside a checkpoint."""
    validate.choice("model", name, sorted(CHECKPOINTS))
    return json.loads(verified_path(CHECKPOINTS[name].replace(".pt", ".json")).read_text())
