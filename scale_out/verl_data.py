"""The arithmetic prompts as verl reads them: parquet rows with the prompt as a one-message chat (verl
always applies the tokenizer's chat template; the exported tokenizer's template returns the text
unchanged), the data source, the answer as ground truth, and the raw prompt in `extra_info` for
`scale_out/verl_reward.py`.

    python scale_out/verl_data.py runs/verl_data     # writes train.parquet and test.parquet
"""
import sys
from pathlib import Path

from datasets import Dataset

from minirl.world import datasets

DATA_SOURCE = "minirl/arithmetic"


def verl_rows(split: str) -> list[dict]:
    return [{"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": r["prompt"]}],
             "reward_model": {"style": "rule", "ground_truth": str(r["answer"])}, "extra_info": {"prompt": r["prompt"]}}
            for r in datasets.load_prompts("arithmetic", split)]


def main(folder: str) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        Dataset.from_list(verl_rows(split)).to_parquet(str(Path(folder) / f"{split}.parquet"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/verl_data")
