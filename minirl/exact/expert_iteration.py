"""Expert iteration's exact link to the policy gradient, on the micro world.

One round of expert iteration (STaR, Zelikman et al., 2022; RAFT, Dong et al., 2023; rejection-sampling
fine-tuning): sample N completions of each prompt, keep those a verifier accepts, take one SFT step
on the kept ones, i.e. ascend the mean of log pi(tau) over them. Write c(tau) in {0, 1} for the
verifier, f(tau) = grad log pi(tau), p_x = P(accepted | x) and K_x = sum_i c(tau_i) the number kept:

    normalization  one prompt's update           its expectation
    'samples'      (1/N) sum_i c_i f_i           grad p_x: REINFORCE on the 0/1 reward, no baseline
    'kept'         (1/K_x) sum_i c_i f_i         (1 - (1 - p_x)^N) / p_x * grad p_x   (0 when K_x = 0)
    'pooled'       sum_x sum_i c_i f_i / sum_x K_x   one mean over every kept sample of the batch

The 'kept' line: given K_x = k >= 1 the kept samples are k independent draws from pi(. | accepted),
whose mean score is E[c f] / p_x = grad p_x / p_x, and P(K_x >= 1) = 1 - (1 - p_x)^N. So the SFT step
on the kept samples is a policy-gradient step with a 0/1 advantage and no baseline, rescaled per
prompt: by 1 at N = 1 (exactly REINFORCE), towards 1 / p_x as N grows, where it ascends
sum_x log p_x (a hard prompt weighs 1/p_x more, as in maximum likelihood of success) instead of
sum_x p_x. 'pooled' weights prompt x by K_x / sum K, in expectation about p_x / sum p.

For the batch, 'samples' and 'kept' average the prompts: g = (1/P) sum_x g_x, the convention of
`minirl.exact.group_updates` (whose sequence_sum divides by the 2G completions of the batch), so
GRPO's update on the same 0/1 reward (`compare`) is measured on the same footing. Deviations: a
sequence's log-likelihood, not the per-token mean an SFT loss usually takes (a length weighting on
top of the above); one SFT step, where expert iteration fine-tunes for several.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch

from ..core import validate
from . import micro
from .group_updates import FAMILY, Estimator, Moments, moments as group_moments
from .mdp import MicroMDP

__all__ = ["NORMALIZATIONS", "accepted", "success", "success_gradient", "round_moments", "kept_scale", "compare"]

NORMALIZATIONS = ("samples", "kept", "pooled")


def accepted(prompt: str, completion: tuple[str, ...]) -> float:
    """The verifier: 1.0 if the completion ended by EOS and holds the prompt's goal token, else 0.0."""
    return float(micro.terminal_reward(prompt, completion) > 0)


def _verdicts(mdp: MicroMDP, prompt: str, verifier: Callable) -> torch.Tensor:
    out = torch.tensor([float(verifier(prompt, c)) for c in mdp.completions], dtype=torch.float64)
    if not bool(((out == 0) | (out == 1)).all()):
        raise ValueError("the verifier must answer 0 or 1 (rejected or accepted) for every completion")
    return out


def success(mdp: MicroMDP, logits: torch.Tensor, verifier: Callable = accepted) -> torch.Tensor:
    """J = mean over prompts of p_x = P(accepted | x). Differentiable in `logits`."""
    mdp.check_logits(logits)
    return torch.stack([(mdp.completion_probs(logits, p) * _verdicts(mdp, p, verifier).to(logits.dtype)).sum()
                        for p in mdp.prompts]).mean()


def success_gradient(mdp: MicroMDP, logits: torch.Tensor, verifier: Callable = accepted) -> torch.Tensor:
    """grad J (n_states, n_actions), by autograd of `success`."""
    x = logits.detach().double().clone().requires_grad_(True)
    return torch.autograd.grad(success(mdp, x, verifier), x)[0]


def kept_scale(p: float, n: int) -> float:
    """(1 - (1 - p)^N) / p: E['kept' update] = this * grad p_x; N at p = 0 (nothing kept yet, the limit)."""
    validate.number("p", p, 0.0, 1.0)
    validate.integer("n", n)
    return float(n) if p == 0 else (1 - (1 - p) ** n) / p


def _prompt_parts(mdp: MicroMDP, logits: torch.Tensor, prompt: str, verifier: Callable):
    """p_x, m_x = E[f | accepted] (D,), v_x = E[|f - m_x|^2 | accepted], by enumeration."""
    probs = mdp.completion_probs(logits.detach().double(), prompt)
    c = _verdicts(mdp, prompt, verifier)
    f = torch.stack([mdp.score(logits.detach().double(), prompt, t).flatten() for t in mdp.completions])
    p = float(probs @ c)
    if p == 0:
        return 0.0, torch.zeros(f.size(1), dtype=torch.float64), 0.0
    m = (probs * c) @ f / p
    v = float((probs * c) @ (f * f).sum(1)) / p - float(m @ m)
    return p, m, v


def _binomial(n: int, p: float) -> list[float]:
    return [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]


def round_moments(mdp: MicroMDP, logits: torch.Tensor, n: int, normalization: str = "kept",
                  verifier: Callable = accepted) -> Moments:
    """E[g] and E|g - E g|^2 of one round's SFT step, g the gradient of the mean log-likelihood of the kept
    completions (`normalization`), from n completions of each prompt sampled from pi; exact."""
    mdp.check_logits(logits)
    validate.integer("n", n)
    validate.choice("normalization", normalization, NORMALIZATIONS)
    parts = [_prompt_parts(mdp, logits, x, verifier) for x in mdp.prompts]
    P = len(parts)
    if normalization == "pooled":
        return _pooled(parts, n, mdp.shape)
    mean, variance = 0.0, 0.0
    for p, m, v in parts:
        if normalization == "samples":  # g_x = (1/N) sum_i c_i f_i, N independent terms
            mean_x = p * m
            variance += (p * (float(m @ m) + v) - p * p * float(m @ m)) / n / P ** 2
        else:  # given K = k >= 1, g_x is the mean of k draws of f given accepted
            b = _binomial(n, p)
            kept = 1 - b[0]
            mean_x = kept * m
            second = kept * float(m @ m) + v * sum(b[k] / k for k in range(1, n + 1))
            variance += (second - kept * kept * float(m @ m)) / P ** 2
        mean = mean + mean_x / P
    return Moments(torch.as_tensor(mean).view(mdp.shape), variance)


def _pooled(parts, n: int, shape) -> Moments:
    """One mean over all the kept samples of the batch: given the counts (k_x), E[g] = sum_x k_x m_x / T and
    E|g|^2 = (|sum_x k_x m_x|^2 + sum_x k_x v_x) / T^2, T = sum_x k_x (g = 0 when T = 0)."""
    laws = [_binomial(n, p) for p, _, _ in parts]
    mean, second = 0.0, 0.0
    for counts in itertools.product(range(n + 1), repeat=len(parts)):
        total = sum(counts)
        if total == 0:
            continue
        w = math.prod(law[k] for law, k in zip(laws, counts))
        u = sum(k * m for k, (_, m, _) in zip(counts, parts)) / total
        mean = mean + w * u
        second += w * (float(u @ u) + sum(k * v for k, (_, _, v) in zip(counts, parts)) / total ** 2)
    mean = torch.as_tensor(mean, dtype=torch.float64)
    return Moments(mean.view(shape) if mean.dim() else torch.zeros(shape, dtype=torch.float64),
                   second - float((mean * mean).sum()))


def compare(mdp: MicroMDP, logits: torch.Tensor, n: int, verifier: Callable = accepted) -> dict[str, dict[str, float]]:
    """One round of expert iteration (each normalization) against GRPO on the same n samples of each
    prompt and the same 0/1 reward (group_updates: GRPO's own estimator, and its group-normalized
    advantage with the sequences summed), each `Moments.against` grad J: scale, bias_share, cosine,
    relative_variance (the batch's noise in units of its signal)."""
    validate.integer("n", n, minimum=2)
    grad = success_gradient(mdp, logits, verifier)
    rows = {f"expert iteration ({k})": round_moments(mdp, logits, n, k, verifier) for k in NORMALIZATIONS}
    rows["GRPO"] = group_moments(mdp, logits, FAMILY["GRPO"], n, reward=verifier)
    rows["GRPO, sequences summed"] = group_moments(mdp, logits, Estimator("group_std", "sequence_sum", "none"), n,
                                                   reward=verifier)
    return {name: m.against(grad) for name, m in rows.items()}
