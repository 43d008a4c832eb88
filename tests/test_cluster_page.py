"""docs/cluster.md, the practitioner's page: its CPU commands run as written (slow), every GPU command is read
by its tool's own parser (accelerate launch, the script's TRL arguments, trl vllm-serve) with the global batch
kept at 128 completions, the two-node Slurm script's launch line likewise, and its tables are the calculator's
output. Also scale_out/jsonl_task.py, the recipe for a task of one's own: its files, its verifier and its errors.
"""
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]
SCALE_OUT = ROOT / "scale_out"
PAGE = ROOT / "docs" / "cluster.md"
sys.path.insert(0, str(SCALE_OUT))
GPU_ONLY = ["--bf16", "false", "--use_cpu", "true"]  # GRPOConfig's hardware checks, made to pass on this machine
SETUP = ("python3.11 -m venv", "export HF_HOME=", "hf download", "sbatch ", ". .venv-verl/bin/activate",
         "bash scale_out/verl_grpo.sh", "python scale_out/verl_data.py runs/verl_data && bash")  # not parsed here


def blocks() -> list[list[str]]:
    """Each ```bash block of the page as its commands: continuation lines joined, comments dropped."""
    out = []
    for body in re.findall(r"```bash\n(.*?)```", PAGE.read_text(), re.S):
        joined = body.replace("\\\n", " ")
        out.append([line for line in joined.splitlines() if line.strip()])
    return out


def cpu_commands() -> list[str]:
    return [c for b in blocks() if b[0].startswith("# on a CPU") for c in b[1:]]


def gpu_commands() -> list[str]:
    return [c for b in blocks() if not b[0].startswith("# on a CPU") for c in b if not c.startswith("#")]


@pytest.mark.slow
def test_the_pages_cpu_commands_run_as_written(tmp_path):
    commands = cpu_commands()
    assert len(commands) == 7  # in order, in one folder: section 8 trains section 1's small Llama
    for command in commands:
        args = shlex.split(command.replace("runs/", f"{tmp_path}/runs/"))
        assert args[0] == "python"
        done = subprocess.run([sys.executable, *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stderr[-3000:])
    llama = json.loads((tmp_path / "runs" / "llama" / "metrics.json").read_text())
    own = json.loads((tmp_path / "runs" / "my_run" / "metrics.json").read_text())
    assert (llama["steps"], own["steps"], own["reward_function"]) == (4, 2, "verifier_reward")
    assert own["task"] == f"{tmp_path}/runs/my_task" and (tmp_path / "runs" / "my_run" / "model" / "config.json").exists()
    assert (tmp_path / "runs" / "verl_data" / "train.parquet").exists()


def launch_parts(command: str):
    """accelerate's parse of an `accelerate launch` line (environment variables in front dropped)."""
    from accelerate.commands.launch import launch_command_parser
    args = shlex.split(command)
    args = args[args.index("launch") + 1:]
    return launch_command_parser().parse_args(args)


def script_config(script_args: list[str]):
    from trl import GRPOConfig, TrlParser

    from grpo_trl import ScriptArguments
    return TrlParser((GRPOConfig, ScriptArguments)).parse_args_and_config(script_args + GPU_ONLY)


def check_launch(command: str) -> int:
    """The launch line's config file read by accelerate's class, the script's arguments by TRL's parser, and
    the global batch: 128 completions over the ranks the launch gives, which --expect_world_size names."""
    from accelerate.commands.config.config_args import ClusterConfig
    launch = launch_parts(command)
    cluster = ClusterConfig.from_yaml_file(str(ROOT / launch.config_file))
    assert launch.training_script == "scale_out/grpo_trl.py"
    config, script = script_config(launch.training_script_args)
    ranks = launch.num_processes or cluster.num_processes
    assert script.expect_world_size == ranks
    assert config.per_device_train_batch_size * ranks * config.gradient_accumulation_steps == 128
    assert cluster.deepspeed_config["gradient_accumulation_steps"] == config.gradient_accumulation_steps
    return ranks


def test_the_pages_gpu_commands_parse_and_keep_the_global_batch():
    from trl.scripts.vllm_serve import make_parser
    seen = {"launch": [], "script": 0, "vllm-serve": 0}
    for command in gpu_commands():
        bare = re.sub(r"^(\w+=\S+ )+", "", command).removesuffix(" &")
        if bare.startswith("accelerate launch"):
            seen["launch"].append(check_launch(bare))
        elif bare.startswith("python scale_out/grpo_trl.py"):
            config, script = script_config(shlex.split(bare)[2:])
            assert script.expect_world_size == 1 and config.gradient_accumulation_steps * config.per_device_train_batch_size == 128
            seen["script"] += 1
        elif bare.startswith("trl vllm-serve"):
            served, _ = make_parser().parse_args_and_config(shlex.split(bare)[2:], return_remaining_strings=True)
            config, script = script_config(["--config", "scale_out/grpo_vllm.yaml", "--output_dir", "unused"])
            assert (served.model, served.max_model_len) == (script.model, config.vllm_max_model_length)
            seen["vllm-serve"] += 1
        else:
            assert bare.startswith(SETUP), f"a command the page gives that no test reads: {command}"
    assert seen == {"launch": [8, 4], "script": 1, "vllm-serve": 1}


def test_the_two_node_slurm_script_launches_16_ranks_as_the_page_says():
    text = (SCALE_OUT / "slurm_2nodes.sbatch").read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gres=gpu:8" in text
    inner = re.search(r"srun bash -c '(.*?)'", text, re.S).group(1).replace("\\\n", " ")
    assert "$SLURM_NODEID" in inner  # expanded on each node: inside single quotes
    on_node_1 = inner.replace("$SLURM_NODEID", "1").replace("$MAIN_NODE", "node-a")
    launch = launch_parts(on_node_1)
    assert (launch.machine_rank, launch.main_process_ip) == (1, "node-a")
    assert check_launch(on_node_1) == 16
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser
    cluster = ClusterConfig.from_yaml_file(str(SCALE_OUT / "accelerate_zero3_2nodes.yaml"))
    assert (cluster.num_machines, cluster.deepspeed_config["deepspeed_multinode_launcher"]) == (2, "standard")
    launcher = {a.dest for a in launch_command_parser()._actions}
    assert set(cluster.deepspeed_config) <= launcher  # accelerate launch ignores a nested key it lacks


def test_the_pages_tables_are_the_calculators_and_its_shapes_the_models_counts():
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    import sizes
    page = PAGE.read_text()
    assert sizes.memory_table() in page and sizes.time_table() in page
    for name, (hidden, inter, layers, heads, kv, vocab, tied) in sizes.QWEN25.items():
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(Qwen2Config(
                hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, vocab_size=vocab, tie_word_embeddings=tied))
        assert sizes.parameters(hidden, inter, layers, heads, kv, vocab, tied) == sum(p.numel() for p in model.parameters())
    published = [0.49, 1.54, 3.09, 7.61, 14.7]  # the model cards' counts, in billions
    for shape, billions in zip(sizes.QWEN25.values(), published):
        assert abs(sizes.parameters(*shape) / 1e9 - billions) < 0.01 * billions


# ---------------------------------------------------------------- a task of one's own
def test_a_jsonl_task_scores_with_its_verifier_and_hands_trl_the_answer(tmp_path):
    from jsonl_task import JsonlTask, write_example

    from minirl.world.rewards import arithmetic_reward
    write_example(str(tmp_path))
    task = JsonlTask(str(tmp_path), f"{tmp_path}/verifier.py:verify")
    lines = task.questions("test")
    assert len(task.questions("train")) == 2000 and len(lines) == 300
    answers = task.columns("test", chat=False)["answer"]
    replies = [f" {a}" for a in answers[:20]] + [f" {int(a) + 1}" for a in answers[20:40]] + ["banana"] * 20
    assert task.score(lines[:60], replies, chat=False) == arithmetic_reward(lines[:60], replies)  # the course's verdicts
    reward = task.reward_function(chat=False)
    assert reward(lines[:60], replies, answer=answers[:60]) == task.score(lines[:60], replies, chat=False)
    chat = task.reward_function(chat=True)
    messages = [[{"role": "assistant", "content": r}] for r in replies]
    assert chat(None, messages, answer=answers[:60]) == task.score(lines[:60], replies, chat=True)
    assert task.columns("train", chat=True)["prompt"][0] == [{"role": "user", "content": task.questions("train")[0]}]


def test_a_jsonl_task_refuses_what_it_cannot_read(tmp_path):
    from jsonl_task import JsonlTask, write_example
    write_example(str(tmp_path))
    verifier = f"{tmp_path}/verifier.py:verify"
    with pytest.raises(ValueError, match="no function 'check'"):
        JsonlTask(str(tmp_path), f"{tmp_path}/verifier.py:check")
    with pytest.raises(ValueError, match="path/to/file.py:function"):
        JsonlTask(str(tmp_path), "verify")
    (tmp_path / "test.jsonl").write_text(json.dumps({"prompt": "q: 1+1= a:", "answer": 2}) + "\n")
    with pytest.raises(ValueError, match="test.jsonl, line 1: each row needs a string 'prompt' and a string 'answer'"):
        JsonlTask(str(tmp_path), verifier)
    first = json.loads((tmp_path / "train.jsonl").read_text().splitlines()[0])
    (tmp_path / "test.jsonl").write_text(json.dumps({"prompt": first["prompt"], "answer": "0"}) + "\n")
    with pytest.raises(ValueError, match="has two answers"):
        JsonlTask(str(tmp_path), verifier)
    (tmp_path / "test.jsonl").unlink()
    with pytest.raises(ValueError, match="test.jsonl is missing.*writes an example"):
        JsonlTask(str(tmp_path), verifier)


@pytest.mark.slow
def test_the_script_wants_task_data_and_verifier_together(tmp_path):
    done = subprocess.run([sys.executable, str(SCALE_OUT / "grpo_trl.py"), "--config", str(SCALE_OUT / "grpo_cpu.yaml"),
                           "--output_dir", str(tmp_path), "--task_data", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0 and "give --task_data and --verifier together" in done.stderr
