"""Checks of a GRPO config against the model it trains, made before the trainer (and vLLM) start.

- **Lengths.** Every prompt plus `max_completion_length` tokens must fit the model's context (and
  vLLM's, when `vllm_max_model_length` is set). Past it, vLLM caps the completion without a word and
  Hugging Face `generate()` on the course's GPT raises `IndexError` at position 64; here the run is
  refused and told the longest completion that fits.
- **Learning rate.** A rate that suits one model can leave another unmoved or wreck it: lesson 06's
  5e-4 is what the course's 1.26M-parameter GPT needs, 1e-6 (TRL's `GRPOConfig` default) is the usual
  rate for full-parameter RL on instruct models of half a billion parameters and more, and 1e-6 on
  the course's GPT, or 5e-4 on such a model, is 500 times off. `typical_learning_rate` draws a
  straight line between those two points on log-log axes (flat outside them) and `check_learning_rate`
  refuses a rate more than `RATE_FACTOR` times away from it. It is a guard against those slips, not a
  tuned rule: `--any_learning_rate` skips it.
"""
import math
from pathlib import Path

__all__ = ["COURSE_RATE", "INSTRUCT_RATE", "RATE_FACTOR", "context_length", "check_lengths",
           "typical_learning_rate", "check_learning_rate", "parameter_count"]

COURSE_RATE = (1_262_848, 5e-4)  # (parameters, rate): the course's GPT, lesson 06 and scale_out/grpo_cpu.yaml
INSTRUCT_RATE = (494_032_768, 1e-6)  # Qwen2.5-0.5B-Instruct's size at TRL's default rate (scale_out/grpo_vllm.yaml)
RATE_FACTOR = 30


def context_length(model_config) -> int:
    """The most positions the model reads: `max_position_embeddings` (Llama, Qwen, ...) or `n_positions` (GPT-2)."""
    for name in ("max_position_embeddings", "n_positions"):
        if getattr(model_config, name, None):
            return int(getattr(model_config, name))
    raise ValueError(f"{type(model_config).__name__} names no context length (neither max_position_embeddings nor "
                     "n_positions): the lengths cannot be checked")


def check_lengths(longest_prompt: int, max_completion_length: int, context: int, model: str,
                  vllm_max_model_length: int | None = None) -> None:
    """Refuse completions that cannot fit after the longest prompt, in the model's context and in vLLM's."""
    for limit, whose in ((context, f"the context of {model}"), (vllm_max_model_length, "vllm_max_model_length")):
        if limit is not None and longest_prompt + max_completion_length > limit:
            raise ValueError(
                f"the longest prompt is {longest_prompt} tokens and max_completion_length is {max_completion_length}: "
                f"{longest_prompt + max_completion_length} positions, more than {limit}, {whose}. Completions are not "
                f"capped silently here: set max_completion_length to at most {limit - longest_prompt}"
                + (" or raise vllm_max_model_length" if limit == vllm_max_model_length else ""))


def typical_learning_rate(n_params: int) -> float:
    """The rate on the log-log line through COURSE_RATE and INSTRUCT_RATE, flat beyond either end."""
    (n0, r0), (n1, r1) = COURSE_RATE, INSTRUCT_RATE
    t = min(max(math.log(n_params / n0) / math.log(n1 / n0), 0.0), 1.0)
    return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))


def check_learning_rate(learning_rate: float, n_params: int) -> None:
    """Refuse a learning rate more than RATE_FACTOR times above or below the typical one for the model's size."""
    typical = typical_learning_rate(n_params)
    if not typical / RATE_FACTOR <= learning_rate <= typical * RATE_FACTOR:
        raise ValueError(
            f"learning_rate {learning_rate:g} is {max(learning_rate / typical, typical / learning_rate):.0f} times "
            f"{'above' if learning_rate > typical else 'below'} {typical:.3g}, the typical rate for "
            f"{n_params / 1e6:,.1f}M parameters (allowed: {typical / RATE_FACTOR:.3g} to {typical * RATE_FACTOR:.3g}). "
            "Set a rate in that range, or pass --any_learning_rate to run it anyway")


def parameter_count(folder: str) -> int:
    """Parameters in a model's safetensors files, read from their headers (nothing is loaded, so the check
    runs before the trainer and vLLM start): a local folder, or a Hub name's snapshot in the cache.
    Tied weights are stored once, as `save_pretrained` writes them."""
    from safetensors import safe_open

    path = Path(folder)
    if not path.is_dir():
        from huggingface_hub import snapshot_download
        path = Path(snapshot_download(folder, local_files_only=True, allow_patterns=["*.safetensors", "*.json"]))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder} has no safetensors files, so its size (and the learning rate) cannot be checked: "
                         "pass --any_learning_rate to run it anyway")
    total = 0
    for file in files:
        with safe_open(str(file), "pt") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return total
