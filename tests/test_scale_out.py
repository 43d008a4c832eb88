"""The scale-out path (scale_out/, lesson 11): TRL's GRPOTrainer with the course's reward, run as one
process and as two data-parallel ranks (slow), and the cluster configs read by each tool's own
parser, each seen rejecting a planted misspelled key.

- TRL (grpo_cpu.yaml, grpo_vllm.yaml): TrlParser, as the script reads them; GPU-only settings are
  overridden on the command line so that GRPOConfig's own checks run on this machine.
- accelerate (accelerate_zero2/3.yaml): accelerate's ClusterConfig. It checks top-level keys only;
  `accelerate launch` copies each deepspeed_config entry onto its launch argument of that name and
  silently ignores a name it does not have, so those are checked against the launcher's arguments.
- verl (verl_grpo.sh): Hydra composes verl's own ppo_trainer config (from the verl wheel that
  `make install` downloads, not installed: verl pins an older transformers) with the script's
  overrides, as `python -m verl.trainer.main_ppo` does; Hydra refuses a key verl does not have.
"""
import json
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]
SCALE_OUT = ROOT / "scale_out"
sys.path.insert(0, str(SCALE_OUT))
VERL_WHEEL = Path(sys.prefix) / "wheels" / "verl-0.9.1-py3-none-any.whl"


def misspelled(path: Path, old: str, new: str, tmp_path: Path) -> Path:
    text = path.read_text()
    assert old in text
    bad = tmp_path / f"misspelled_{path.name}"
    bad.write_text(text.replace(old, new, 1))
    return bad


def trl_parse(config: Path, *overrides: str):
    from trl import GRPOConfig, TrlParser

    from grpo_trl import ScriptArguments
    return TrlParser((GRPOConfig, ScriptArguments)).parse_args_and_config(
        ["--config", str(config), "--output_dir", "unused", *overrides])


GPU_ONLY = ("--bf16", "false", "--use_cpu", "true")  # the hardware checks GRPOConfig runs, made to pass here


def test_trl_configs_parse_and_refuse_a_misspelled_key(tmp_path):
    cpu, _ = trl_parse(SCALE_OUT / "grpo_cpu.yaml")
    gpu, _ = trl_parse(SCALE_OUT / "grpo_vllm.yaml", *GPU_ONLY)
    assert (cpu.use_vllm, gpu.use_vllm, gpu.vllm_mode) == (False, True, "colocate")
    for cfg, ranks in ((cpu, 1), (gpu, 8)):  # the same global batch: 16 prompts x 8 completions
        assert cfg.per_device_train_batch_size * ranks * cfg.gradient_accumulation_steps == 128
        assert (cfg.num_generations, cfg.beta, cfg.loss_type, cfg.scale_rewards) == (8, 0.04, "grpo", "group")
    bad = misspelled(SCALE_OUT / "grpo_vllm.yaml", "vllm_gpu_memory_utilization:", "vllm_gpu_memory_utilisation:", tmp_path)
    with pytest.raises(ValueError, match="vllm_gpu_memory_utilisation"):
        trl_parse(bad, *GPU_ONLY)


def accelerate_check(path: Path):
    """accelerate's config class on the file, and each deepspeed_config key against `accelerate launch`'s arguments."""
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser

    config = ClusterConfig.from_yaml_file(str(path))
    launch_arguments = {a.dest for a in launch_command_parser()._actions}
    unknown = sorted(set(config.deepspeed_config) - launch_arguments)
    if unknown:
        raise ValueError(f"{path.name}: deepspeed_config keys accelerate launch does not have: {unknown}")
    return config


@pytest.mark.parametrize("stage", [2, 3])
def test_accelerate_deepspeed_configs_parse_and_refuse_misspelled_keys(stage, tmp_path):
    from accelerate.commands.config.config_args import ClusterConfig
    path = SCALE_OUT / f"accelerate_zero{stage}.yaml"
    config = accelerate_check(path)
    assert (config.distributed_type, config.deepspeed_config["zero_stage"], config.num_processes) == ("DEEPSPEED", stage, 8)
    with pytest.raises(ValueError, match="mixed_precison"):  # a top-level key: accelerate's class refuses it
        accelerate_check(misspelled(path, "mixed_precision:", "mixed_precison:", tmp_path))
    nested = misspelled(path, "zero_stage:", "zero_stgae:", tmp_path)
    ClusterConfig.from_yaml_file(str(nested))  # accelerate's class alone lets a nested one through ...
    with pytest.raises(ValueError, match="zero_stgae"):
        accelerate_check(nested)  # ... and the launcher has no such argument


def verl_overrides(script: Path) -> list[str]:
    """The key=value overrides of the `python -m verl.trainer.main_ppo` command in the script."""
    text = script.read_text()
    command = text[text.index("python -m verl.trainer.main_ppo"):].replace("\\\n", " ")
    return [t for t in shlex.split(command) if re.match(r"^[\w.]+=", t)]


def verl_compose(config_dir: Path, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def verl_config_dir(tmp_path_factory):
    pytest.importorskip("hydra", reason="hydra-core is in the dev extra: make install")
    if not VERL_WHEEL.exists():
        pytest.skip(f"verl's wheel is not at {VERL_WHEEL}: make install downloads it")
    out = tmp_path_factory.mktemp("verl")
    with zipfile.ZipFile(VERL_WHEEL) as wheel:
        wheel.extractall(out, [n for n in wheel.namelist() if n.startswith("verl/trainer/config/") and n.endswith(".yaml")])
    return out / "verl" / "trainer" / "config"


def test_verl_overrides_compose_with_verls_config_and_a_misspelled_key_is_refused(verl_config_dir, tmp_path):
    from hydra.errors import ConfigCompositionException
    overrides = verl_overrides(SCALE_OUT / "verl_grpo.sh")
    assert len(overrides) == 30
    cfg = verl_compose(verl_config_dir, overrides)
    assert (cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.name, cfg.actor_rollout_ref.rollout.n) == ("grpo", "vllm", 8)
    assert cfg.reward.custom_reward_function.path == "scale_out/verl_reward.py"
    bad = misspelled(SCALE_OUT / "verl_grpo.sh", "kl_loss_coef=", "kl_loss_coeff=", tmp_path)
    with pytest.raises(ConfigCompositionException, match="kl_loss_coeff"):
        verl_compose(verl_config_dir, verl_overrides(bad))


def test_verl_reward_is_the_course_reward_on_verls_rows():
    from verl_data import verl_rows
    from verl_reward import compute_score

    from minirl.world.rewards import arithmetic_reward
    rows = verl_rows("test")[:50]
    for row in rows:
        right, wrong = f" {row['reward_model']['ground_truth']}", f" {int(row['reward_model']['ground_truth']) + 1}"
        for completion in (right, wrong, " banana"):
            score = compute_score(row["data_source"], completion, row["reward_model"]["ground_truth"], row["extra_info"])
            assert score == arithmetic_reward([row["prompt"][0]["content"]], [completion])[0]
        assert compute_score(row["data_source"], right, None, row["extra_info"]) == 1.0


def run_script(launcher: list[str], out: Path, *args: str) -> subprocess.CompletedProcess:
    command = [*launcher, str(SCALE_OUT / "grpo_trl.py"), "--config", str(SCALE_OUT / "grpo_cpu.yaml"),
               "--output_dir", str(out), *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)


def check_trl_run(done: subprocess.CompletedProcess, out: Path, world_size: int) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert (m["world_size"], m["ranks"], m["steps"], m["completions_per_step"]) == (world_size, list(range(world_size)), 60, 128)
    assert m["weights_equal_on_every_rank"]  # gradients averaged across the ranks
    assert m["pass@1_after"] - m["pass@1_before"] >= 0.10, m  # +0.153 to +0.179 on seeds 0-2, one and two ranks
    assert m["kl_max"] < 10, m  # 0.12-0.80 on those runs; 722 to 6,938 with TRL scoring GPT-2 at shifted positions
    return m


@pytest.mark.slow
def test_trl_grpo_one_process_raises_heldout_pass_at_1(tmp_path):
    check_trl_run(run_script([sys.executable], tmp_path), tmp_path, world_size=1)


@pytest.mark.slow
def test_trl_grpo_two_ranks_with_torchrun(tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    done = run_script(torchrun, tmp_path, "--gradient_accumulation_steps", "1", "--expect_world_size", "2")
    check_trl_run(done, tmp_path, world_size=2)


@pytest.mark.slow
def test_accelerate_cpu_launch_gives_one_rank_and_the_script_says_so(tmp_path):
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2"]
    done = run_script(accelerate, tmp_path, "--max_steps", "1", "--expect_world_size", "2")
    assert done.returncode != 0 and "expected 2 ranks, the launch gave 1" in done.stdout + done.stderr
