"""Items 2 and 3 of the course's GPU checklist, and the scale-out path, in one run on one CUDA GPU.

    python benchmarks/gpu_checklist.py [--out DIR]   # sampler_gpu.json, grpo_gpu.json, memory_gpu.json, scale_out_gpu.json

Item 2: the sampler against HF `generate()`, and one GRPO step against TRL's `GRPOTrainer`, at the
CPU benchmarks' pinned setting (width 128, 4 layers, vocabulary 512, fp32) and at GPT-2-small size
(124M parameters, vocabulary 50,257, bf16): tokens/s, seconds per step and model FLOPs utilization
(MFU: the model's matrix FLOPs over the time, as a share of the GPU's dense peak for that precision).
Our bf16 sampler holds bf16 weights; HF's likewise. A bf16 GRPO step keeps fp32 weights and runs
under autocast in both (TRL's bf16=True).

Item 3: `minirl.lm.memory.training_memory` against the memory PyTorch holds, for the models PPO, GRPO
and DPO keep, each a GPT-2-small-size GPT: trained models in fp32 with AdamW after one step (16
bytes per parameter, as the mixed-precision count), frozen ones in bf16 (2 bytes). Measured:
`torch.cuda.memory_allocated` after the step (model states, what the estimate counts) and
`max_memory_allocated` during it (activations and logits of the stated batch on top).

The scale-out path: `scale_out/grpo_trl.py` trains the small Llama of `scale_out/small_model.py` for 8 steps
on the GPU (grpo_cpu.yaml's settings, bf16), plain and under DeepSpeed ZeRO-2 and ZeRO-3 (accelerate_zero2/3.yaml
with one process; skipped where DeepSpeed is not installed). Per run: where each held-out evaluation ran (the
GPU, float32 weights under autocast plain, bfloat16 under DeepSpeed), pass@1 before and after, seconds per step,
and whether the saved model reloads with the trained weights.

Each section writes its file as soon as it ends, so a run cut short keeps what it finished.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from minirl.lm import memory  # noqa: E402
from minirl.lm.export import to_hf_gpt2  # noqa: E402
from minirl.lm.model import GPT, GPTConfig  # noqa: E402
from minirl.lm.sampling import completion_logprobs, sample_tokens  # noqa: E402
from minirl.train.grpo import GRPOConfig, grpo_update  # noqa: E402
from minirl.train.training import frozen_reference  # noqa: E402

BATCH, PROMPT, PROMPTS, GROUP, BETA = 64, 16, 8, 8, 0.04
# dense peak FLOP/s of the H100 and H200 (NVIDIA's datasheets, SXM): bf16 tensor cores; fp32 without TF32
PEAK = {torch.bfloat16: 989e12, torch.float32: 67e12}
SIZES = {
    "pinned": dict(vocab_size=512, n_embd=128, n_layer=4, n_head=4),
    "gpt2-small": dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12),
}


def gpu() -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"gpu": p.name, "memory_gib": round(p.total_memory / 2**30, 1), "torch": torch.__version__,
            "cuda": torch.version.cuda}


def timed(fn, warmup: int, repeats: int) -> float:
    """Median seconds of fn() over `repeats` calls after `warmup`, the GPU synchronized around each."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_flops_per_token(c: GPTConfig, context: float) -> float:
    """Forward FLOPs of one token: 2 per weight of the blocks' matrices (12 d^2 per layer) and the
    tied output head (d V), plus attention's scores and weighted sum over `context` positions."""
    d = c.n_embd
    return 2 * (12 * c.n_layer * d * d + d * c.vocab_size) + 4 * c.n_layer * d * context


def model(size: str, n_ctx: int) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(n_ctx=n_ctx, **SIZES[size])).eval()


def sampler(size: str, dtype: torch.dtype, new: int) -> dict:
    ours = model(size, PROMPT + new)
    hf = to_hf_gpt2(ours).to("cuda", dtype).eval()
    ours = ours.to("cuda", dtype)
    V = ours.config.vocab_size
    prompts = torch.randint(0, V, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1)).cuda()
    gen = torch.Generator("cuda").manual_seed(2)

    def ours_step():
        out = sample_tokens(ours, prompts.tolist(), max_new_tokens=new, eos_token_id=None, generator=gen)
        assert out.tokens.shape == (BATCH, new)

    @torch.no_grad()
    def hf_step():
        out = hf.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=1.0, top_k=0,
                          top_p=1.0, max_new_tokens=new, min_new_tokens=new, eos_token_id=None, pad_token_id=0)
        assert out.shape == (BATCH, PROMPT + new)

    hf_s, ours_s = timed(hf_step, 2, 10), timed(ours_step, 2, 10)
    tokens = BATCH * new
    flops = tokens * matmul_flops_per_token(ours.config, PROMPT + new / 2)
    return {"size": size, "dtype": str(dtype).removeprefix("torch."), "new_tokens": new,
            "hf_generate_tokens_per_s": round(tokens / hf_s), "minirl_sample_tokens_per_s": round(tokens / ours_s),
            "speedup": round(hf_s / ours_s, 2), "minirl_mfu": round(flops / ours_s / PEAK[dtype], 5),
            "hf_mfu": round(flops / hf_s / PEAK[dtype], 5)}


def distinct_words(completions) -> list[float]:
    """The benchmark's reward (as benchmarks/grpo_vs_trl.py): distinct tokens in a completion."""
    return [float(len(set(c.split() if isinstance(c, str) else c))) for c in completions]


class StepTimer:
    """A TRL callback timing each optimizer step (GPU synchronized at both ends)."""

    def __new__(cls):
        from transformers import TrainerCallback

        class Timer(TrainerCallback):
            def __init__(self):
                self.times, self._start = [], 0.0

            def on_step_begin(self, args, state, control, **kwargs):
                torch.cuda.synchronize()
                self._start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                torch.cuda.synchronize()
                self.times.append(time.perf_counter() - self._start)
        return Timer()


def trl_step_seconds(base: GPT, prompts: list[str], new: int, bf16: bool, warmup: int, timed_steps: int) -> float:
    from trl_tiny import special_ids, trainer, word_tokenizer

    V = base.config.vocab_size

    def reward_fn(prompts, completions, **kwargs):
        return distinct_words(completions)
    with tempfile.TemporaryDirectory(prefix="grpo-gpu-") as workdir:
        tr = trainer("grpo", to_hf_gpt2(base, **special_ids(V)), word_tokenizer(V), prompts, reward_fn, workdir,
                     num_generations=GROUP, batch_size=PROMPTS * GROUP, max_completion_length=new, beta=BETA,
                     learning_rate=3e-4, max_steps=warmup + timed_steps, generation_kwargs={"min_new_tokens": new},
                     use_cpu=False, bf16=bf16)
        timer = StepTimer()
        tr.add_callback(timer)
        tr.train()
    return statistics.median(timer.times[warmup:])


def minirl_step_seconds(base: GPT, prompt_ids: list[list[int]], new: int, bf16: bool, warmup: int,
                        timed_steps: int) -> float:
    policy = copy.deepcopy(base).cuda().train()
    reference = frozen_reference(policy)
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-4, weight_decay=0.0)
    config = GRPOConfig(group_size=GROUP, beta=BETA, inner_steps=1)
    gen = torch.Generator("cuda").manual_seed(0)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            rollout = sample_tokens(policy, prompt_ids, max_new_tokens=new, group_size=GROUP, eos_token_id=None,
                                    generator=gen)
            rewards = torch.tensor(distinct_words(rollout.tokens.tolist()), device="cuda")
            with torch.no_grad():
                ref_logprobs = completion_logprobs(reference, rollout)
            grpo_update(policy, opt, rollout, rewards, ref_logprobs, config, max_len=new)
    return timed(step, warmup, timed_steps)


def grpo(size: str, new: int, bf16: bool, warmup: int = 3, timed_steps: int = 10) -> dict:
    from trl_tiny import random_prompts

    base = model(size, PROMPT + new)
    prompts = random_prompts(PROMPTS, PROMPT, base.config.vocab_size)
    prompt_ids = [[int(w[1:]) for w in p.split()] for p in prompts]  # the word tokenizer's ids
    trl_s = trl_step_seconds(base, prompts, new, bf16, warmup, timed_steps)
    ours_s = minirl_step_seconds(base, prompt_ids, new, bf16, warmup, timed_steps)
    c, B, T = base.config, PROMPTS * GROUP, PROMPT + new
    per_token = matmul_flops_per_token(c, T / 2)
    flops = B * new * matmul_flops_per_token(c, PROMPT + new / 2) + B * T * per_token * (1 + 3)  # sample; ref; train
    peak = PEAK[torch.bfloat16 if bf16 else torch.float32]
    return {"size": size, "precision": "bf16 autocast" if bf16 else "fp32", "new_tokens": new,
            "trl_s_per_step": round(trl_s, 4), "minirl_s_per_step": round(ours_s, 4),
            "ours_over_trl": round(ours_s / trl_s, 3), "minirl_mfu": round(flops / ours_s / peak, 5),
            "trl_mfu": round(flops / trl_s / peak, 5)}


def measured_memory(algorithm: str, batch: int, seq_len: int) -> dict:
    """The models `algorithm` keeps (memory.MODELS), GPT-2-small size: trained ones fp32 + AdamW
    after one step on a (batch, seq_len) batch, frozen ones bf16 running a forward on it."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    models = {}
    for name, trained in memory.MODELS[algorithm].items():
        m = model("gpt2-small", 1024).cuda()
        models[name] = (m.train(), torch.optim.AdamW(m.parameters(), lr=1e-5)) if trained else \
            (m.to(torch.bfloat16).requires_grad_(False), None)
    n = sum(p.numel() for p in models["policy"][0].parameters())
    ids = torch.randint(0, 50257, (batch, seq_len), device="cuda")
    for m, opt in models.values():
        if opt is None:
            with torch.no_grad():
                m(ids)
        else:
            m(ids).float().logsumexp(-1).mean().backward()
            opt.step()
    torch.cuda.synchronize()
    states = (torch.cuda.memory_allocated() - start) / 1e9
    peak = (torch.cuda.max_memory_allocated() - start) / 1e9
    estimate = memory.training_memory(algorithm, n)["total"]
    del models
    return {"algorithm": algorithm, "n_params": n, "batch": [batch, seq_len], "estimate_gb": round(estimate, 3),
            "measured_states_gb": round(states, 3), "measured_peak_gb": round(peak, 3),
            "states_over_estimate": round(states / estimate, 3)}


def write(out: Path, name: str, benchmark: str, runs: list[dict]) -> None:
    result = {"benchmark": benchmark, "machine": gpu(), "runs": runs}
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--only", choices=list(SECTIONS), nargs="*", default=list(SECTIONS))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("the GPU checklist needs a CUDA GPU")
    failed = []
    for name in args.only:
        try:
            write(args.out, *SECTIONS[name]())
        except Exception:  # one section's failure must not cost the others' figures on a lent machine
            traceback.print_exc()
            failed.append(name)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


def sampler_section():
    return ("sampler_gpu.json", "sampling: batch 64, prompt 16, T=1, no top-k/top-p, random-init GPT-2 layout; median "
            "of 10 timed runs after 2 warm-ups",
            [sampler("pinned", torch.float32, 32), sampler("gpt2-small", torch.bfloat16, 32),
             sampler("gpt2-small", torch.bfloat16, 128)])


def grpo_section():
    import transformers
    transformers.logging.set_verbosity_error()
    return ("grpo_gpu.json", "GRPO step (generate, reward, reference log-probs, backward, optimizer step): 64 "
            "completions (8 prompts x group 8), prompt 16, beta 0.04, one iteration per batch; median of 10 timed "
            "steps after 3 warm-ups",
            [grpo("pinned", 16, False), grpo("pinned", 32, False), grpo("gpt2-small", 32, True)])


def memory_section():
    return ("memory_gpu.json", "minirl.lm.memory.training_memory (mixed_adam) against torch.cuda memory for the models "
            "each algorithm keeps, GPT-2-small size",
            [measured_memory(a, 4, 128) for a in ("ppo", "grpo", "dpo")])


ROOT = Path(__file__).resolve().parents[1]


def scale_out_run(name: str, launcher: list[str], model: Path, out: Path) -> dict:
    """One run of scale_out/grpo_trl.py on the GPU, and what its metrics.json and saved model show."""
    from transformers import AutoModelForCausalLM
    sys.path.insert(0, str(ROOT / "scale_out"))
    from grpo_trl import digest
    command = [*launcher, str(ROOT / "scale_out" / "grpo_trl.py"), "--config", str(ROOT / "scale_out" / "grpo_cpu.yaml"),
               "--use_cpu", "false", "--bf16", "true", "--model", str(model), "--max_steps", "8", "--output_dir", str(out)]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:  # a row saying so, and the other runs still measured
        return {"run": name, "timed_out_after_seconds": 300}
    row = {"run": name, "returncode": done.returncode, "wall_seconds": round(time.perf_counter() - start, 1)}
    if done.returncode != 0:
        return {**row, "stderr_tail": done.stderr[-2000:]}
    m = json.loads((out / "metrics.json").read_text())
    keep = ("evaluation_before", "evaluation_after", "pass@1_before", "pass@1_after", "seconds_per_step", "steps",
            "weights_changed")
    saved = AutoModelForCausalLM.from_pretrained(out / "model")
    return {**row, **{k: m[k] for k in keep}, "saved_model_is_the_trained_one": digest(saved) == m["weights_digest"]}


def scale_out_section():
    work = Path(tempfile.mkdtemp())
    model = work / "small_llama"
    subprocess.run([sys.executable, str(ROOT / "scale_out" / "small_model.py"), str(model), "--layout", "llama"],
                   cwd=ROOT, check=True, timeout=600)
    runs = [scale_out_run("one GPU, plain", [sys.executable], model, work / "plain")]
    for stage in (2, 3):
        if importlib.util.find_spec("deepspeed") is None:
            runs.append({"run": f"ZeRO-{stage}", "skipped": "DeepSpeed is not installed"})
            continue
        config = work / f"zero{stage}.yaml"
        text = (ROOT / "scale_out" / f"accelerate_zero{stage}.yaml").read_text()
        config.write_text(text.replace("num_processes: 8", "num_processes: 1"))
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
        runs.append(scale_out_run(f"one GPU, DeepSpeed ZeRO-{stage}", launcher, model, work / f"zero{stage}"))
    return ("scale_out_gpu.json", "scale_out/grpo_trl.py on the small Llama (scale_out/small_model.py), 8 GRPO steps "
            "of 128 completions on one GPU, grpo_cpu.yaml's settings in bf16: plain, and under accelerate's DeepSpeed "
            "ZeRO-2 and ZeRO-3 configs with one process", runs)


SECTIONS = {"sampler": sampler_section, "grpo": grpo_section, "memory": memory_section, "scale_out": scale_out_section}

if __name__ == "__main__":
    main()
