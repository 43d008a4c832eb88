"""GRPO on the course's arithmetic task in TRL, with the course's reward function unchanged, for the course's
model or any Hugging Face causal LM: the path from lesson 06 to a cluster (lesson 16).

    python scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml --output_dir runs/trl
    torchrun --nproc_per_node 2 scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml \
        --output_dir runs/trl2 --gradient_accumulation_steps 1 --expect_world_size 2
    python scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml --model runs/small_llama --output_dir runs/llama

`--model course` (the default): rank 0 exports the course's base model and tokenizer to
`<output_dir>/base` (`minirl.lm.export.save`). Otherwise `--model` is a local folder or the name of a
model already in the Hugging Face cache: everything is read offline (HF_HUB_OFFLINE=1 is set here;
download a Hub model first, scale_out/README.md). The task's prompts are rendered for the model
(`arithmetic_task`: a chat model reads them through its chat template) and scored by the course's
verifier. Before the trainer (and vLLM) start, `model_checks` refuses completions that cannot fit the
model's context and a learning rate far from the model's size (read from its weight files' headers).

Held-out pass@1 and pass@`eval_samples` (300 prompts never in the corpus, plain sampling at temperature 1
with Hugging Face `generate`, `max_completion_length` tokens) are measured before and after training,
each rank sampling its share, through TRL's `unwrap_model_for_generation`: it gathers the weights that
DeepSpeed ZeRO-3 partitions, before training and after. TRL scores the policy without position ids, which
shifts GPT-2's absolute positions under left padding: for a GPT-2 model the script makes it number
positions from the mask (`minirl.lm.export.use_mask_positions`) unless told `--no_position_fix`; rotary
models (Llama, Qwen) are unaffected. `<output_dir>/metrics.json` gets the figures, and checks that the
run was data parallel: the ranks seen from inside, and every rank's weights equal after training.

`accelerate launch --cpu --num_processes 2` starts one process on a machine without GPUs; torchrun
starts two, hence `--expect_world_size`, which stops the run if the launch gave another number.
"""
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: never reach for the Hub

import torch  # noqa: E402
from accelerate import PartialState  # noqa: E402
from accelerate.utils import gather_object, set_seed  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoConfig, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer, TrlParser  # noqa: E402
from trl.models.utils import unwrap_model_for_generation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arithmetic_task as task  # noqa: E402
import model_checks  # noqa: E402

import minirl  # noqa: E402
from minirl.lm import export  # noqa: E402


@dataclass
class ScriptArguments:
    model: str = "course"  # "course" (the course's base model, exported), a local folder, or a cached Hub name
    expect_world_size: int = 0  # stop unless the launch gave this many ranks (0: any)
    eval_samples: int = 8  # completions per held-out prompt (pass@1 and pass@eval_samples)
    no_position_fix: bool = False  # leave TRL's training forward numbering GPT-2's left padding (to see why not)
    any_learning_rate: bool = False  # skip the check of the learning rate against the model's size


def model_folder(script: ScriptArguments, output_dir: str) -> str:
    """Where every rank loads the model from: the course's export (rank 0 writes it) or `--model` itself."""
    state = PartialState()
    if script.model != "course":
        return script.model
    folder = Path(output_dir) / "base"
    if state.is_main_process:
        export.save(folder, minirl.load_model("base"))
    state.wait_for_everyone()
    return str(folder)


def load_tokenizer(folder: str):
    """The model's tokenizer, read offline; a Hub name not in the cache is refused with the command that fetches it."""
    try:
        return AutoTokenizer.from_pretrained(folder)
    except OSError as e:
        raise SystemExit(f"cannot read a tokenizer from {folder!r} offline ({e.__class__.__name__}): give a local folder, "
                         f"or download a Hub model first (hf download {folder}), as scale_out/README.md shows") from None


def check_config(config: GRPOConfig, script: ScriptArguments, folder: str, tokenizer, chat: bool) -> int:
    """The lengths against the model's context and the learning rate against its size, before the trainer
    (and vLLM) start; returns the model's parameter count."""
    lines = task.questions("train") + task.questions("test")
    texts = task.prompt_texts(tokenizer, lines, chat, config.chat_template_kwargs)
    longest = max(len(ids) for ids in tokenizer(texts, add_special_tokens=not chat)["input_ids"])
    context = model_checks.context_length(AutoConfig.from_pretrained(folder))
    model_checks.check_lengths(longest, config.max_completion_length, context, folder,
                               config.vllm_max_model_length if config.use_vllm else None)
    n_params = model_checks.parameter_count(folder)
    if not script.any_learning_rate:
        model_checks.check_learning_rate(config.learning_rate, n_params)
    return n_params


@torch.no_grad()
def heldout_right(trainer, tokenizer, lines: list[str], chat: bool, samples: int, seed: int) -> list[int]:
    """Right answers out of `samples` completions of each held-out line, in order: each rank samples its share
    of the lines, every rank gets the whole list. Sampling is plain (temperature 1, no top-k, top-p or
    repetition penalty, as TRL trains): none of the model's own generation defaults (Qwen's repetition
    penalty) leaks in."""
    state = PartialState()
    torch.manual_seed(seed + state.process_index)
    with state.split_between_processes(lines) as mine, \
            unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
        rows = [q for q in mine for _ in range(samples)]
        texts = task.prompt_texts(tokenizer, rows, chat, trainer.args.chat_template_kwargs)
        batch = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left",
                          add_special_tokens=not chat).to(model.device)
        out = model.eval().generate(**batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0,
                                    max_new_tokens=trainer.args.max_completion_length)
        replies = tokenizer.batch_decode(out[:, batch["input_ids"].size(1):], skip_special_tokens=True)
        right = task.score(rows, replies, chat)
    per_prompt = [int(sum(right[i:i + samples])) for i in range(0, len(right), samples)]
    return [n for shard in gather_object([per_prompt]) for n in shard]


def heldout_metrics(right: list[int], samples: int) -> dict[str, float]:
    """pass@1 (mean accuracy), pass@`samples` (a right answer among them), and the share of prompts
    answered right less than half the time (where abstaining would pay, lesson 06)."""
    n = len(right)
    return {"pass@1": round(sum(right) / (n * samples), 4), f"pass@{samples}": round(sum(r > 0 for r in right) / n, 4),
            "below_half": round(sum(2 * r < samples for r in right) / n, 4)}


def weights_digest(trainer) -> str:
    """A hash of every weight, gathered where ZeRO-3 partitions them."""
    h = hashlib.sha256()
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
        for p in model.parameters():
            h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def run_metrics(trainer, script: ScriptArguments, n_params: int, chat: bool, position_fix: bool, heldout: list[str],
                before: list[int], after: list[int], digest_before: str, seconds: float) -> dict:
    """What metrics.json records: the model, the ranks and their weights, the steps, pass@k before and
    after, reward and KL over training, and the time."""
    state, config = PartialState(), trainer.args
    ranks, digests = gather_object([state.process_index]), gather_object([weights_digest(trainer)])
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    return {
        "model": script.model, "model_type": trainer.model.config.model_type, "parameters": n_params,
        "chat_template": chat, "reward_function": task.reward_function(chat).__name__, "position_fix": position_fix,
        "world_size": state.num_processes, "ranks": ranks, "weights_equal_on_every_rank": len(set(digests)) == 1,
        "weights_changed": digests[0] != digest_before,
        "seed": config.seed, "steps": trainer.state.global_step,
        "completions_per_step": config.per_device_train_batch_size * state.num_processes * config.gradient_accumulation_steps,
        "heldout_prompts": len(heldout), "eval_samples": script.eval_samples,
        **{f"{k}_before": v for k, v in heldout_metrics(before, script.eval_samples).items()},
        **{f"{k}_after": v for k, v in heldout_metrics(after, script.eval_samples).items()},
        "reward_first_5_steps": round(sum(e["reward"] for e in logs[:5]) / len(logs[:5]), 4),
        "reward_last_5_steps": round(sum(e["reward"] for e in logs[-5:]) / len(logs[-5:]), 4),
        "kl_max": round(max(e.get("kl", 0.0) for e in logs), 4),
        "train_seconds": round(seconds, 1), "seconds_per_step": round(seconds / trainer.state.global_step, 3),
        "threads_per_rank": torch.get_num_threads(),
        "history": [{"step": e["step"], "reward": round(e["reward"], 4), "kl": round(e.get("kl", 0.0), 4)} for e in logs],
    }


def main():
    config, script = TrlParser((GRPOConfig, ScriptArguments)).parse_args_and_config()
    state = PartialState()
    if script.expect_world_size and state.num_processes != script.expect_world_size:
        raise SystemExit(f"expected {script.expect_world_size} ranks, the launch gave {state.num_processes}")
    folder = model_folder(script, config.output_dir)
    tokenizer = load_tokenizer(folder)
    chat = task.is_chat(tokenizer)
    try:
        n_params = check_config(config, script, folder, tokenizer, chat)
    except ValueError as e:
        raise SystemExit(f"grpo_trl.py: {e}") from None

    trainer = GRPOTrainer(model=folder, reward_funcs=task.reward_function(chat), args=config,
                          train_dataset=Dataset.from_dict(task.columns("train", chat)), processing_class=tokenizer)
    position_fix = trainer.model.config.model_type == "gpt2" and not script.no_position_fix
    for model in (trainer.model, trainer.ref_model):  # GPT-2's absolute positions under TRL's left padding
        if model is not None and position_fix:
            export.use_mask_positions(model)

    heldout = task.questions("test")
    before = heldout_right(trainer, tokenizer, heldout, chat, script.eval_samples, config.seed)
    digest_before = weights_digest(trainer)
    set_seed(config.seed, device_specific=True)  # each rank's stream as TRL seeded it, as if nothing ran before training
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    after = heldout_right(trainer, tokenizer, heldout, chat, script.eval_samples, config.seed)
    metrics = run_metrics(trainer, script, n_params, chat, position_fix, heldout, before, after, digest_before, seconds)
    if state.is_main_process:
        (Path(config.output_dir) / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
        print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))


if __name__ == "__main__":
    main()
