"""A second architecture for the scale-out path: a small Llama- or Qwen2-layout causal LM on the course's
tokenizer, randomly initialised, then taught the arithmetic task by a few hundred steps of supervised
fine-tuning on the training lines and their answers, and written where `from_pretrained` reads it.

It takes seconds on a CPU and nothing from the Hub. The tests train it with `scale_out/grpo_trl.py
--model` so that nothing on that path is GPT-2's alone: rotary positions, RMSNorm, a gated MLP, untied
embeddings (Llama) or grouped-query attention with tied ones (Qwen2), and with `--chat` a chat
template of its own ("user: ...", "assistant:"), so that the conversational path runs too.

    python scale_out/small_model.py runs/small_llama --layout llama
    python scale_out/small_model.py runs/small_qwen2 --layout qwen2 --chat
"""
import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arithmetic_task as task  # noqa: E402

from minirl.lm import export  # noqa: E402
from minirl.lm.sequences import right_pad  # noqa: E402
from minirl.world import datasets  # noqa: E402

LAYOUTS = {"llama": (LlamaConfig, LlamaForCausalLM, {"num_key_value_heads": 4, "tie_word_embeddings": False}),
           "qwen2": (Qwen2Config, Qwen2ForCausalLM, {"num_key_value_heads": 2, "tie_word_embeddings": True})}
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def build(layout: str, context: int, vocab_size: int):
    """A random model of the layout: 2 layers of width 64, 4 query heads, the course's EOS and PAD ids."""
    config_class, model_class, extra = LAYOUTS[layout]
    eos, pad = export.course_special_ids()
    config = config_class(vocab_size=vocab_size, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                          num_attention_heads=4, max_position_embeddings=context, bos_token_id=eos,
                          eos_token_id=eos, pad_token_id=pad, **extra)
    return model_class(config)


def tokenizer_for(chat: bool):
    """The course's tokenizer in Hugging Face's format, with a chat template of its own when `chat`."""
    tokenizer = export.to_hf_tokenizer()
    if chat:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tokenized_lines(tokenizer, chat: bool) -> list[tuple[list[int], list[int]]]:
    """Every training line as (prompt ids, ' answer' ids + EOS), tokenized once."""
    rows = datasets.load_prompts("arithmetic", "train")
    prompts = tokenizer(task.prompt_texts(tokenizer, [r["prompt"] for r in rows], chat), add_special_tokens=False)["input_ids"]
    answers = tokenizer([f" {r['answer']}" for r in rows], add_special_tokens=False)["input_ids"]
    return [(p, a + [tokenizer.eos_token_id]) for p, a in zip(prompts, answers)]


def sft_batch(lines: list[tuple[list[int], list[int]]], pad_id: int) -> dict:
    """Right-padded (prompt, target) sequences, the loss on the target (answer and EOS) only."""
    return {"input_ids": right_pad([p + t for p, t in lines], pad_id),
            "attention_mask": right_pad([[1] * (len(p) + len(t)) for p, t in lines], 0),
            "labels": right_pad([[-100] * len(p) + t for p, t in lines], -100)}


def teach(model, tokenizer, chat: bool, steps: int, batch_size: int = 64, lr: float = 3e-3, seed: int = 0) -> float:
    """`steps` AdamW steps of next-token loss on random batches of the training lines; the last loss."""
    lines = tokenized_lines(tokenizer, chat)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        pick = torch.randint(len(lines), (batch_size,), generator=generator).tolist()
        loss = model(**sft_batch([lines[i] for i in pick], tokenizer.pad_token_id)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python scale_out/small_model.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="llama")
    parser.add_argument("--chat", action="store_true", help="give the tokenizer a chat template of its own")
    parser.add_argument("--steps", type=int, default=300, help="supervised steps on the arithmetic lines")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    tokenizer = tokenizer_for(args.chat)
    model = build(args.layout, context=128 if args.chat else 64, vocab_size=len(tokenizer))
    loss = teach(model, tokenizer, args.chat, args.steps, seed=args.seed)
    model.eval().save_pretrained(args.folder)
    tokenizer.save_pretrained(args.folder)
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.layout}{' with a chat template' if args.chat else ''}: {n:,} parameters, "
          f"last supervised loss {loss:.3f} after {args.steps} steps, written to {args.folder}")


if __name__ == "__main__":
    main()
