"""Batched sampling with a KV cache, and scoring of the sampled completions.

`sample` (text in, `Rollout` out) sits on `sample_tokens` (token ids in). The engine:

1. left-pads the prompts into one batch and prefills the cache once per prompt;
2. for group sampling, copies each prompt's cache to its `group_size` rows (a real copy);
3. decodes one token per step for every row, from softmax(logits / temperature) restricted to
   the top k, with an explicit `torch.Generator`;
4. stops a row at EOS and the batch when every row has stopped or `max_new_tokens` is reached.

RL tensors follow the course conventions: completion-only, (B, T) over generated positions;
`mask` is 1 on generated tokens up to and including EOS and 0 on the padding after it;
`logprobs` are log-probabilities of the sampled tokens under the distribution actually sampled
from (temperature and top-k applied; 0 at temperature 0, where sampling is a point mass).
"""
from __future__ import annotations

from dataclasses import dataclass

import tiktoken
import torch

from ..core import validate
from .model import GPT, KVCache
from .tokenizer import PAD, load_tokenizer

__all__ = ["Rollout", "positions_from_mask", "left_pad", "sampling_logprobs", "inverse_cdf_sample", "sample_tokens",
           "completion_mask", "sample", "completion_hidden", "completion_logits", "completion_logprobs"]


@dataclass
class Rollout:
    prompt_tokens: torch.Tensor  # (B, P) left-padded prompt ids, one row per completion
    prompt_mask: torch.Tensor  # (B, P) 1 on real prompt tokens, 0 on left padding
    tokens: torch.Tensor  # (B, T) completion ids; pad id after EOS
    logprobs: torch.Tensor  # (B, T) log-prob of each sampled token; 0 where mask is 0
    mask: torch.Tensor  # (B, T) float: 1 up to and including EOS, 0 after
    truncated: torch.Tensor  # (B,) bool: True if the row hit max_new_tokens before EOS
    group_size: int = 1
    prompts: list[str] | None = None  # (B,) prompt text per row (repeated group_size times)
    texts: list[str] | None = None  # (B,) completion text per row, without EOS
    # (B, T) float: 1 where the policy wrote the token, 0 where an environment did (`multiturn`)
    # and after EOS; None: the policy wrote every token
    action_mask: torch.Tensor | None = None
    # (B, T) float: the environment's reward for each call, on the policy's token that ended it
    env_rewards: torch.Tensor | None = None

    @property
    def policy_mask(self) -> torch.Tensor:
        """(B, T) the tokens the policy wrote, the ones a policy loss and a KL penalty count: `mask`,
        less the environment's tokens in a multi-turn rollout (`action_mask`)."""
        return self.mask if self.action_mask is None else self.action_mask

    def select(self, rows) -> "Rollout":
        """The rollout restricted to `rows` (a minibatch); group_size becomes 1.

        rows: row indices (a list or 1-D integer tensor) or a boolean mask over the B rows.
        """
        rows, B = torch.as_tensor(rows), self.tokens.size(0)
        if rows.numel() == 0:
            rows = rows.long()  # [] becomes a float tensor
        if rows.dtype == torch.bool:
            if rows.shape != (B,):
                raise ValueError(f"a boolean row mask needs shape {(B,)}, got {tuple(rows.shape)}")
            rows = rows.nonzero().squeeze(1)
        elif rows.dim() != 1 or rows.is_floating_point() or rows.dtype == torch.uint8:
            raise TypeError(f"rows must be 1-D integer indices or a boolean mask, got {rows.dtype} of shape "
                            f"{tuple(rows.shape)} (for a 0/1 mask use .bool())")
        elif rows.numel() and not -B <= int(rows.min()) <= int(rows.max()) < B:
            raise IndexError(f"row indices must lie in [-{B}, {B}), the rollout's rows; got [{int(rows.min())}, "
                             f"{int(rows.max())}]")
        idx = rows.tolist()
        return Rollout(self.prompt_tokens[rows], self.prompt_mask[rows], self.tokens[rows], self.logprobs[rows],
                       self.mask[rows], self.truncated[rows], 1,
                       None if self.prompts is None else [self.prompts[i] for i in idx],
                       None if self.texts is None else [self.texts[i] for i in idx],
                       None if self.action_mask is None else self.action_mask[rows],
                       None if self.env_rewards is None else self.env_rewards[rows])

    def sequences(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Prompt + completion as one batch: ids (B, P+T), key_mask (B, P+T), positions (B, P+T)."""
        ids = torch.cat([self.prompt_tokens, self.tokens], dim=1)
        key_mask = torch.cat([self.prompt_mask, torch.ones_like(self.mask)], dim=1)
        return ids, key_mask, positions_from_mask(key_mask)


def positions_from_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded rows: 0 at each row's first real token (padding gets 0)."""
    return (key_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def left_pad(prompts: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> left-padded ids (N, P) and mask (N, P)."""
    if len(prompts) == 0:
        raise ValueError("no prompts given: pass a list with at least one prompt")
    if not all(isinstance(p, (list, tuple)) and all(isinstance(t, int) for t in p) for p in prompts):
        raise TypeError("prompts must be a list of token-id lists, one per prompt, e.g. [[12, 7, 3]]")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (an empty prompt has nothing to condition on)")
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad, dtype=torch.long, device=device)
    mask = torch.zeros((len(prompts), P), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        ids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long, device=device)
        mask[i, P - len(p) :] = 1
    return ids, mask


def sampling_logprobs(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """Log-probabilities (..., V) of the distribution sampled from: softmax(logits / T) on the top k."""
    if not temperature > 0:
        raise ValueError(f"sampling_logprobs needs temperature > 0 (temperature 0 is greedy), got {temperature}")
    if temperature != 1.0:
        logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.log_softmax(logits.float(), dim=-1)


def next_token(logits: torch.Tensor, temperature: float, top_k: int | None, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from logits (B, V); returns tokens (B,) and their log-probs (B,)."""
    if temperature == 0:
        return logits.argmax(dim=-1), torch.zeros(logits.size(0), device=logits.device)
    logp = sampling_logprobs(logits, temperature, top_k)
    tokens = inverse_cdf_sample(logp.exp(), generator)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def inverse_cdf_sample(probs: torch.Tensor, generator) -> torch.Tensor:
    """One draw per row of probs (B, V) from a single uniform number per row.

    Token i is chosen when u * total falls in [cdf[i-1], cdf[i]), so a zero-probability token
    (an empty interval) can never be chosen. `torch.multinomial` draws one random number per
    vocabulary entry instead, which dominates a decoding step on a CPU.
    """
    cdf = probs.cumsum(dim=-1)  # (B, V)
    u = uniform(probs.size(0), generator, probs.device)  # (B, 1)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)


def uniform(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """(n, 1) uniform numbers in [0, 1) on `device`, drawn on the generator's own device and moved.

    A CPU generator (what the trainers pass) thus serves a model on any device, and a seed gives
    the same numbers whatever the device; the tokens can still differ where the logits do.
    """
    if generator is None:
        return torch.rand(n, 1, device=device, dtype=torch.float32)
    u = torch.rand(n, 1, generator=generator, device=generator.device, dtype=torch.float32)
    if u.device.type == "cpu" and device.type == "cuda":  # a pinned, asynchronous copy: no extra wait per step
        return u.pin_memory().to(device, non_blocking=True)
    return u.to(device)


@torch.no_grad()
def sample_tokens(
    model: GPT,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_token_id: int | None,
    pad_token_id: int = 0,
    group_size: int = 1,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Rollout:
    """Sample `group_size` completions of up to `max_new_tokens` tokens for each prompt (token ids).

    With `eos_token_id=None` every row runs to exactly `max_new_tokens`. Rows are ordered
    prompt by prompt: rows [i*G, (i+1)*G) are prompt i's group.
    """
    device = check_options(model, group_size, max_new_tokens, temperature, top_k, generator)
    group_size, max_new_tokens = int(group_size), int(max_new_tokens)
    ids, pmask = left_pad(prompts, pad_token_id, device)
    validate.token_ids("prompt token ids", [t for p in prompts for t in p], model.config.vocab_size)
    validate.token_ids("eos_token_id and pad_token_id", [pad_token_id] + ([] if eos_token_id is None else [eos_token_id]),
                       model.config.vocab_size)
    state = prefill(model, ids, pmask, max_new_tokens, group_size)
    B = ids.size(0) * group_size
    tokens = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(B, max_new_tokens, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,) row has emitted EOS
    T = max_new_tokens
    # 3. decode
    for t in range(max_new_tokens):
        tok, logp = next_token(state.logits, temperature, top_k, generator)
        if eos_token_id is not None:  # rows that already ended get padding
            tok, logp = tok.masked_fill(done, pad_token_id), logp.masked_fill(done, 0.0)
        tokens[:, t], logprobs[:, t] = tok, logp
        if eos_token_id is not None:
            done = done | (tok == eos_token_id)
            if bool(done.all()):
                T = t + 1
                break
        if t + 1 < max_new_tokens:
            state.feed(model, tok)
    tokens, logprobs = tokens[:, :T], logprobs[:, :T]
    mask = completion_mask(tokens, eos_token_id)
    return Rollout(state.ids, state.prompt_mask, tokens, logprobs, mask, truncated=~done, group_size=group_size)


@dataclass
class DecodeState:
    """What decoding carries from step to step: the cache, the logits for the next token (B, V),
    the prompts (B, P) and their mask, each row's key mask (None when no prompt is padded) and
    the position id of its first new token."""
    cache: KVCache
    logits: torch.Tensor  # (B, V)
    ids: torch.Tensor  # (B, P) left-padded prompts, one row per completion
    prompt_mask: torch.Tensor  # (B, P)
    key_mask: torch.Tensor | None  # (B, P + max_new_tokens)
    position: torch.Tensor  # (B,)
    steps: int = 0  # tokens fed after the prompt so far

    def feed(self, model: GPT, tok: torch.Tensor) -> None:
        """Append one token per row (B,) to the cache; the logits then predict the token after it."""
        km = self.key_mask[:, : self.cache.length + 1] if self.key_mask is not None else None
        self.logits = model(tok[:, None], positions=(self.position + self.steps)[:, None], key_mask=km, cache=self.cache)[:, -1]
        self.steps += 1


def check_options(model: GPT, group_size, max_new_tokens, temperature, top_k, generator) -> torch.device:
    """The sampling options every sampler takes, checked; returns the model's device."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a minirl GPT, e.g. minirl.load_model('base'); got {type(model).__name__}")
    validate.integer("group_size", group_size)
    validate.integer("max_new_tokens", max_new_tokens)
    validate.number("temperature", temperature, 0.0)
    if top_k is not None:
        validate.integer("top_k", top_k)
    device = next(model.parameters()).device
    validate.generator_for(generator, device)
    return device


def text_tokenizer(model, prompts, tokenizer) -> tiktoken.Encoding:
    """The tokenizer for text prompts (the course's by default), after checking the prompts are a
    list of strings and the tokenizer fits the model's vocabulary."""
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not a single string")
    if not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompts must be a list of strings (for token ids use minirl.sample_tokens)")
    enc = tokenizer or load_tokenizer()
    if not isinstance(enc, tiktoken.Encoding):
        raise TypeError(f"tokenizer must be a tiktoken.Encoding such as minirl.load_tokenizer(), got {type(enc).__name__}")
    if isinstance(model, GPT) and enc.n_vocab != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {enc.n_vocab} tokens but the model's vocabulary has "
                         f"{model.config.vocab_size}: pass the tokenizer the model was trained with")
    return enc


def prefill(model: GPT, ids: torch.Tensor, pmask: torch.Tensor, max_new_tokens: int, group_size: int) -> DecodeState:
    """1. one forward pass per prompt, filling its cache; 2. each prompt's cache (and its last
    logits) copied to its group's rows."""
    N, P = ids.shape
    if P + max_new_tokens > model.config.n_ctx:
        raise ValueError(
            f"prompt of {P} tokens + max_new_tokens={max_new_tokens} exceeds the context window "
            f"n_ctx={model.config.n_ctx}; shorten the prompt or ask for fewer new tokens"
        )
    ragged = bool((pmask == 0).any())
    cache = KVCache.empty(model.config, N, P + max_new_tokens, device=ids.device, dtype=model.wte.weight.dtype)
    hidden = model.hidden_states(ids, positions=positions_from_mask(pmask), key_mask=pmask if ragged else None, cache=cache)
    logits = model.logits(hidden[:, -1])  # (N, V): only the last position predicts a completion token
    if not bool(torch.isfinite(logits).all()):
        raise FloatingPointError("the model's logits are not finite (NaN or inf): its weights have diverged; "
                                 "reload the model and train with a lower learning rate")
    if group_size > 1:
        cache = cache.repeat_interleave(group_size)
        logits = logits.repeat_interleave(group_size, dim=0)
    ids, pmask = ids.repeat_interleave(group_size, dim=0), pmask.repeat_interleave(group_size, dim=0)
    ones = torch.ones(ids.size(0), max_new_tokens, dtype=torch.long, device=ids.device)
    key_mask = torch.cat([pmask, ones], dim=1) if ragged else None
    return DecodeState(cache, logits, ids, pmask, key_mask, pmask.sum(dim=1))


def completion_mask(tokens: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """(B, T) float mask: 1 on tokens up to and including the first EOS, 0 after it."""
    if eos_token_id is None:
        return torch.ones_like(tokens, dtype=torch.float)
    is_eos = (tokens == eos_token_id).long()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0  # strictly after the first EOS
    return (~after_eos).float()


def sample(
    model: GPT,
    prompts: list[str],
    *,
    max_new_tokens: int,
    group_size: int = 1,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    tokenizer=None,
) -> Rollout:
    """Sample completions for text prompts; returns a `Rollout` with `prompts` and `texts` filled.

    tokenizer: defaults to the course tokenizer; EOS is its `eot_token`, padding its PAD token.
    """
    enc = text_tokenizer(model, prompts, tokenizer)
    eos = enc.eot_token
    rollout = sample_tokens(
        model, enc.encode_ordinary_batch(prompts), max_new_tokens=max_new_tokens, eos_token_id=eos,
        pad_token_id=enc.encode_single_token(PAD), group_size=group_size, temperature=temperature,
        top_k=top_k, generator=generator,
    )
    rollout.prompts = [p for p in prompts for _ in range(group_size)]
    rollout.texts = [decode_completion(enc, row, eos) for row in rollout.tokens.tolist()]
    return rollout


def decode_completion(enc, tokens: list[int], eos: int) -> str:
    """Text of a completion's tokens up to, not including, the first EOS."""
    return enc.decode(tokens[: tokens.index(eos)] if eos in tokens else tokens)


def completion_hidden(model: GPT, rollout: Rollout) -> torch.Tensor:
    """Hidden states (B, T, C) of the state *before* each completion token, from one forward pass
    over prompt + completion (with gradients, if enabled). Position P-1+t holds the prefix that
    chose token t: the policy reads its logits there, and a critic its value.

    With group_size G > 1 the G rows of a group share their prompt, so the prompt is run once per
    group and its keys and values are repeated for the G completions (as the sampler's prefill
    does): the same numbers, and the gradient flows into the shared prompt through all G rows.
    """
    if rollout.group_size > 1:
        return shared_prompt_hidden(model, rollout)
    ids, key_mask, positions = rollout.sequences()
    P = rollout.prompt_tokens.size(1)
    hidden = model.hidden_states(ids[:, :-1], positions=positions[:, :-1], key_mask=key_mask[:, :-1])  # (B, P+T-1, C)
    return hidden[:, P - 1 :]


def shared_prompt_hidden(model: GPT, rollout: Rollout) -> torch.Tensor:
    """`completion_hidden` computing each group's prompt once: (B, T, C)."""
    G, T = rollout.group_size, rollout.tokens.size(1)
    prompt_ids, prompt_mask = rollout.prompt_tokens[::G], rollout.prompt_mask[::G]  # (B/G, P) one row per prompt
    kv: list[torch.Tensor] = []
    prompt_hidden = model.hidden_states(prompt_ids, positions=positions_from_mask(prompt_mask), key_mask=prompt_mask,
                                        record=kv)  # (B/G, P, C)
    first = prompt_hidden[:, -1:].repeat_interleave(G, dim=0)  # (B, 1, C) the state before token 0
    if T == 1:
        return first
    prefix = [x.repeat_interleave(G, dim=1) for x in kv]  # per layer (2, B, n_head, P, head_dim)
    _, key_mask, positions = rollout.sequences()
    P = prompt_ids.size(1)
    rest = model.hidden_states(rollout.tokens[:, :-1], positions=positions[:, P:-1], key_mask=key_mask[:, :-1],
                               prefix=prefix)  # (B, T-1, C)
    return torch.cat([first, rest], dim=1)


def completion_logits(model: GPT, rollout: Rollout) -> torch.Tensor:
    """Logits (B, T, V) that predict each completion token."""
    return model.logits(completion_hidden(model, rollout))


def completion_logprobs(model: GPT, rollout: Rollout, temperature: float = 1.0, top_k: int | None = None) -> torch.Tensor:
    """Log-probs (B, T) of the rollout's completion tokens under `model` (fresh forward pass,
    temperature and top-k as when sampling); 0 where the mask is 0."""
    logp = sampling_logprobs(completion_logits(model, rollout), temperature, top_k)
    chosen = logp.gather(2, rollout.tokens[:, :, None]).squeeze(2)  # (B, T)
    return torch.where(rollout.mask.bool(), chosen, torch.zeros_like(chosen))  # padding may be -inf under top-k
