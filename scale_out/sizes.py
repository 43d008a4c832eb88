"""What GRPO with scale_out/grpo_trl.py holds per GPU for Qwen2.5 instruct models of 0.5B to 14B parameters,
by layout, computed with the course's memory calculator (`minirl.lm.memory`), and the floor of a step's time.

    python scale_out/sizes.py          # the tables docs/cluster.md shows

Per GPU, in GB (1e9 bytes), the model states only (activations under gradient checkpointing, the logits and
the allocator's slack come on top):
- the policy: weights, gradients and Adam's state, 16 bytes a parameter (`zero_model_states`, mixed-precision
  Adam's count: on one GPU the script trains fp32 weights under bf16 autocast, 4 + 4 + 8, the same 16),
  sharded by ZeRO-2 (all but the bf16 weights) or ZeRO-3 (all of it) across the data-parallel ranks;
- the frozen reference: fp32 on one GPU (TRL loads it as the policy), bf16 under DeepSpeed, sharded by ZeRO-3;
- vLLM colocated: its own bf16 copy of the weights on every GPU (without tensor parallelism), inside the share
  of the GPU `vllm_gpu_memory_utilization` reserves, with its KV cache;
- under ZeRO-3 the script's evaluation and weights' digest gather the whole model in bf16 on every GPU, briefly.

The shapes are the models' config.json values; their parameter counts (computed from them) are the published
0.49B, 1.54B, 3.09B, 7.61B and 14.7B.
"""
from minirl.lm import memory

GB = 1e9
# hidden, intermediate, layers, attention heads, key/value heads, vocabulary, tied embeddings
QWEN25 = {"Qwen2.5-0.5B-Instruct": (896, 4864, 24, 14, 2, 151936, True),
          "Qwen2.5-1.5B-Instruct": (1536, 8960, 28, 12, 2, 151936, True),
          "Qwen2.5-3B-Instruct": (2048, 11008, 36, 16, 2, 151936, True),
          "Qwen2.5-7B-Instruct": (3584, 18944, 28, 28, 4, 152064, False),
          "Qwen2.5-14B-Instruct": (5120, 13824, 48, 40, 8, 152064, False)}
LAYOUTS = {"1 GPU": (1, 0), "8 GPUs, ZeRO-2": (8, 2), "8 GPUs, ZeRO-3": (8, 3), "16 GPUs, ZeRO-3": (16, 3)}
TOKENS_PER_STEP = 128 * (207 + 64)  # 128 completions of at most 64 tokens after prompts of at most 207
H100_BF16_PEAK = 989e12  # dense bf16 FLOP/s of one H100 SXM (NVIDIA's datasheet)


def parameters(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int, tied: bool) -> int:
    """A Qwen2 decoder's parameters: per layer the attention (q with bias, k and v with bias on the key/value
    heads, o without), the gated MLP and two RMSNorm weights; the embedding, a separate head unless tied,
    and the final norm."""
    head_dim = hidden // heads
    attention = hidden * hidden + hidden + 2 * (hidden * kv_heads * head_dim + kv_heads * head_dim) + hidden * hidden
    layer = attention + 3 * hidden * intermediate + 2 * hidden
    return layers * layer + vocab * hidden * (1 if tied else 2) + hidden


def per_gpu(n: int, ranks: int, stage: int) -> dict[str, float]:
    """GB per GPU of the policy's states, the reference, vLLM's weights and ZeRO-3's gathered copy."""
    reference = 4 * n if stage == 0 else (2 * n / ranks if stage == 3 else 2 * n)
    return {"policy": memory.zero_model_states(n, ranks, stage), "reference": reference / GB,
            "vllm_weights": 2 * n / GB, "gathered": 2 * n / GB if stage == 3 else 0.0}


def memory_table() -> str:
    rows = ["| model | parameters | " + " | ".join(LAYOUTS) + " | vLLM's weights, each GPU |",
            "|---|---|" + "---|" * len(LAYOUTS) + "---|"]
    for name, shape in QWEN25.items():
        n = parameters(*shape)
        cells = []
        for ranks, stage in LAYOUTS.values():
            m = per_gpu(n, ranks, stage)
            cells.append(f"{m['policy'] + m['reference']:.1f}" + (f" (+{m['gathered']:.1f})" if stage == 3 else ""))
        rows.append(f"| {name} | {n / 1e9:.2f}B | " + " | ".join(cells) + f" | {m['vllm_weights']:.1f} |")
    return "\n".join(rows)


def time_table() -> str:
    """The floor of a step: 2 FLOPs a parameter a token to generate, 2 for the policy's forward pass that TRL's
    correction for vLLM's probabilities needs, 2 for the reference's, and 8 for the policy's forward and backward
    passes with gradient checkpointing's second forward, over the step's 128 x 271 tokens at most, on 8 H100s at
    their dense bf16 peak."""
    rows = ["| model | FLOPs per step (at most) | floor on 8 H100s |", "|---|---|---|"]
    for name, shape in QWEN25.items():
        flops = (2 + 2 + 2 + 8) * parameters(*shape) * TOKENS_PER_STEP
        rows.append(f"| {name} | {flops:.2e} | {flops / (8 * H100_BF16_PEAK):.3f} s |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(memory_table())
    print()
    print(time_table())
