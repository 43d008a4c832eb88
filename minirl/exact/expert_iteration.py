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
sum_x p_x. 'pooled' weights prompt x's mean score grad p_x / p_x by K_x / sum K, about p_x / sum p,
so its update is close to grad J times one constant for the batch (exactly: `round_moments`).

For the batch, 'samples' and 'kept' average the prompts: g = (1/P) sum_x g_x, the convention of
`minirl.exact.group_updates` (whose sequence_sum divides by the 2G completions of the batch), so
GRPO's update on the same 0/1 reward (`compare`) is measured on the same footing. Measured at
random logits (torch.randn, seed 0; J = 0.077), the noise in units of the signal (relative_variance)
at N = 2, 4, 8: 'kept' 7.1, 3.5, 1.8; GRPO 7.5, 2.8, 1.2, with a bias_share of 0.17 from its
per-completion length mean; GRPO with the sequences summed 10.2, 3.7, 1.6. Where success is rare a
baseline removes little, so expert iteration is about as noisy as GRPO. Deviations: a sequence's
log-likelihood, not the per-token mean an SFT loss usually takes (a length weighting on top of the
above); one SFT step from the current policy, where STaR fine-tunes for many from the base model.
"""
from __future__ import annotations

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


def _prompt_parts(mdp: MicroMDP, logits: torch.Tensor, verifier: Callable) -> list[tuple[float, torch.Tensor, float]]:
    """For each prompt: p_x, m_x = E[f | accepted] (D,) and v_x = E[|f - m_x|^2 | accepted], by enumeration."""
    logits = logits.detach().double()
    f = mdp.weighted_scores(logits, mdp.table.mask).flatten(1)  # (N, D): grad log pi(tau) of every episode
    probs = mdp.episode_log_probs(logits).exp()
    parts = []
    for i, prompt in enumerate(mdp.prompts):
        rows = mdp.table.prompt == i  # the prompt's completions, in the order of mdp.completions
        c = _verdicts(mdp, prompt, verifier)
        p = float(probs[rows] @ c)
        if p == 0:
            parts.append((0.0, torch.zeros(f.size(1), dtype=torch.float64), 0.0))
            continue
        m = (probs[rows] * c) @ f[rows] / p
        parts.append((p, m, float((probs[rows] * c) @ (f[rows] * f[rows]).sum(1)) / p - float(m @ m)))
    return parts


def _binomial(n: int, p: float) -> list[float]:
    return [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]


def round_moments(mdp: MicroMDP, logits: torch.Tensor, n: int, normalization: str = "kept",
                  verifier: Callable = accepted) -> Moments:
    """E[g] and E|g - E g|^2 of one round's SFT step, g the gradient of the mean log-likelihood of the kept
    completions (`normalization`), from n completions of each prompt sampled from pi; exact."""
    mdp.check_logits(logits)
    validate.integer("n", n)
    validate.choice("normalization", normalization, NORMALIZATIONS)
    parts = _prompt_parts(mdp, logits, verifier)
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
    laws = torch.tensor([_binomial(n, p) for p, _, _ in parts], dtype=torch.float64)  # (P, n + 1)
    counts = torch.cartesian_prod(*[torch.arange(n + 1)] * len(parts)).view(-1, len(parts))  # every (k_x), (C, P)
    w = laws.gather(1, counts.T).prod(0)  # (C,) the probability of each
    total = counts.sum(1, dtype=torch.float64).clamp(min=1)  # T = 0 only where every k_x = 0, and then g = 0
    k = counts.double()
    u = k @ torch.stack([m for _, m, _ in parts]) / total[:, None]  # (C, D) E[g | counts]
    v = torch.tensor([v for _, _, v in parts], dtype=torch.float64)
    mean = w @ u
    second = float(w @ ((u * u).sum(1) + k @ v / total ** 2))
    return Moments(mean.view(shape), second - float(mean @ mean))


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
