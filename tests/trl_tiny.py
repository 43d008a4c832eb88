"""A tiny Hugging Face world for cross-checks and benchmarks against TRL: a word-level tokenizer
("w0 w1 ..."), a random-init GPT-2 layout, and TRL trainers built on them, all offline.

Used by tests/test_trl_reference.py, benchmarks/grpo_vs_trl.py and benchmarks/dpo_vs_trl.py. TRL,
transformers and datasets are imported lazily so that importing this module never needs them.
"""
from __future__ import annotations

from pathlib import Path

import torch


def word_tokenizer(vocab_size: int):
    """A `PreTrainedTokenizerFast` whose ids 0..vocab_size-3 are the words w0, w1, ...; the last two
    ids are <pad> and <eos>. Text "w5 w9" is ids [5, 9]: no BOS, one token per word."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(vocab_size - 2)} | {"<pad>": vocab_size - 2, "<eos>": vocab_size - 1}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def special_ids(vocab_size: int) -> dict[str, int]:
    """The word tokenizer's EOS and PAD ids, for `to_hf_gpt2(model, **special_ids(vocab_size))`."""
    return {"eos_token_id": vocab_size - 1, "pad_token_id": vocab_size - 2}


def random_prompts(n: int, length: int, vocab_size: int, seed: int = 0) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size - 2, (n, length), generator=g)
    return [" ".join(f"w{i}" for i in row) for row in ids.tolist()]


def trainer(kind: str, model, tokenizer, prompts: list[str], reward_fn, workdir: Path, *, num_generations: int,
            batch_size: int, max_completion_length: int, beta: float, **config):
    """TRL's GRPOTrainer (kind 'grpo') or RLOOTrainer ('rloo'), nothing logged or saved, on CPU
    unless `config` says otherwise (it overrides these defaults: use_cpu=False, bf16=True on a GPU).
    The model is saved under `workdir` first (TRL builds its reference model from the policy's
    path); the caller owns and removes the folder."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    Config, Trainer = {"grpo": (GRPOConfig, GRPOTrainer), "rloo": (RLOOConfig, RLOOTrainer)}[kind]
    path = Path(workdir) / "model"
    model.save_pretrained(path)
    args = Config(**{
        "output_dir": str(Path(workdir) / "output"), "use_cpu": True, "report_to": [], "save_strategy": "no",
        "logging_strategy": "no", "per_device_train_batch_size": batch_size, "num_generations": num_generations,
        "max_completion_length": max_completion_length, "beta": beta, "temperature": 1.0, "bf16": False, "fp16": False,
        "dataloader_num_workers": 0, "disable_tqdm": True, "seed": 0} | config)
    return Trainer(model=str(path), reward_funcs=reward_fn, args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                   processing_class=tokenizer)


def dpo_trainer(model, ref_model, tokenizer, pairs: list[dict], workdir: Path, *, beta: float, batch_size: int,
                loss_type: str = "sigmoid", **config):
    """TRL's DPOTrainer on CPU, nothing logged or saved, on pairs {'prompt', 'chosen', 'rejected'} of
    texts (TRL appends EOS to each response and tokenizes prompt + response; start a response with
    a space). `model` and `ref_model` are instances; ref_model None needs precompute_ref_log_probs=True
    (TRL then scores the pairs with the policy before training; otherwise it would rebuild a reference
    from a saved policy's path). `config` goes to the trainer's config; `workdir` holds its output folder."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    args = DPOConfig(
        output_dir=str(Path(workdir) / "output"), use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", per_device_train_batch_size=batch_size, beta=beta, loss_type=[loss_type], bf16=False,
        fp16=False, dataloader_num_workers=0, disable_tqdm=True, seed=0, **config,
    )
    return DPOTrainer(model=model, ref_model=ref_model, args=args, train_dataset=Dataset.from_list(pairs),
                      processing_class=tokenizer)
