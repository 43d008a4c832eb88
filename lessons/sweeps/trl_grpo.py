"""Lesson 16's recorded TRL runs: scale_out/grpo_trl.py on six seeds as one process, as two
torchrun ranks, and as one process without the position fix. Recorded command (about 10 min on 2 cores):

    python lessons/sweeps/trl_grpo.py

Each run is the script's own command line (scale_out/grpo_cpu.yaml: 60 steps of 128 completions),
one after another. Rows go to trl_grpo.csv (the script's metrics.json, one row per run) and the
per-step reward and KL to trl_grpo_steps.csv.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
SEEDS = (0, 1, 2, 3, 4, 5)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
VARIANTS = {  # name: (launcher, extra arguments)
    "one_process": ([sys.executable], []),
    "two_ranks": (TORCHRUN, ["--gradient_accumulation_steps", "1", "--expect_world_size", "2"]),
    "no_position_fix": ([sys.executable], ["--no_position_fix"]),
}
COLUMNS = ("variant", "seed", "world_size", "steps", "completions_per_step", "pass@1_before", "pass@1_after",
           "pass@8_before", "pass@8_after", "below_half_before", "below_half_after", "kl_max",
           "reward_first_5_steps", "reward_last_5_steps", "weights_equal_on_every_rank", "train_seconds",
           "seconds_per_step", "threads_per_rank")


def run(variant: str, seed: int) -> dict:
    launcher, extra = VARIANTS[variant]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([*launcher, str(ROOT / "scale_out" / "grpo_trl.py"), "--config", str(ROOT / "scale_out" / "grpo_cpu.yaml"),
                        "--output_dir", out, "--seed", str(seed), *extra], cwd=ROOT, check=True, capture_output=True)
        return {"variant": variant, **json.loads((Path(out) / "metrics.json").read_text())}


def main() -> None:
    results = [run(v, s) for v in VARIANTS for s in SEEDS]
    with open(HERE / "trl_grpo.csv", "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)
    with open(HERE / "trl_grpo_steps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ("variant", "seed", "step", "reward", "kl"))
        w.writeheader()
        w.writerows({"variant": r["variant"], "seed": r["seed"], **h} for r in results for h in r["history"])
    for r in results:
        print({k: r[k] for k in COLUMNS})


if __name__ == "__main__":
    main()
