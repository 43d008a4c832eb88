"""RLHF on the orders world: what lessons 09 and 10 measure at every stage, against the hidden truth.

Every stage (base, SFT, RLHF, best-of-N, RAFT) is judged the same way on fresh samples of the
prompt 'order:' at temperature 1 (`policy_report`):

    gold        the hidden annotator's utility (-2 for text that is not a valid order)
    valid       the share of samples that parse as an order
    kl          the course's one KL estimator: the mean over the samples of
                sum_t (log pi(a_t|s_t) - log pi_ref(a_t|s_t)), an unbiased estimate of the
                sequence-level KL(pi || pi_ref); `kl_se` is its standard error
    proxy       the reward model's normalized score, when one is given
    length, repetition, truncated   what PPO-max (Zheng et al., 2023, as presented in Hao Sun's
                slides "Reinforcement Learning in the Era of LLMs") watches for hacking: tokens
                per completion, the share of completions repeating a word (no valid order
                does), and the share cut at the length limit

`win_rate` compares two policies under the gold Bradley-Terry model, exactly over their samples;
`gold_pairs` labels a policy's own samples with that model (iterated RLHF's fresh preference data).
`valid_order_distribution` gives a policy's exact probability of each of the 1,008 valid orders,
so anything built on it (the KL-regularized optimum, best-of-N) can be computed exactly inside
the valid support.
"""
from __future__ import annotations

import math
import random

import torch

from ..core import validate
from ..core.kl import kl_k1
from ..core.ops import masked_sum
from ..lm.model import GPT
from ..lm.reward_head import normalize
from ..lm.sampling import Rollout, completion_logprobs, sample
from ..lm.sequences import pair_tokens, sequence_ids, tokenized_logprobs
from ..lm.tokenizer import PAD, load_tokenizer
from ..world import generate, grammar, rewards
from ..world.tasks import RewardFn, reward_scores
from .reward_model import fit, pair_step_loss

__all__ = ["PROMPT", "MAX_NEW_TOKENS", "order_samples", "sequence_kl", "repeats_a_word", "policy_report",
           "win_rate", "gold_pairs", "valid_order_distribution", "refit_on_own_samples"]

PROMPT = "order:"
MAX_NEW_TOKENS = grammar.MAX_NEW_TOKENS["orders"]


def order_samples(policy: GPT, samples: int, seed: int, tokenizer=None) -> Rollout:
    """`samples` completions of 'order:' from `policy` at temperature 1, seeded."""
    g = torch.Generator().manual_seed(seed)
    return sample(policy, [PROMPT], max_new_tokens=MAX_NEW_TOKENS, group_size=samples, generator=g,
                  tokenizer=tokenizer or load_tokenizer())


def check_reference(reference: GPT, device: torch.device, policy: GPT | None = None,
                    where: str = "the policy") -> None:
    """Check `reference` is a GPT on `device` (that of `where`), and, given `policy`, not the policy
    object itself: a trainer moves its policy, and a reference that moves with it reads KL 0 forever.
    A model on another device is refused, not moved: moving it behind the caller's back would copy
    it, and the caller's own object would stay where it was."""
    if not isinstance(reference, GPT):
        frozen = ", or None for a frozen copy of the policy" if policy is not None else ""
        raise TypeError(f"reference must be a minirl GPT, e.g. minirl.load_model('sft'){frozen}; got "
                        f"{type(reference).__name__}")
    if reference is policy:
        raise ValueError("reference is the policy itself: training moves both together, so every KL to it reads 0. "
                         "Pass reference=None (a frozen copy of the policy at the start) or another model, such as "
                         "copy.deepcopy(policy) taken before training")
    ref_device = next(reference.parameters()).device
    if ref_device != device:
        raise ValueError(f"reference is on {ref_device} but {where} on {device}: move it first with "
                         f"reference.to({str(device)!r})")


def sequence_kl(rollout: Rollout, reference: GPT) -> torch.Tensor:
    """(B,) sum over each completion's tokens of log pi - log pi_ref: one sample of KL(pi || pi_ref)
    each (the rollout's log-probs are the sampling policy's own, at temperature 1). The reference
    must be on the rollout's device."""
    check_reference(reference, rollout.logprobs.device, where="the rollout's log-probs (the policy's device)")
    with torch.no_grad():
        ref = completion_logprobs(reference, rollout)
    return masked_sum(kl_k1(rollout.logprobs, ref), rollout.mask, dim=1)


def repeats_a_word(text: str) -> bool:
    """Does the completion use some word twice (punctuation aside)? No valid order does."""
    words = [w for w in text.split() if w not in {",", "."}]
    return len(words) != len(set(words))


@torch.no_grad()
def policy_report(policy: GPT, reference: GPT, samples: int = 512, seed: int = 123, reward_fn: RewardFn | None = None,
                  tokenizer=None) -> dict[str, float]:
    """Gold, valid share, KL to `reference` (with its standard error), proxy, length, repetition
    and truncation over `samples` fresh samples (see the module docstring). `reference` may be
    `policy` itself (its KL is then 0: lesson 09 reports the base model so), but must be on its device;
    `samples` >= 2, since kl_se is a standard deviation over them."""
    if validate.integer("samples", samples, minimum=-2**63) < 2:
        raise ValueError(f"samples must be >= 2, got {samples}: the report's kl_se is the standard deviation of the "
                         "per-sample KL over the samples (use a few hundred for a stable report)")
    if not isinstance(policy, GPT):
        raise TypeError(f"policy must be a minirl GPT, e.g. minirl.load_model('sft'); got {type(policy).__name__}")
    check_reference(reference, next(policy.parameters()).device)
    out = order_samples(policy, samples, seed, tokenizer)
    gold = torch.tensor(rewards.order_gold_reward(out.prompts, out.texts), dtype=torch.float64)
    kl = sequence_kl(out, reference).cpu().double()  # float64 on the CPU: MPS has no float64
    report = {"gold": gold.mean().item(), "valid": (gold > rewards.INVALID_ORDER_UTILITY).double().mean().item(),
              "kl": kl.mean().item(), "kl_se": kl.std().item() / math.sqrt(samples),
              "length": out.mask.sum(1).cpu().mean().item(),
              "repetition": sum(map(repeats_a_word, out.texts)) / samples,
              "truncated": out.truncated.cpu().double().mean().item()}
    if reward_fn is not None:
        report["proxy"] = reward_scores(reward_fn, out).cpu().double().mean().item()
    return report


def win_rate(gold_a, gold_b) -> float:
    """P(a sample of A is preferred to a sample of B) under the gold Bradley-Terry model, exact over
    the two sample sets: the mean over every pair (i, j) of sigma(u_a[i] - u_b[j]). Equal utilities
    count 1/2 (sigma(0)); 1/2 overall means the annotator cannot tell the policies apart."""
    a = torch.as_tensor(gold_a, dtype=torch.float64)
    b = torch.as_tensor(gold_b, dtype=torch.float64, device=a.device)
    if a.dim() != 1 or b.dim() != 1 or not a.numel() or not b.numel():
        raise ValueError("win_rate needs two non-empty 1-D lists of gold utilities")
    for name, x in (("gold_a", a), ("gold_b", b)):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} holds NaN or inf ({int((~torch.isfinite(x)).sum())} of {x.numel()} utilities); "
                             "gold utilities are finite (-2 for text that is not a valid order)")
    return torch.sigmoid(a[:, None] - b[None, :]).mean().item()


def gold_pairs(texts: list[str], n_pairs: int, seed: int, against: list[str] | None = None) -> list[dict]:
    """`n_pairs` preference pairs over a policy's completions `texts` (of 'order:'), labelled by a
    draw from the gold Bradley-Terry model as the world's annotator labelled the original pairs.
    Each pair is two of the samples at random, redrawn until they differ; or, given `against`
    (another policy's samples), one of `texts` against one of `against`, so every pair sets the
    policy's text beside the other's. Invalid text is labelled too (utility -2)."""
    validate.integer("n_pairs", n_pairs, minimum=0)
    if against is not None and (isinstance(against, str) or not against):
        raise ValueError("against must be a non-empty list of another policy's completions, or None")
    other = texts if against is None else against
    if len(set(texts) | set(other)) < 2:
        raise ValueError("gold_pairs needs at least two different completions to compare")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n_pairs):
        a, b = rng.choice(texts), rng.choice(other)
        while b == a:
            a, b = rng.choice(texts), rng.choice(other)
        if rng.random() >= rewards.preference_probability(PROMPT + a, PROMPT + b):
            a, b = b, a
        pairs.append({"prompt": PROMPT, "chosen": a, "rejected": b})
    return pairs


@torch.no_grad()
def valid_order_distribution(policy: GPT, tokenizer=None, batch_size: int = 512) -> tuple[list[str], torch.Tensor, float]:
    """(texts, probs, mass): every valid order (`generate.order_distribution()`'s list), the policy's
    probability of writing each one, renormalized over the valid orders (float64, sums to 1), and
    the mass the policy puts on them in all. Each order is scored in its canonical tokenization
    followed by EOS, pi(completion + EOS | 'order:'); a policy could also spell an order with
    other tokens, which this leaves out (so `mass` is a lower bound on its valid share)."""
    enc = tokenizer or load_tokenizer()
    texts, _ = generate.order_distribution()
    items = [sequence_ids(enc, PROMPT, t[len(PROMPT):]) for t in texts]
    pad = enc.encode_single_token(PAD)
    logp = torch.cat([tokenized_logprobs(policy, items[i:i + batch_size], pad).cpu().double()
                      for i in range(0, len(items), batch_size)])
    probs = logp.exp()
    return texts, probs / probs.sum(), probs.sum().item()


def refit_on_own_samples(rm, policy: GPT, pool: list[dict], base: GPT, reference: GPT, n_pairs: int, seed: int, config,
                         samples: int = 512, tokenizer=None) -> list[dict]:
    """One turn of iterated RLHF (the repeated loop of the lecture notes "RL with Sequences and
    LLMs"): sample the policy and the `reference` (the SFT model), label `n_pairs` pairs, each a
    policy sample against a reference sample, with the gold Bradley-Terry model (`gold_pairs`), add
    them to `pool` (in place), fine-tune the reward model `rm` on the whole pool
    (`minirl.train.reward_model.fit`, `config` an RMConfig), and renormalize it on the base model's
    samples so its units stay the same. Returns the fresh pairs.

    Why against the reference: once a policy writes only invalid text, pairs of its own samples
    compare two texts of utility -2, coin flips that say nothing about validity; set beside the
    reference's orders, what the policy learned to exploit gets the annotator's verdict."""
    enc = tokenizer or load_tokenizer()
    fresh = gold_pairs(order_samples(policy, samples, seed, enc).texts, n_pairs, seed,
                       against=order_samples(reference, samples, seed + 1, enc).texts)
    pool.extend(fresh)
    fit(rm, pair_tokens(pool, enc), pair_step_loss, config, "reward model refit")
    rm.eval()
    normalize(rm, base, tokenizer=enc)
    return fresh
