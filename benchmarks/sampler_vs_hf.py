"""Our KV-cache sampler against Hugging Face `generate()`, side by side in one run.

    python benchmarks/sampler_vs_hf.py            # writes benchmarks/results/sampler_cpu.json

Settings pinned for every run of this benchmark: a randomly initialised GPT-2 layout (width 128, 4 layers, 4 heads,
vocabulary 512, fp32), the same weights in both (our model exported with `minirl.lm.export`),
batch 64, a 16-token prompt, exactly 32 new tokens, temperature 1 with no top-k/top-p, the
same thread count, median of 15 alternating timed runs after warm-up. Target: at least 2x HF.
"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

from minirl.lm.export import to_hf_gpt2
from minirl.lm.model import GPT, GPTConfig
from minirl.lm.sampling import sample_tokens

BATCH, PROMPT, NEW, VOCAB = 64, 16, 32, 512
WARMUP, REPEATS = 2, 15


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median_seconds(*fns) -> list[float]:
    """Median wall time of each function; the functions alternate within every repeat, so a
    slow spell of the machine hits all of them alike."""
    for _ in range(WARMUP):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(REPEATS):
        for fn, t in zip(fns, times):
            start = time.perf_counter()
            fn()
            t.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def setup(threads: int):
    """The pinned job at `threads` threads: our random-init model, the same weights in HF, the prompts (B, P)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    ours = GPT(GPTConfig(vocab_size=VOCAB, n_ctx=PROMPT + NEW, n_embd=128, n_layer=4, n_head=4)).eval()
    prompts = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1))
    return ours, to_hf_gpt2(ours), prompts


@torch.no_grad()
def hf_generate(hf, prompts: torch.Tensor) -> torch.Tensor:
    """HF `generate()` on the pinned settings: (B, P + NEW) ids."""
    return hf.generate(
        prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=1.0, top_k=0,
        top_p=1.0, max_new_tokens=NEW, min_new_tokens=NEW, eos_token_id=None, pad_token_id=0,
    )


def run(threads: int) -> dict:
    ours, hf, prompts = setup(threads)
    gen = torch.Generator().manual_seed(2)

    def ours_step():
        out = sample_tokens(ours, prompts.tolist(), max_new_tokens=NEW, eos_token_id=None, generator=gen)
        assert out.tokens.shape == (BATCH, NEW)

    def hf_step():
        assert hf_generate(hf, prompts).shape == (BATCH, PROMPT + NEW)

    hf_s, ours_s = median_seconds(hf_step, ours_step)
    tokens = BATCH * NEW
    return {
        "threads": threads,
        "hf_generate_tokens_per_s": round(tokens / hf_s),
        "minirl_sample_tokens_per_s": round(tokens / ours_s),
        "speedup": round(hf_s / ours_s, 2),
    }


def main() -> None:
    results = {
        "benchmark": "sampling: batch 64, prompt 16, 32 new tokens, T=1, no top-k/top-p, random-init GPT-2 "
                     "layout (d=128, 4 layers, 4 heads, vocab 512, fp32)",
        "machine": f"{cpu_name()}, {torch.get_num_threads()} cores visible to torch",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__},
        "runs": [run(t) for t in sorted({1, torch.get_num_threads()})],
    }
    out = Path(__file__).parent / "results" / "sampler_cpu.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
