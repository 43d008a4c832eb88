"""How fast could any eager fp32 sampler be on this machine? The kernel floor of the sampler benchmark.

    python benchmarks/sampler_floor.py            # writes benchmarks/results/sampler_floor_cpu.json

`sampler_vs_hf.py` targets 2x Hugging Face `generate()`. This script asks whether that target is
reachable with eager PyTorch kernels at all. It runs the same sampling job (random-init GPT-2
layout, width 128, 4 layers, vocabulary 512, fp32, batch 64, prompt 16, 32 new tokens) as a flat
loop of bare kernel calls on preallocated weights: no modules, no masks, no checks. Each call is
timed and charged to its kind (matrix products, attention, GELU, the rest). For attention and
GELU it keeps the faster of two exact formulations, each timed here. HF `generate()` and our
sampler are timed in the same run, alternating, at the same thread count.

If the matrix products, attention and GELU of one run already take more than half of HF's time,
no eager implementation built on these kernels reaches 2x: only fusing kernels would.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from sampler_vs_hf import BATCH, NEW, PROMPT, VOCAB, cpu_name, hf_generate, setup  # noqa: E402

from minirl.lm.model import GPT  # noqa: E402
from minirl.lm.sampling import inverse_cdf_sample, sample_tokens  # noqa: E402

REPEATS = 11
GELU_C = math.sqrt(2 / math.pi)


class Clock:
    """Accumulates wall time per kind of kernel: `clock("matmul", F.linear, x, w, b)`."""

    def __init__(self):
        self.seconds = defaultdict(float)

    def __call__(self, kind, fn, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[kind] += time.perf_counter() - start
        return out


def attention_bmm(q, k, v):
    """softmax(q k^T / sqrt(d)) v as two batched matmuls (what minirl's decoder does)."""
    return torch.softmax((q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5, dim=-1) @ v


def attention_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def gelu_sigmoid(x):
    """The same function: 0.5 x (1 + tanh z) = x sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3)."""
    return x * torch.sigmoid(x * (2 * GELU_C + 2 * GELU_C * 0.044715 * x * x))


def flat_sample(model: GPT, prompts: torch.Tensor, clock: Clock, attention, gelu) -> torch.Tensor:
    """The benchmark's sampling job as bare kernels: prefill, then NEW draws with a KV cache."""
    cfg = model.config
    B, P, H, C = prompts.size(0), prompts.size(1), cfg.n_head, cfg.n_embd
    hd = C // H
    p = {name: t.detach() for name, t in model.named_parameters()}
    cache = torch.empty(cfg.n_layer, 2, B, H, P + NEW, hd)  # (L, 2, B, H, S, hd)
    gen = torch.Generator().manual_seed(2)
    tokens = torch.empty(B, NEW, dtype=torch.long)

    def block(x, layer, S, prefill):  # x (B, T, C) -> (B, T, C); S: keys after writing this chunk
        T = x.size(1)
        h = f"h.{layer}."
        a = clock("other", F.layer_norm, x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"])
        qkv = clock("matmul", F.linear, a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"])
        qkv = qkv.view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)  # (3, B, H, T, hd)
        clock("other", cache[layer, :, :, :, S - T : S].copy_, qkv[1:])
        k, v = cache[layer, 0, :, :, :S], cache[layer, 1, :, :, :S]
        if prefill:
            y = clock("attention", F.scaled_dot_product_attention, qkv[0], k, v, is_causal=True)
        else:
            y = clock("attention", attention, qkv[0], k, v)
        y = clock("other", y.transpose(1, 2).reshape, B, T, C)
        x = clock("other", torch.add, x, clock("matmul", F.linear, y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"]))
        a = clock("other", F.layer_norm, x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        a = clock("gelu", gelu, clock("matmul", F.linear, a, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]))
        return clock("other", torch.add, x, clock("matmul", F.linear, a, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"]))

    def forward(idx, start, prefill):  # idx (B, T) -> logits of the last position (B, V)
        T = idx.size(1)
        x = clock("other", torch.add, p["wte.weight"][idx], p["wpe.weight"][start : start + T])
        for layer in range(cfg.n_layer):
            x = block(x, layer, start + T, prefill)
        last = clock("other", F.layer_norm, x[:, -1], (C,), p["ln_f.weight"], p["ln_f.bias"])
        return clock("matmul", torch.mm, last, p["wte.weight"].T)

    logits = forward(prompts, 0, prefill=True)
    for t in range(NEW):
        logp = clock("sampling", torch.log_softmax, logits, dim=-1)
        tokens[:, t] = clock("sampling", inverse_cdf_sample, logp.exp(), gen)
        if t + 1 < NEW:
            logits = forward(tokens[:, t : t + 1], P + t, prefill=False)
    return tokens


def median_ms(values) -> float:
    return round(1000 * statistics.median(values), 1)


def run(threads: int) -> dict:
    model, hf, prompts = setup(threads)
    variants = {(a.__name__, g.__name__): (a, g) for a in (attention_bmm, attention_sdpa) for g in (gelu_tanh, gelu_sigmoid)}

    def hf_run():
        hf_generate(hf, prompts)

    def ours_run():
        sample_tokens(model, prompts.tolist(), max_new_tokens=NEW, eos_token_id=None, generator=torch.Generator())

    reference = sample_tokens(model, prompts.tolist(), max_new_tokens=NEW, eos_token_id=None,
                              generator=torch.Generator().manual_seed(2)).tokens
    with torch.no_grad():
        assert torch.equal(flat_sample(model, prompts, Clock(), attention_bmm, gelu_tanh), reference), "not the same job"
        wall, kinds = defaultdict(list), defaultdict(lambda: defaultdict(list))
        for repeat in range(REPEATS + 2):  # the first two are warm-up
            for key in ["hf", "ours", *variants]:
                clock = Clock()
                start = time.perf_counter()
                if key == "hf":
                    hf_run()
                elif key == "ours":
                    ours_run()
                else:
                    flat_sample(model, prompts, clock, *variants[key])
                if repeat >= 2:
                    wall[key].append(time.perf_counter() - start)
                    for kind, seconds in clock.seconds.items():
                        kinds[key][kind].append(seconds)
    # the fastest formulation seen for each kind of kernel
    floor = {kind: min(median_ms(kinds[key][kind]) for key in variants)
             for kind in ("matmul", "attention", "gelu", "sampling", "other")}
    fastest = {kind: min(variants, key=lambda key: statistics.median(kinds[key][kind]))[i]
               for i, kind in enumerate(("attention", "gelu"))}
    hf_ms = median_ms(wall["hf"])
    return {
        "threads": threads,
        "hf_generate_ms": hf_ms,
        "minirl_sample_ms": median_ms(wall["ours"]),
        "flat_loop_ms": {f"{a}+{g}": median_ms(wall[(a, g)]) for a, g in variants},
        "fastest_variant": fastest,
        "kernel_ms_per_run": floor,
        "kernel_ms_per_variant": {f"{a}+{g}": {kind: median_ms(kinds[(a, g)][kind]) for kind in floor} for a, g in variants},
        "matmul_attention_gelu_ms": round(floor["matmul"] + floor["attention"] + floor["gelu"], 1),
        "budget_for_2x_ms": round(hf_ms / 2, 1),
    }


def main() -> None:
    transformers.logging.set_verbosity_error()
    results = {
        "benchmark": f"kernel floor of sampling: batch {BATCH}, prompt {PROMPT}, {NEW} new tokens, T=1, random-init "
                     f"GPT-2 layout (d=128, 4 layers, 4 heads, vocab {VOCAB}, fp32), median of {REPEATS} alternating runs",
        "machine": f"{cpu_name()}, {torch.get_num_threads()} cores visible to torch",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__},
        "runs": [run(t) for t in sorted({1, torch.get_num_threads()})],
    }
    out = Path(__file__).parent / "results" / "sampler_floor_cpu.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
