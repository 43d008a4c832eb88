"""One GRPO step, ours against TRL's `GRPOTrainer`, side by side in one run.

    python benchmarks/grpo_vs_trl.py            # writes benchmarks/results/grpo_cpu.json

Settings pinned for every run of this benchmark: the same randomly initialised GPT-2 layout (width 128,
4 layers, 4 heads, vocabulary 512, fp32) in both, 64 completions per step (8 prompts of 16 tokens,
group 8), beta 0.04 (so the reference model runs), one iteration per batch, temperature 1, exactly
16 and then 32 new tokens (TRL with min_new_tokens, ours with no EOS), same threads. A step is
generation, reward, reference log-probs, backward and the optimizer step; the reward is the same
cheap function of the completion in both. TRL's step is timed from its trainer's on_step_begin
to on_step_end callbacks; ours around `grpo_update` and what precedes it. The two alternate in
rounds (TRL then ours, twice) and each takes the median of its timed steps after warm-up.
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
import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from sampler_vs_hf import cpu_name  # noqa: E402
from trl_tiny import random_prompts, special_ids, trainer, word_tokenizer  # noqa: E402

from minirl.lm.export import to_hf_gpt2  # noqa: E402
from minirl.lm.model import GPT, GPTConfig  # noqa: E402
from minirl.lm.sampling import completion_logprobs, sample_tokens  # noqa: E402
from minirl.train.grpo import GRPOConfig, grpo_update  # noqa: E402
from minirl.train.training import frozen_reference  # noqa: E402

VOCAB, PROMPT, PROMPTS, GROUP, BETA = 512, 16, 8, 8, 0.04
WARMUP, TIMED, ROUNDS = 3, 20, 2


def distinct_words(completions) -> list[float]:
    """The benchmark's reward: how many distinct tokens a completion uses (cheap, same in both)."""
    return [float(len(set(c.split() if isinstance(c, str) else c))) for c in completions]


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def trl_times(model: GPT, prompts: list[str], new: int) -> list[float]:
    def reward_fn(prompts, completions, **kwargs):
        return distinct_words(completions)
    with tempfile.TemporaryDirectory(prefix="grpo-vs-trl-") as workdir:
        tr = trainer("grpo", to_hf_gpt2(model, **special_ids(VOCAB)), word_tokenizer(VOCAB), prompts, reward_fn, workdir, num_generations=GROUP,
                     batch_size=PROMPTS * GROUP, max_completion_length=new, beta=BETA, learning_rate=3e-4,
                     max_steps=WARMUP + TIMED, generation_kwargs={"min_new_tokens": new})
        timer = StepTimer()
        tr.add_callback(timer)
        tr.train()
    return timer.times[WARMUP:]


def minirl_times(model: GPT, prompt_ids: list[list[int]], new: int) -> list[float]:
    policy = copy.deepcopy(model).train()
    reference = frozen_reference(model)
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-4, weight_decay=0.0)
    config = GRPOConfig(group_size=GROUP, beta=BETA, inner_steps=1)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(WARMUP + TIMED):
        start = time.perf_counter()
        rollout = sample_tokens(policy, prompt_ids, max_new_tokens=new, group_size=GROUP, eos_token_id=None,
                                generator=generator)
        rewards = torch.tensor(distinct_words(rollout.tokens.tolist()))
        with torch.no_grad():
            ref_logprobs = completion_logprobs(reference, rollout)
        grpo_update(policy, opt, rollout, rewards, ref_logprobs, config, max_len=new)
        times.append(time.perf_counter() - start)
    return times[WARMUP:]


def run(new: int) -> dict:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, n_ctx=PROMPT + new, n_embd=128, n_layer=4, n_head=4))
    prompts = random_prompts(PROMPTS, PROMPT, VOCAB)
    prompt_ids = [[int(w[1:]) for w in p.split()] for p in prompts]  # the word tokenizer's ids
    trl_s, ours_s = [], []
    for _ in range(ROUNDS):
        trl_s += trl_times(model, prompts, new)
        ours_s += minirl_times(model, prompt_ids, new)
    t, o = statistics.median(trl_s), statistics.median(ours_s)
    return {"new_tokens": new, "trl_s_per_step": round(t, 4), "minirl_s_per_step": round(o, 4),
            "ours_over_trl": round(o / t, 3)}


def main() -> None:
    transformers.logging.set_verbosity_error()
    results = {
        "benchmark": "GRPO step (generate, reward, reference log-probs, backward, optimizer step): 64 completions "
                     "(8 prompts x group 8), prompt 16, beta 0.04, one iteration per batch, random-init GPT-2 layout "
                     "(d=128, 4 layers, 4 heads, vocab 512, fp32); median over timed steps after warm-up",
        "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "trl": trl.__version__},
        "runs": [run(new) for new in (16, 32)],
    }
    out = Path(__file__).parent / "results" / "grpo_cpu.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
