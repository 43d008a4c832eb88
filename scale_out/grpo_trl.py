"""GRPO on the course's arithmetic task in TRL, with the course's reward function unchanged, for the course's
model or any Hugging Face causal LM: the path from lesson 06 to a cluster (lesson 16).

    python scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml --output_dir runs/trl
    torchrun --nproc_per_node 2 scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml \
        --output_dir runs/trl2 --gradient_accumulation_steps 1 --expect_world_size 2
    python scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml --model runs/small_llama --output_dir runs/llama
    python scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml --model runs/small_llama \
        --task_data runs/my_task --verifier runs/my_task/verifier.py:verify --output_dir runs/my_run

`--model course` (the default): rank 0 exports the course's base model and tokenizer to
`<output_dir>/base` (`minirl.lm.export.save`). Otherwise `--model` is a local folder or the name of a
model already in the Hugging Face cache: everything is read offline (HF_HUB_OFFLINE=1 is set here;
download a Hub model first, docs/cluster.md). The task's prompts are rendered for the model
(`arithmetic_task`: a chat model reads them through its chat template) and scored by the course's
verifier, or with `--task_data` and `--verifier`, your own prompts and verifier (`jsonl_task`). Before the
trainer (and vLLM) start, `model_checks` refuses completions that cannot fit the
model's context and a learning rate far from the model's size (read from its weight files' headers).

Held-out pass@1 and pass@`eval_samples` (300 prompts never in the corpus, plain sampling at temperature 1
with Hugging Face `generate`, `max_completion_length` tokens) are measured before and after training,
each rank sampling its share, through TRL's `unwrap_model_for_generation` (it gathers the weights that
DeepSpeed ZeRO-3 partitions). The first evaluation runs when training begins (`on_train_begin`), after
the trainer has placed the model: on its device and in its precision under DeepSpeed, which places it
only then; the random state is put back afterwards, so training draws what it would have drawn. Each
evaluation's device and dtype go into `metrics.json`. The trained model is saved to `<output_dir>/model`
with its tokenizer (under ZeRO-3, its gathered 16-bit weights, as `accelerate_zero3.yaml` asks). A model
given by path is loaded in bf16 when DeepSpeed trains it in bf16 on a GPU that has bf16 (its optimizer
keeps fp32 master weights), in fp32 otherwise (`load_dtype`). TRL scores the policy without position ids, which
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
from transformers import AutoConfig, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer, TrlParser  # noqa: E402
from trl.models.utils import unwrap_model_for_generation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arithmetic_task  # noqa: E402
import model_checks  # noqa: E402
from jsonl_task import JsonlTask  # noqa: E402

import minirl  # noqa: E402
from minirl.lm import export  # noqa: E402


@dataclass
class ScriptArguments:
    model: str = "course"  # "course" (the course's base model, exported), a local folder, or a cached Hub name
    expect_world_size: int = 0  # stop unless the launch gave this many ranks (0: any)
    eval_samples: int = 8  # completions per held-out prompt (pass@1 and pass@eval_samples)
    no_position_fix: bool = False  # leave TRL's training forward numbering GPT-2's left padding (to see why not)
    any_learning_rate: bool = False  # skip the check of the learning rate against the model's size
    task_data: str = ""  # a folder with train.jsonl and test.jsonl of your own prompts (scale_out/jsonl_task.py)
    verifier: str = ""  # with task_data: path/to/file.py:function, verify(reply, answer) -> reward


def load_task(script: ScriptArguments):
    """The course's arithmetic task, or yours from `--task_data` and `--verifier` (both or neither)."""
    if bool(script.task_data) != bool(script.verifier):
        raise ValueError("give --task_data and --verifier together (your prompts and the function that scores "
                         "replies to them), or neither for the course's arithmetic task")
    return JsonlTask(script.task_data, script.verifier) if script.task_data else arithmetic_task


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
                         f"or download a Hub model first (hf download {folder}), as docs/cluster.md shows") from None


def check_config(config: GRPOConfig, script: ScriptArguments, folder: str, tokenizer, chat: bool, task) -> int:
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


def load_dtype(config: GRPOConfig, deepspeed: bool, bf16_device: bool) -> str:
    """The dtype TRL loads the model in, unless `model_init_kwargs` names one: "bfloat16" when DeepSpeed trains
    in bf16 on a device with bf16 (DeepSpeed's optimizer keeps fp32 master weights, so the bf16 copy only
    halves the memory of the load and of the weights), "float32" otherwise. Without DeepSpeed the optimizer
    updates the loaded weights themselves, and a bf16 weight (an 8-bit significand) moves only by steps above
    about 1/256 of its size, while Adam's steps at a rate of 1e-6 are about 1e-6 (a few 1e-5 of a typical
    weight): TRL's bf16 then runs fp32 weights under autocast."""
    return "bfloat16" if config.bf16 and deepspeed and bf16_device else "float32"


def uses_deepspeed(config: GRPOConfig) -> bool:
    """True under `accelerate launch` with a DeepSpeed config (the launcher says so in the environment) or with
    a DeepSpeed file given to the script (`--deepspeed ds.json`)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true" or bool(config.deepspeed)


def bf16_device(config: GRPOConfig) -> bool:
    """True if the training device is a CUDA GPU with bf16."""
    return config.device.type == "cuda" and torch.cuda.is_bf16_supported()


def sample_right(model, tokenizer, lines: list[str], chat: bool, samples: int, max_new_tokens: int,
                 template_kwargs: dict | None = None, task=arithmetic_task) -> list[int]:
    """Right answers out of `samples` completions of each line, in order, drawn by `model` on its device with
    the current random state. Sampling is plain (temperature 1, no top-k, top-p or repetition penalty, as
    TRL trains): none of the model's own generation defaults (Qwen's repetition penalty) leaks in."""
    rows = [q for q in lines for _ in range(samples)]
    texts = task.prompt_texts(tokenizer, rows, chat, template_kwargs)
    batch = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left",
                      add_special_tokens=not chat).to(model.device)
    out = model.eval().generate(**batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0,
                                max_new_tokens=max_new_tokens)
    replies = tokenizer.batch_decode(out[:, batch["input_ids"].size(1):], skip_special_tokens=True)
    right = task.score(rows, replies, chat)
    return [int(sum(right[i:i + samples])) for i in range(0, len(right), samples)]


def placement(model) -> dict[str, str]:
    """Where a model's weights are and in what dtype, as metrics.json records them."""
    weight = next(model.parameters())
    return {"device": str(weight.device), "dtype": str(weight.dtype).removeprefix("torch.")}


@torch.no_grad()
def heldout_right(trainer, tokenizer, lines: list[str], chat: bool, samples: int, seed: int,
                  task) -> tuple[list[int], dict]:
    """Right answers out of `samples` completions of each held-out line, in order, and where the model sampled
    them: each rank samples its share of the lines (seeded `seed` + its rank), every rank gets the whole list.
    The random state is restored afterwards, so training draws the same with or without an evaluation."""
    state = PartialState()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices), state.split_between_processes(lines) as mine, \
            unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                        gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs) as model:
        torch.manual_seed(seed + state.process_index)
        per_prompt = sample_right(model, tokenizer, mine, chat, samples, trainer.args.max_completion_length,
                                  trainer.args.chat_template_kwargs, task)
        where = placement(model)
    return [n for shard in gather_object([per_prompt]) for n in shard], where


class BeforeTraining(TrainerCallback):
    """The held-out evaluation and the weights' digest when training begins, after the trainer has placed the
    model (DeepSpeed places it, on its device and in its dtype, only inside `train()`)."""

    def __init__(self, evaluate):
        self.evaluate, self.result, self.seconds = evaluate, None, 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        start = time.perf_counter()
        self.result = self.evaluate()
        self.seconds = time.perf_counter() - start


def heldout_metrics(right: list[int], samples: int) -> dict[str, float]:
    """pass@1 (mean accuracy), pass@`samples` (a right answer among them), and the share of prompts
    answered right less than half the time (where abstaining would pay, lesson 06)."""
    n = len(right)
    return {"pass@1": round(sum(right) / (n * samples), 4), f"pass@{samples}": round(sum(r > 0 for r in right) / n, 4),
            "below_half": round(sum(2 * r < samples for r in right) / n, 4)}


def digest(model) -> str:
    """A hash of every weight of a model, in fp32: equal for a model and its saved and reloaded copy."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def weights_digest(trainer) -> str:
    """The digest of the trained model, its weights gathered where ZeRO-3 partitions them."""
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                     gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs) as model:
        return digest(model)


def run_metrics(trainer, script: ScriptArguments, task, n_params: int, chat: bool, position_fix: bool, heldout: list[str],
                before: tuple[list[int], dict], after: tuple[list[int], dict], digest_before: str, seconds: float,
                saved: str) -> dict:
    """What metrics.json records: the model, the ranks and their weights, the steps, pass@k before and
    after and where each evaluation ran, reward and KL over training, the time, and where the model is saved."""
    state, config = PartialState(), trainer.args
    ranks, digests = gather_object([state.process_index]), gather_object([weights_digest(trainer)])
    (before, before_at), (after, after_at) = before, after
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    return {
        "model": script.model, "model_type": trainer.model.config.model_type, "parameters": n_params,
        "task": script.task_data or "arithmetic",
        "chat_template": chat, "reward_function": task.reward_function(chat).__name__, "position_fix": position_fix,
        "world_size": state.num_processes, "ranks": ranks, "weights_equal_on_every_rank": len(set(digests)) == 1,
        "weights_changed": digests[0] != digest_before, "weights_digest": digests[0],
        "evaluation_before": before_at, "evaluation_after": after_at, "saved_model": saved,
        "seed": config.seed, "steps": trainer.state.global_step, "max_completion_length": config.max_completion_length,
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
    try:
        task = load_task(script)
    except ValueError as e:
        raise SystemExit(f"grpo_trl.py: {e}") from None
    folder = model_folder(script, config.output_dir)
    tokenizer = load_tokenizer(folder)
    chat = arithmetic_task.is_chat(tokenizer)
    try:
        n_params = check_config(config, script, folder, tokenizer, chat, task)
    except ValueError as e:
        raise SystemExit(f"grpo_trl.py: {e}") from None

    kwargs = dict(config.model_init_kwargs or {})
    kwargs.setdefault("dtype", load_dtype(config, uses_deepspeed(config), bf16_device(config)))
    config.model_init_kwargs = kwargs
    trainer = GRPOTrainer(model=folder, reward_funcs=task.reward_function(chat), args=config,
                          train_dataset=Dataset.from_dict(task.columns("train", chat)), processing_class=tokenizer)
    position_fix = trainer.model.config.model_type == "gpt2" and not script.no_position_fix
    for model in (trainer.model, trainer.ref_model):  # GPT-2's absolute positions under TRL's left padding
        if model is not None and position_fix:
            export.use_mask_positions(model)

    heldout = task.questions("test")
    before = BeforeTraining(lambda: (heldout_right(trainer, tokenizer, heldout, chat, script.eval_samples, config.seed,
                                                   task), weights_digest(trainer)))
    trainer.add_callback(before)
    set_seed(config.seed, device_specific=True)  # each rank's stream as TRL seeded it
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start - before.seconds  # training alone
    after = heldout_right(trainer, tokenizer, heldout, chat, script.eval_samples, config.seed, task)
    saved = str(Path(config.output_dir) / "model")
    trainer.save_model(saved)  # every rank: under ZeRO-3 the weights are gathered to rank 0
    (right_before, digest_before) = before.result
    metrics = run_metrics(trainer, script, task, n_params, chat, position_fix, heldout, right_before, after,
                          digest_before, seconds, saved)
    if state.is_main_process:
        (Path(config.output_dir) / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
        print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))


if __name__ == "__main__":
    main()
