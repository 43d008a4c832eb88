"""How much memory PPO, GRPO and DPO training take, by model size and precision.

The models each algorithm keeps (as Hao Sun's slides "Reinforcement Learning in the Era of LLMs",
Cambridge 2023, and Alex Xie's lecture "RL for LLMs: From Parrots to Agents", CMU 2025, list them):

    PPO    policy (trained), reference (frozen), critic (trained), reward model (frozen)
    GRPO   policy (trained), reference (frozen), reward model (frozen; none for verifiable rewards)
    DPO    policy (trained), reference (frozen)

A trained model costs its weights, gradients, optimizer state and (mixed precision) fp32 master
weights; a frozen one its weights only. Two ways to count bytes per parameter:

    preset "lecture"     the count in Alex Xie's lecture: every copy in 16-bit, Adam's two moments
                         in 16-bit, gradients and fp32 master weights left out: 6 bytes per
                         trained parameter, 2 per frozen. It reproduces the lecture's 8B figures,
                         8 x 16 GB = 128 GB for PPO and 5 x 16 GB = 80 GB for GRPO with a reward
                         model.
    preset "mixed_adam"  mixed-precision Adam as trainers run it: bf16 weights (2) and gradients
                         (2), fp32 master weights (4) and moments (4 + 4): 16 bytes per trained
                         parameter, 2 per frozen. An 8B policy alone is then 128 GB.

ZeRO (Rajbhandari et al., 2020) shards a trained model's states across N data-parallel ranks:
stage 1 the optimizer state (Adam's moments and the fp32 master weights, K = 12 bytes per
parameter), stage 2 also the gradients, stage 3 also the 16-bit weights; `zero_model_states`
gives the per-rank bytes.

Activations and the KV cache depend on the batch, not only on the model; `activation_bytes` and
`kv_cache_bytes` count them for a Llama-style shape (`SHAPES`), and `training_memory` adds them
when given a batch. These are estimates: allocator overhead, temporary buffers and the logits
(batch x length x vocabulary, large for 128k vocabularies) are left out.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core import validate

__all__ = ["Precision", "PRESETS", "MODELS", "Shape", "SHAPES", "kv_cache_bytes", "activation_bytes",
           "training_memory", "zero_model_states"]

GB = 1e9


@dataclass(frozen=True)
class Precision:
    weights: int  # bytes per parameter of every copy
    grads: int  # bytes per trained parameter
    master: int  # fp32 master copy of trained weights (mixed precision)
    optimizer: int  # Adam's two moments, per trained parameter
    activation: int = 2  # bytes per stored activation value (16-bit)

    def trained(self) -> int:
        return self.weights + self.grads + self.master + self.optimizer

    def frozen(self) -> int:
        return self.weights


PRESETS = {
    "lecture": Precision(weights=2, grads=0, master=0, optimizer=4),
    "mixed_adam": Precision(weights=2, grads=2, master=4, optimizer=8),
}

# the models each algorithm keeps in memory, and whether each is trained
MODELS = {
    "ppo": {"policy": True, "reference": False, "critic": True, "reward": False},
    "grpo": {"policy": True, "reference": False, "reward": False},
    "dpo": {"policy": True, "reference": False},
}


@dataclass(frozen=True)
class Shape:
    """A Llama-3-style decoder: layers, width, attention heads, key/value heads (grouped-query)."""
    n_layer: int
    d_model: int
    n_head: int
    n_kv_head: int


# Llama 3.x shapes (Meta's model cards), keyed by nominal size in billions of parameters
SHAPES = {1: Shape(16, 2048, 32, 8), 3: Shape(28, 3072, 24, 8), 8: Shape(32, 4096, 32, 8), 70: Shape(80, 8192, 64, 8)}


def kv_cache_bytes(shape: Shape, batch: int, seq_len: int, bytes_per_value: int = 2) -> float:
    """Keys and values of every layer for `batch` sequences of `seq_len` tokens:
    2 * n_layer * batch * seq_len * n_kv_head * head_dim values."""
    validate.integer("batch", batch, minimum=0)
    validate.integer("seq_len", seq_len, minimum=0)
    head_dim = shape.d_model // shape.n_head
    return 2 * shape.n_layer * batch * seq_len * shape.n_kv_head * head_dim * bytes_per_value


def activation_bytes(shape: Shape, batch: int, seq_len: int, checkpointing: bool = True, bytes_per_value: int = 2) -> float:
    """Activations kept for the backward pass of one trained model. With activation checkpointing,
    each layer keeps only its input (batch * seq_len * d_model values); without it, about 34 values
    per token and width and 5 * n_head * seq_len per token for attention scores, per layer
    (Korthikanti et al., 2022, for 16-bit activations, no flash attention)."""
    if not isinstance(shape, Shape):
        raise TypeError(f"shape must be a minirl.lm.memory.Shape, e.g. memory.SHAPES[8]; got {shape!r}")
    validate.integer("batch", batch, minimum=0)
    validate.integer("seq_len", seq_len, minimum=0)
    validate.integer("bytes_per_value", bytes_per_value)
    tokens = batch * seq_len
    if checkpointing:
        per_layer = tokens * shape.d_model * bytes_per_value
    else:  # Korthikanti et al.'s bytes at 2 per value, scaled to bytes_per_value
        per_layer = (tokens * shape.d_model * 34 + tokens * 5 * shape.n_head * seq_len) * bytes_per_value / 2
    return shape.n_layer * per_layer


def training_memory(algorithm: str, n_params: float, preset: str = "mixed_adam", reward_model: bool = True,
                    batch: int = 0, seq_len: int = 0, shape: Shape | None = None,
                    checkpointing: bool = True) -> dict[str, float]:
    """Memory in GB, by component, of training with `algorithm` ('ppo', 'grpo', 'dpo') a policy of
    `n_params` parameters (every other model the same size). reward_model=False drops the reward
    model (verifiable rewards). With batch, seq_len and shape: activations of each trained model and
    the KV cache of generation (PPO and GRPO sample; DPO trains on fixed pairs, so none)."""
    validate.choice("algorithm", algorithm, sorted(MODELS))
    validate.choice("preset", preset, sorted(PRESETS))
    validate.number("n_params", n_params, 0.0)
    validate.integer("batch", batch, minimum=0)
    validate.integer("seq_len", seq_len, minimum=0)
    if bool(batch) != bool(seq_len):
        raise ValueError(f"give batch and seq_len together (got batch={batch}, seq_len={seq_len}) to count activations "
                         "and the KV cache, or neither")
    if shape is not None and not isinstance(shape, Shape):
        raise TypeError(f"shape must be a minirl.lm.memory.Shape, e.g. memory.SHAPES[8]; got {shape!r}")
    p = PRESETS[preset]
    out = {}
    for model, trained in MODELS[algorithm].items():
        if model == "reward" and not reward_model:
            continue
        out[model] = n_params * (p.trained() if trained else p.frozen()) / GB
    if batch and seq_len:
        if shape is None:
            raise ValueError("activations and the KV cache need the model's shape (minirl.lm.memory.SHAPES)")
        n_trained = sum(MODELS[algorithm].values())
        out["activations"] = n_trained * activation_bytes(shape, batch, seq_len, checkpointing, p.activation) / GB
        if algorithm != "dpo":
            out["kv_cache"] = kv_cache_bytes(shape, batch, seq_len, p.activation) / GB
    out["total"] = sum(out.values())
    return out


def zero_model_states(n_params: float, ranks: int, stage: int, preset: str = "mixed_adam") -> float:
    """GB of one trained model's states held by each of `ranks` data-parallel ranks under ZeRO
    `stage` (0 = plain data parallelism, every rank a full copy). With mixed-precision Adam, per
    parameter: weights 2 and gradients 2 bytes, optimizer state K = 12 (fp32 master 4 + moments 8):

        stage 0: 2 + 2 + K        stage 1: 2 + 2 + K/N        stage 2: 2 + (2 + K)/N        stage 3: (2 + 2 + K)/N
    """
    validate.number("n_params", n_params, 0.0)
    validate.integer("ranks", ranks, minimum=1)
    validate.choice("stage", stage, [0, 1, 2, 3])
    validate.choice("preset", preset, sorted(PRESETS))
    p = PRESETS[preset]
    optimizer = p.master + p.optimizer  # K
    sharded = {0: 0, 1: optimizer, 2: optimizer + p.grads, 3: optimizer + p.grads + p.weights}[stage]
    return n_params * (p.trained() - sharded + sharded / ranks) / GB
