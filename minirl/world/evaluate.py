"""Measuring a model on the tiny world: validity, truncation, pass@k, and the base-model report."""
from __future__ import annotations

import torch

from ..core import validate
from ..core.kl import kl_k1
from ..core.ops import masked_sum
from ..lm.sampling import completion_logprobs, sample
from ..lm.tokenizer import load_tokenizer
from . import datasets, grammar, rewards

__all__ = ["pass_at_k", "sample_family", "arithmetic_pass_at_k", "base_model_report", "heldout_report"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from n samples of which c are correct (Chen et al., 2021).

    pass@k = 1 - C(n-c, k) / C(n, k), computed as a product to stay exact-ish for large n.
    """
    n, c, k = (validate.integer(name, v, minimum=0) for name, v in (("n", n), ("c", c), ("k", k)))
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def sample_family(model, enc, family: str, prompts: list[str], group_size: int, generator, chunk: int = 64):
    """Texts, full texts and truncation flags for `group_size` samples of each prompt (T = 1)."""
    validate.choice("family", family, grammar.FAMILIES)
    completions, truncated = [], []
    for i in range(0, len(prompts), chunk):
        r = sample(model, prompts[i : i + chunk], max_new_tokens=grammar.MAX_NEW_TOKENS[family],
                   group_size=group_size, generator=generator, tokenizer=enc)
        completions += r.texts
        truncated += r.truncated.tolist()
    rows = [p for p in prompts for _ in range(group_size)]
    return rows, completions, truncated


def arithmetic_pass_at_k(model, enc, prompts: list[str], n: int, ks: tuple[int, ...], generator) -> dict[int, float]:
    """Mean over prompts of the unbiased pass@k, from n samples per prompt."""
    if not prompts:
        raise ValueError("no prompts given: pass@k is a mean over at least one prompt")
    rows, completions, _ = sample_family(model, enc, "arithmetic", prompts, n, generator)
    correct = rewards.arithmetic_reward(rows, completions)
    per_prompt = [int(sum(correct[i * n : (i + 1) * n])) for i in range(len(prompts))]
    return {k: sum(pass_at_k(n, c, k) for c in per_prompt) / len(prompts) for k in ks}


@torch.no_grad()
def base_model_report(model, enc, seed: int = 0, samples_per_family: int = 512) -> dict:
    """What a later lesson needs to know of a model, on held-out ('test') prompts at temperature 1.

    Per family: the fraction of samples that parse (`valid`) and that hit the length limit
    (`truncated`); arithmetic pass@1/8/16 (n = 16, the unbiased estimator); the fraction of
    gold-positive reviews from negative starts; mean gold utility of orders and true plan reward.
    """
    g = torch.Generator().manual_seed(seed)
    report: dict = {}
    for family in grammar.FAMILIES:
        records = datasets.load_prompts(family, "test")
        prompts = [r["prompt"] for r in records]
        group = max(1, samples_per_family // len(prompts))
        rows, completions, truncated = sample_family(model, enc, family, prompts, group, g)
        valid = [grammar.VALIDATORS[family](p + c) for p, c in zip(rows, completions)]
        report[family] = {
            "samples": len(rows),
            "valid": round(sum(valid) / len(rows), 4),
            "truncated": round(sum(truncated) / len(rows), 4),
        }
        if family == "reviews":
            negative = {r["prompt"] for r in records if r["start"] == "negative"}
            neg = [(p, c) for p, c in zip(rows, completions) if p in negative]
            gold = rewards.review_gold_reward([p for p, _ in neg], [c for _, c in neg])
            report[family]["gold_positive_from_negative_start"] = round(sum(s > 0 for s in gold) / len(gold), 4)
        if family == "orders":
            report[family]["mean_gold_utility"] = round(sum(rewards.order_gold_reward(rows, completions)) / len(rows), 4)
        if family == "plans":
            report[family]["mean_true_reward"] = round(sum(rewards.plan_true_reward(rows, completions)) / len(rows), 4)
    heldout = [r["prompt"] for r in datasets.load_prompts("arithmetic", "test")]
    pk = arithmetic_pass_at_k(model, enc, heldout, n=16, ks=(1, 8, 16), generator=g)
    report["arithmetic"].update({"heldout_prompts": len(heldout), **{f"pass@{k}": round(v, 4) for k, v in pk.items()}})
    return report


@torch.no_grad()
def heldout_report(model, task, reference=None, samples: int = 4, seed: int = 123, tokenizer=None) -> dict[str, float]:
    """A task's gold metrics on its held-out prompts (`samples` completions each, T = 1), the mean
    task reward, and, given the `reference` model, the KL(pi || pi_ref) per completion estimated
    from the same samples (the sum of log pi - log pi_ref over each completion's tokens)."""
    g = torch.Generator().manual_seed(seed)
    out = sample(model, task.test_prompts, max_new_tokens=task.max_new_tokens, group_size=samples, generator=g,
                 tokenizer=tokenizer)
    report = {**task.gold(out), "reward": task.token_rewards(out, tokenizer or load_tokenizer()).sum(1).mean().item()}
    if reference is not None:
        report["kl"] = masked_sum(kl_k1(out.logprobs, completion_logprobs(reference, out)), out.mask, dim=1).mean().item()
    return report
