"""The language model: the tokenizer, the tiny GPT, sampling, (prompt, response) sequences, the
value, reward and process heads, export to Hugging Face, and what training it costs in memory.

    tokenizer     byte-level BPE, loaded into tiktoken
    model         the tiny GPT, laid out like GPT-2, with a KV cache
    sampling      batched sampling, and the log-probs of sampled completions
    multiturn     episodes in which an environment answers the policy's calls, from the same cache
    sequences     (prompt, response) sequences: tokenize, pad, mask, batch, log pi(response | prompt)
    critic        the value head
    reward_head   the reward head, and the shipped reward models
    process_head  the process reward model: a probability per step, read at each step's separator
    export        to Hugging Face's GPT-2 classes and a fast tokenizer, for TRL
    memory        training memory by model size and precision
"""
from . import critic, export, memory, model, multiturn, process_head, reward_head, sampling, sequences, tokenizer

__all__ = ["critic", "export", "memory", "model", "multiturn", "process_head", "reward_head", "sampling", "sequences", "tokenizer"]
