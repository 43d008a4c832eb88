"""One DPO training step, ours against TRL's `DPOTrainer`, side by side in one run.

    python benchmarks/dpo_vs_trl.py             # writes benchmarks/results/dpo_vs_trl.json

The same randomly initialised GPT-2 layout as the GRPO benchmark (width 128, 4 layers, 4 heads,
vocabulary 512, fp32) in both, the same weights (ours exported with `minirl.lm.export`), 32 pairs
per step, a 16-token prompt and responses of 31 word tokens + EOS (every sequence 48 tokens, no
padding), beta 0.1, loss 'sigmoid', lr 1e-5, gradients clipped at norm 1, at 1 thread and at all.

A step is the policy's forward pass over the 64 responses (chosen and rejected), the loss,
backward and the AdamW step. Reference log-probs are precomputed on both sides, once per pair
before the timed steps, as `minirl.train.dpo.train_dpo` does: TRL with `precompute_ref_log_probs=True`
(they come in the batch), ours with `minirl.train.dpo.reference_logprobs`. Ours is what `train_dpo`
runs per step: `pair_logprobs` (padding the token lists into tensors included; TRL collates
before its step begins) + `objective` + `training.optimizer_step`. TRL's step is timed from its
trainer's on_step_begin to on_step_end callbacks (its per-step metrics included). Each side uses
its own AdamW: TRL the trainer's default (`adamw_torch_fused`), ours `torch.optim.AdamW`. The two
alternate in rounds (TRL then ours, twice) and each takes the median of its timed steps after
warm-up. Target: ours at most half of TRL's time.
"""
from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never reach for the hub
import datasets  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from grpo_vs_trl import StepTimer  # noqa: E402
from sampler_vs_hf import cpu_name  # noqa: E402
from trl_tiny import dpo_trainer, random_prompts, special_ids, word_tokenizer  # noqa: E402

from minirl.lm.export import to_hf_gpt2  # noqa: E402
from minirl.lm.model import GPT, GPTConfig  # noqa: E402
from minirl.train.dpo import DPOConfig, objective, pair_logprobs, reference_logprobs  # noqa: E402
from minirl.train.training import frozen_reference, optimizer_step  # noqa: E402

VOCAB, PROMPT, WORDS, PAIRS, BETA, LR = 512, 16, 31, 32, 0.1, 1e-5
WARMUP, TIMED, ROUNDS = 3, 20, 2
STEPS = WARMUP + TIMED


def trl_times(model: GPT, pairs: list[dict]) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="dpo-vs-trl-") as workdir:
        tr = dpo_trainer(to_hf_gpt2(model, **special_ids(VOCAB)), None, word_tokenizer(VOCAB), pairs, workdir, beta=BETA, batch_size=PAIRS,
                         learning_rate=LR, max_grad_norm=1.0, max_steps=STEPS, precompute_ref_log_probs=True)
        timer = StepTimer()
        tr.add_callback(timer)
        tr.train()
    return timer.times[WARMUP:]


def minirl_times(model: GPT, items: list, pad: int) -> list[float]:
    policy = copy.deepcopy(model).train()
    config = DPOConfig(batch_size=PAIRS, beta=BETA, lr=LR, max_grad_norm=1.0)
    ref = reference_logprobs(frozen_reference(model), items, pad, average=False)
    params = list(policy.parameters())
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    times = []
    for step in range(STEPS):
        idx = list(range(step * PAIRS, (step + 1) * PAIRS))
        start = time.perf_counter()
        chosen, rejected = pair_logprobs(policy, [items[i] for i in idx], pad)
        loss, _, _ = objective(config, chosen, rejected, ref[idx])
        optimizer_step(opt, params, loss, config.max_grad_norm)
        times.append(time.perf_counter() - start)
    return times[WARMUP:]


def run(threads: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, n_ctx=PROMPT + WORDS + 1, n_embd=128, n_layer=4, n_head=4))
    prompts, chosen, rejected = (random_prompts(STEPS * PAIRS, n, VOCAB, seed) for n, seed in
                                 ((PROMPT, 0), (WORDS, 1), (WORDS, 2)))
    pairs = [{"prompt": p, "chosen": " " + c, "rejected": " " + r} for p, c, r in zip(prompts, chosen, rejected)]
    eos, pad = VOCAB - 1, VOCAB - 2  # the word tokenizer's <eos> and <pad>

    def ids(text):
        return [int(w[1:]) for w in text.split()]
    items = [(ids(p["prompt"] + p["chosen"]) + [eos], PROMPT, ids(p["prompt"] + p["rejected"]) + [eos], 1.0)
             for p in pairs]
    trl_s, ours_s = [], []
    for _ in range(ROUNDS):
        trl_s += trl_times(model, pairs)
        ours_s += minirl_times(model, items, pad)
    assert torch.get_num_threads() == threads, "a trainer changed torch's thread count"
    t, o = statistics.median(trl_s), statistics.median(ours_s)
    return {"threads": threads, "trl_s_per_step": round(t, 4), "minirl_s_per_step": round(o, 4),
            "ours_over_trl": round(o / t, 3)}


def main() -> None:
    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    results = {
        "benchmark": "DPO step (policy forward on chosen + rejected, sigmoid loss, backward, AdamW step): 32 pairs, "
                     "prompt 16 tokens, responses 31 tokens + EOS, beta 0.1, random-init GPT-2 layout (d=128, "
                     "4 layers, 4 heads, vocab 512, fp32); median over timed steps after warm-up",
        "reference": "log-probs precomputed once per pair before the timed steps on both sides (TRL "
                     "precompute_ref_log_probs=True, minirl reference_logprobs as in train_dpo); not timed",
        "machine": f"{cpu_name()}, {torch.get_num_threads()} cores visible to torch",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "trl": trl.__version__},
        "runs": [run(t) for t in sorted({1, torch.get_num_threads()})],
    }
    out = Path(__file__).parent / "results" / "dpo_vs_trl.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
