"""Multi-turn sampling: the policy writes, a tool answers, the policy goes on.

An episode starts at a prompt. The policy samples one token per step for every row from the KV
cache, as `sampling.sample_tokens` does. When a row writes the environment's `call_end` token,
the environment reads that row's episode so far and answers with text (and a reward for the
turn). The answer's tokens are fed to the model one per step through the same cache, in place of
that row's samples, and marked as the environment's; then the policy resumes. Nothing already in
the cache is computed again, and no row waits for another: a row being answered is fed its
answer while the others sample.

The answer is encoded on its own and appended as it is: the episode's tokens are never re-encoded
from its text, which could merge tokens across the boundary and change what the policy wrote.

Environment tokens are transitions of the MDP, not actions: the policy did not choose them, so
they carry no log pi (their `logprobs` are 0), and a policy-gradient loss or a KL penalty must
skip them (`Rollout.action_mask` is 0 on them). The environment's reward for a call sits on the
policy's token that ended it (`Rollout.env_rewards`); `turns` and `calls` read the rest from the
masks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..core import validate
from .model import GPT
from .sampling import (Rollout, check_options, completion_mask, decode_completion, left_pad, next_token, prefill,
                       text_tokenizer)
from .tokenizer import PAD

__all__ = ["Reply", "Environment", "sample_episodes", "turns", "calls"]


@dataclass
class Reply:
    """What the environment writes after a call, and the reward it gives that turn."""
    text: str
    reward: float = 0.0

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise TypeError(f"a Reply's text must be a string, got {self.text!r:.60} ({type(self.text).__name__})")
        validate.number("a Reply's reward", self.reward)


class Environment(Protocol):
    """call_end: the text of the one token that ends a call (the environment answers when the
    policy writes it). respond(prompt, episode): the answer to the call that `episode` (the text
    after `prompt` so far, `call_end` last) ends."""
    call_end: str

    def respond(self, prompt: str, episode: str) -> Reply: ...


@torch.no_grad()
def sample_episodes(model: GPT, prompts: list[str], env: Environment, *, max_new_tokens: int, max_calls: int = 1,
                    group_size: int = 1, temperature: float = 1.0, top_k: int | None = None,
                    generator: torch.Generator | None = None, tokenizer=None) -> Rollout:
    """Sample `group_size` episodes per prompt, the environment answering up to `max_calls` calls
    in each. Returns a `Rollout` whose tokens (B, T) hold everything after the prompt, whoever
    wrote it, with `action_mask` and `env_rewards` set. max_new_tokens bounds all tokens after
    the prompt, the environment's included; a row that reaches it before EOS is truncated (an
    answer cut short included). A `call_end` written after the last allowed call, or as the last
    token allowed, is an ordinary token. Rows are ordered prompt by prompt."""
    device = check_options(model, group_size, max_new_tokens, temperature, top_k, generator)
    max_calls = validate.integer("max_calls", max_calls, minimum=0)
    if not isinstance(prompts, (str, list, tuple)):
        raise TypeError(f"prompts must be a list of strings, e.g. ['q: 17+25= a:'], got {type(prompts).__name__}")
    enc = text_tokenizer(model, prompts, tokenizer)
    call_end, eos, pad = call_end_token(env, enc), enc.eot_token, enc.encode_single_token(PAD)
    ids, pmask = left_pad(enc.encode_ordinary_batch(prompts), pad, device)
    state = prefill(model, ids, pmask, max_new_tokens, group_size)
    rows = [p for p in prompts for _ in range(group_size)]
    B = len(rows)
    tokens = torch.full((B, max_new_tokens), pad, dtype=torch.long, device=device)
    logprobs = torch.zeros(B, max_new_tokens, device=device)
    action = torch.zeros(B, max_new_tokens, device=device)
    env_rewards = torch.zeros(B, max_new_tokens, device=device)
    answered = torch.zeros(B, dtype=torch.long, device=device)  # (B,) calls answered so far
    answers: list[list[int]] = [[] for _ in range(B)]  # each row's answer tokens not yet fed
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,) the policy wrote EOS
    T = max_new_tokens
    for t in range(max_new_tokens):
        tok, logp = next_token(state.logits, temperature, top_k, generator)  # (B,) a sample for every row
        acts = ~done
        forced = [b for b in range(B) if answers[b]]
        if forced:
            where = torch.tensor(forced, device=device)
            tok[where] = torch.tensor([answers[b].pop(0) for b in forced], device=device)
            logp[where], acts[where] = 0.0, False
        tok, logp = tok.masked_fill(done, pad), logp.masked_fill(~acts, 0.0)
        tokens[:, t], logprobs[:, t], action[:, t] = tok, logp, acts.float()
        room = t + 1 < max_new_tokens  # an answer needs at least one more step
        for b in ((tok == call_end) & acts & (answered < max_calls) & room).nonzero().flatten().tolist():
            reply = respond(env, rows[b], enc.decode(tokens[b, : t + 1].tolist()))
            answers[b], env_rewards[b, t] = enc.encode_ordinary(reply.text), reply.reward
            answered[b] += 1
        done = done | ((tok == eos) & acts)
        if bool(done.all()):
            T = t + 1
            break
        if t + 1 < max_new_tokens:
            state.feed(model, tok)
    tokens, logprobs, action = tokens[:, :T], logprobs[:, :T], action[:, :T]
    mask = completion_mask(tokens, eos)
    return Rollout(state.ids, state.prompt_mask, tokens, logprobs, mask, truncated=~done, group_size=group_size,
                   prompts=rows, texts=[decode_completion(enc, row, eos) for row in tokens.tolist()],
                   action_mask=action * mask, env_rewards=env_rewards[:, :T])


def environment_tokens(rollout: Rollout) -> torch.Tensor:
    """(B, T) bool: the tokens the environment wrote."""
    if not isinstance(rollout, Rollout):
        raise TypeError(f"rollout must be a minirl Rollout from sample_episodes, got {type(rollout).__name__}")
    if rollout.action_mask is None:
        raise ValueError("this needs a multi-turn rollout, whose action_mask says who wrote each token "
                         "(sample_episodes); a plain rollout's tokens are all the policy's")
    return (rollout.mask - rollout.action_mask).bool()


def after(x: torch.Tensor) -> torch.Tensor:
    """(B, T) x shifted one step right: at t, x at t - 1 (False at 0)."""
    return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)


def calls(rollout: Rollout) -> torch.Tensor:
    """(B,) the calls the environment answered in each episode: its answers' first tokens."""
    env = environment_tokens(rollout)
    return (env & ~after(env)).sum(dim=1)


def turns(rollout: Rollout) -> torch.Tensor:
    """(B, T) the turn of each token: the policy's k-th stretch of writing is turn k (0 first),
    and the environment's answer to the call that ends it is turn k too; -1 after EOS."""
    env = environment_tokens(rollout)  # first: it checks the rollout is a multi-turn one
    resumes = rollout.action_mask.bool() & after(env)  # the policy's first token after an answer
    return resumes.long().cumsum(dim=1).masked_fill(rollout.mask == 0, -1)


def call_end_token(env, enc) -> int:
    """The token id of env.call_end, which must be one token of the tokenizer."""
    if isinstance(env, type):
        raise TypeError(f"env must be an environment object, not the class {env.__name__}: pass {env.__name__}(), "
                        "an instance")
    if not callable(getattr(env, "respond", None)) or not isinstance(getattr(env, "call_end", None), str):
        raise TypeError(f"env must have a call_end string (the token that ends a call) and a method respond(prompt, "
                        f"episode) -> Reply; got {type(env).__name__}")
    ids = enc.encode_ordinary(env.call_end)
    if len(ids) != 1:
        raise ValueError(f"env.call_end must be exactly one token, so that the sampler can see a call end; "
                         f"{env.call_end!r} is {len(ids)} tokens {ids}")
    return ids[0]


def respond(env, prompt: str, episode: str) -> Reply:
    reply = env.respond(prompt, episode)
    if not isinstance(reply, Reply):
        raise TypeError(f"env.respond must return a minirl Reply(text, reward), got {type(reply).__name__}")
    validate.number("the reply's reward", reply.reward)
    if not isinstance(reply.text, str):
        raise TypeError(f"a Reply's text must be a string, got {type(reply.text).__name__}")
    if not reply.text:
        raise ValueError("the environment's answer is empty: answer a call with at least one token (an "
                         "answer is what marks where a turn ends)")
    return reply

