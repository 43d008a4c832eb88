"""GRPO on the course's arithmetic task in TRL, with the course's reward function unchanged: the path
from lesson 06 to a cluster (lesson 11).

    python scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml --output_dir runs/trl
    torchrun --nproc_per_node 2 scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml \
        --output_dir runs/trl2 --gradient_accumulation_steps 1 --expect_world_size 2

Rank 0 exports the base model and the tokenizer to `<output_dir>/base` (`minirl.lm.export.save`);
every rank loads them with `from_pretrained`, offline (HF_HUB_OFFLINE=1 is set here). TRL's
`GRPOTrainer` trains on the arithmetic training prompts with `minirl.world.rewards.arithmetic_reward`.
Held-out pass@1 and pass@8 (300 prompts never in the corpus, `eval_samples` = 8 completions each
at temperature 1, Hugging Face `generate`) are measured before and after, each rank sampling its
share of the prompts. TRL scores the policy without position ids, which shifts GPT-2's absolute positions under
left padding: the script makes the model number positions from the mask
(`minirl.lm.export.use_mask_positions`) unless told `--no_position_fix`. `<output_dir>/metrics.json` gets the figures, and checks that the run was data parallel:
the ranks seen from inside, and every rank's weights equal after training (gradients averaged).

`accelerate launch --cpu --num_processes 2` starts one process on a machine without GPUs; torchrun
starts two, hence `--expect_world_size`, which stops the run if the launch gave another number.
"""
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: never reach for the Hub

import torch  # noqa: E402
from accelerate import PartialState  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer, TrlParser  # noqa: E402

import minirl  # noqa: E402
from minirl.lm import export  # noqa: E402
from minirl.world import datasets, rewards


@dataclass
class ScriptArguments:
    expect_world_size: int = 0  # stop unless the launch gave this many ranks (0: any)
    eval_samples: int = 8  # completions per held-out prompt (pass@1 and pass@eval_samples)
    no_position_fix: bool = False  # leave TRL's training forward numbering the left padding (to see why not)


@torch.no_grad()
def heldout_right(model, tokenizer, prompts: list[str], samples: int, seed: int) -> list[int]:
    """Right answers out of `samples` completions (temperature 1) of each held-out prompt, in order:
    each rank samples its share of the prompts, every rank gets the whole list."""
    state = PartialState()
    torch.manual_seed(seed + state.process_index)
    with state.split_between_processes(prompts) as mine:
        rows = [p for p in mine for _ in range(samples)]
        batch = tokenizer(rows, return_tensors="pt", padding=True, padding_side="left").to(model.device)
        out = model.generate(**batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6)
        right = rewards.arithmetic_reward(rows, tokenizer.batch_decode(out[:, batch["input_ids"].size(1):],
                                                                        skip_special_tokens=True))
    per_prompt = [int(sum(right[i:i + samples])) for i in range(0, len(right), samples)]
    return [n for shard in gather_object([per_prompt]) for n in shard]


def heldout_metrics(right: list[int], samples: int) -> dict[str, float]:
    """pass@1 (mean accuracy), pass@`samples` (a right answer among them), and the share of prompts
    answered right less than half the time (where abstaining would pay, lesson 06)."""
    n = len(right)
    return {"pass@1": round(sum(right) / (n * samples), 4), f"pass@{samples}": round(sum(r > 0 for r in right) / n, 4),
            "below_half": round(sum(2 * r < samples for r in right) / n, 4)}


def weights_digest(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    config, script = TrlParser((GRPOConfig, ScriptArguments)).parse_args_and_config()
    state = PartialState()
    if script.expect_world_size and state.num_processes != script.expect_world_size:
        raise SystemExit(f"expected {script.expect_world_size} ranks, the launch gave {state.num_processes}")
    base = Path(config.output_dir) / "base"
    if state.is_main_process:
        export.save(base, minirl.load_model("base"))
    state.wait_for_everyone()

    tokenizer = AutoTokenizer.from_pretrained(base)
    heldout = [r["prompt"] for r in datasets.load_prompts("arithmetic", "test")]
    train = Dataset.from_dict({"prompt": [r["prompt"] for r in datasets.load_prompts("arithmetic", "train")]})
    before = heldout_right(AutoModelForCausalLM.from_pretrained(base), tokenizer, heldout, script.eval_samples, config.seed)

    trainer = GRPOTrainer(model=str(base), reward_funcs=rewards.arithmetic_reward, args=config, train_dataset=train,
                          processing_class=tokenizer)
    for model in (trainer.model, trainer.ref_model):  # GPT-2's absolute positions under TRL's left padding
        if model is not None and not script.no_position_fix:
            export.use_mask_positions(model)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    model = trainer.model.eval()
    after = heldout_right(model, tokenizer, heldout, script.eval_samples, config.seed)

    ranks, digests = gather_object([state.process_index]), gather_object([weights_digest(model)])
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    metrics = {
        "world_size": state.num_processes, "ranks": ranks, "weights_equal_on_every_rank": len(set(digests)) == 1,
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
    if state.is_main_process:
        (Path(config.output_dir) / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
        print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))


if __name__ == "__main__":
    main()
