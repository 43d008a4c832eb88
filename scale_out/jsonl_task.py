"""Your own task for scale_out/grpo_trl.py: prompts in two JSON Lines files and a verifier in Python.

    python scale_out/jsonl_task.py runs/my_task      # an example to start from: the files below, filled in
    python scale_out/grpo_trl.py --config scale_out/grpo_cpu.yaml --model runs/small_llama \
        --task_data runs/my_task --verifier runs/my_task/verifier.py:verify --output_dir runs/my_run

The folder holds `train.jsonl` (the prompts training samples from) and `test.jsonl` (the held-out prompts
pass@k is measured on), one JSON object a line, each with a `prompt` (the text the model continues, or
for a chat model the user's message) and an `answer` (a string the verifier gets). The verifier is a
function `verify(reply: str, answer: str) -> float` in any Python file: `reply` is the completion as text
(special tokens dropped; for a chat model, the assistant's message), and the return value is the reward,
1.0 for right and 0.0 for wrong in the course's tasks. The reward TRL is given calls it once per
completion with the row's answer, which TRL passes on as a dataset column.

The example writes the course's arithmetic lines this way, with a verifier that ignores surrounding
whitespace, so the small models of scale_out/small_model.py can be trained on it at once; replace both
files with yours.
"""
import importlib.util
import json
import sys
from pathlib import Path

__all__ = ["JsonlTask", "load_verifier", "write_example"]

EXAMPLE_VERIFIER = '''def verify(reply: str, answer: str) -> float:
    """1 if the reply is the answer, surrounding spaces and newlines aside, else 0."""
    return float(reply.strip() == answer)
'''


def load_verifier(spec: str):
    """`path/to/file.py:function`, imported from the file."""
    path, _, name = spec.rpartition(":")
    if not path or not Path(path).is_file():
        raise ValueError(f"--verifier {spec!r}: give a Python file and a function in it, as path/to/file.py:function")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise ValueError(f"--verifier {spec!r}: {path} has no function {name!r}")
    return getattr(module, name)


class JsonlTask:
    """A task from `folder`'s train.jsonl and test.jsonl, scored by `verify`: the attributes scale_out/grpo_trl.py
    uses, as scale_out/arithmetic_task.py has them for the course's task."""

    def __init__(self, folder: str, verifier: str):
        self.verify = load_verifier(verifier)
        self.rows = {split: self.read(Path(folder) / f"{split}.jsonl") for split in ("train", "test")}
        self.answer = {}
        for row in self.rows["train"] + self.rows["test"]:
            if self.answer.setdefault(row["prompt"], row["answer"]) != row["answer"]:
                raise ValueError(f"the prompt {row['prompt']!r} has two answers in {folder}")

    @staticmethod
    def read(path: Path) -> list[dict]:
        if not path.is_file():
            raise ValueError(f"{path} is missing: a task folder holds train.jsonl and test.jsonl "
                             "(python scale_out/jsonl_task.py FOLDER writes an example)")
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for i, row in enumerate(rows, 1):
            if not isinstance(row.get("prompt"), str) or not isinstance(row.get("answer"), str):
                raise ValueError(f"{path}, line {i}: each row needs a string 'prompt' and a string 'answer'; got {row}")
        return rows

    def questions(self, split: str) -> list[str]:
        return [row["prompt"] for row in self.rows[split]]

    @staticmethod
    def render(prompt: str, chat: bool):
        return [{"role": "user", "content": prompt}] if chat else prompt

    def columns(self, split: str, chat: bool) -> dict[str, list]:
        """TRL's dataset columns: the prompt rendered for the model, and the answer, which TRL hands the reward."""
        return {"prompt": [self.render(r["prompt"], chat) for r in self.rows[split]],
                "answer": [r["answer"] for r in self.rows[split]]}

    def reward_function(self, chat: bool):
        verify = self.verify

        def verifier_reward(prompts, completions, answer, **kwargs) -> list[float]:
            replies = [c[-1]["content"] for c in completions] if chat else completions
            return [float(verify(reply, a)) for reply, a in zip(replies, answer)]
        return verifier_reward

    def prompt_texts(self, tokenizer, lines: list[str], chat: bool, template_kwargs: dict | None = None) -> list[str]:
        if not chat:
            return list(lines)
        return [tokenizer.apply_chat_template(self.render(q, True), add_generation_prompt=True, tokenize=False,
                                              **(template_kwargs or {})) for q in lines]

    def score(self, lines: list[str], replies: list[str], chat: bool) -> list[float]:
        return [float(self.verify(reply, self.answer[line])) for line, reply in zip(lines, replies)]


def write_example(folder: str) -> None:
    """The course's arithmetic lines as a task folder, with a verifier file."""
    from minirl.world import datasets
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [{"prompt": r["prompt"], "answer": str(r["answer"])} for r in datasets.load_prompts("arithmetic", split)]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "verifier.py").write_text(EXAMPLE_VERIFIER)
    print(f"wrote {out}/train.jsonl, test.jsonl and verifier.py: the course's arithmetic lines as your own task")


if __name__ == "__main__":
    write_example(sys.argv[1] if len(sys.argv) > 1 else "runs/my_task")
