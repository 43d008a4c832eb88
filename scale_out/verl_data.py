"""The arithmetic prompts as verl reads them, for a chat model (scale_out/verl_grpo.sh trains
Qwen2.5-0.5B-Instruct): parquet rows with the prompt as a one-message chat, the instruction and the
course's line as `scale_out/grpo_trl.py` renders them for a chat model (verl applies the tokenizer's
chat template), the data source, the answer as ground truth, and the course's line in `extra_info`
for `scale_out/verl_reward.py`.

    python scale_out/verl_data.py runs/verl_data     # writes train.parquet and test.parquet
"""
import sys
from pathlib import Path

from datasets import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arithmetic_task as task  # noqa: E402

from minirl.world import datasets  # noqa: E402

DATA_SOURCE = "minirl/arithmetic"


def verl_rows(split: str) -> list[dict]:
    return [{"data_source": DATA_SOURCE, "prompt": task.render(r["prompt"], chat=True),
             "reward_model": {"style": "rule", "ground_truth": str(r["answer"])}, "extra_info": {"prompt": r["prompt"]}}
            for r in datasets.load_prompts("arithmetic", split)]


def main(folder: str) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        Dataset.from_list(verl_rows(split)).to_parquet(str(Path(folder) / f"{split}.parquet"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/verl_data")
