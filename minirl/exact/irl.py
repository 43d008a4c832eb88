"""Maximum-entropy inverse RL (Ziebart et al. 2008) on the micro world, exactly, and its
importance-weighted estimate from samples (guided cost learning, Finn et al. 2016).

The expert writes completion tau of prompt x with probability p_E(tau | x) = exp(R(tau)) / Z(x),
Z(x) = sum over the prompt's completions of exp(R(tau)), each counted once. IRL looks for a reward
R_theta(tau) = theta . Phi(tau), Phi the sum over the completion's steps of features phi(s, a),
whose MaxEnt distribution p_theta explains the demonstrations. The log-likelihood per prompt and
its gradient:

    L(theta)    = E_{tau ~ p_E}[R_theta(tau)] - log Z_theta(x)
    grad L      = E_{p_E}[Phi] - E_{p_theta}[Phi]      (expert feature counts minus the model's)

`mdp.soft_value_iteration` gives p_theta's policy and log Z_theta exactly; everything here is a
finite sum over the 80 (prompt, completion) episodes of `MicroMDP.table`, averaged over prompts.

`micro_features` are indicators: one per (prompt, token) and one per prompt for "ended with EOS
holding the goal token", so the world's true reward is theta* . Phi exactly (`true_theta`).

The plans world (6 activities, 4 per plan) has only 1,296 plans, so MaxEnt IRL over it is exact
too, with no soft value iteration: `fit_maxent` works on any enumerated set given its feature
matrix, the exact expert distribution or the demonstrations' frequencies (`empirical_distribution`).
"""
from __future__ import annotations

import torch

from ..world import grammar
from . import micro
from .mdp import MicroMDP

__all__ = ["micro_features", "true_theta", "episode_features", "episode_distribution", "expert_distribution",
           "per_prompt_mean", "model_distribution", "log_likelihood", "maxent_gradient",
           "importance_weighted_gradient", "plan_features", "empirical_distribution", "fit_maxent"]


def micro_features(mdp: MicroMDP) -> torch.Tensor:
    """phi(s, a), (n_states, n_actions, F): F = n_prompts * n_actions token indicators (prompt
    first), then n_prompts goal indicators (a is EOS and the prefix holds the prompt's goal)."""
    n_p, n_a = len(mdp.prompts), len(mdp.actions)
    phi = torch.zeros(*mdp.shape, n_p * n_a + n_p, dtype=torch.float64)
    for s, (prompt, prefix) in enumerate(mdp.states):
        p = mdp.prompts.index(prompt)
        for a, action in enumerate(mdp.actions):
            phi[s, a, p * n_a + a] = 1.0
            if action == micro.EOS and micro.GOAL[prompt] in prefix:
                phi[s, a, n_p * n_a + p] = 1.0
    return phi


def true_theta(mdp: MicroMDP) -> torch.Tensor:
    """The weights that give the world's own reward: the step rewards, then the goal reward."""
    steps = [micro.STEP_REWARD[p][a] for p in mdp.prompts for a in mdp.actions]
    return torch.tensor(steps + [micro.GOAL_REWARD] * len(mdp.prompts), dtype=torch.float64)


def episode_features(mdp: MicroMDP, phi: torch.Tensor) -> torch.Tensor:
    """Phi(tau) for every episode of `mdp.table`, (N, F): the sum of phi over its steps."""
    t = mdp.table
    return (phi[t.states, t.actions] * t.mask[..., None]).sum(dim=1)


def episode_distribution(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """(N,) probability of each episode of `mdp.table` given its prompt, under tabular `logits`."""
    return mdp.episode_log_probs(logits).exp()


def expert_distribution(mdp: MicroMDP) -> torch.Tensor:
    """(N,) p_E(tau | x) = exp(R(tau)) / Z(x) for the world's true reward, by soft value iteration."""
    rewards = torch.einsum("saf,f->sa", micro_features(mdp), true_theta(mdp))
    return episode_distribution(mdp, mdp.soft_value_iteration(rewards)[0])


def per_prompt_mean(mdp: MicroMDP, weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """sum over each prompt's episodes of weights * values (values (N, F)), averaged over prompts."""
    per_episode = weights[:, None] * values
    return torch.stack([per_episode[mdp.table.prompt == p].sum(0) for p in range(len(mdp.prompts))]).mean(0)


def model_distribution(mdp: MicroMDP, phi: torch.Tensor, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(p_theta over the episodes (N,), log Z_theta per prompt (n_prompts,)) by soft value iteration."""
    q, v = mdp.soft_value_iteration(torch.einsum("saf,f->sa", phi, theta))
    start = [mdp.state_index[(p, ())] for p in mdp.prompts]
    return episode_distribution(mdp, q), v[start]


def log_likelihood(mdp: MicroMDP, phi: torch.Tensor, theta: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    """L(theta) = mean over prompts of E_{p_E}[R_theta] - log Z_theta(x), with log Z summed over the
    enumerated completions (differentiable in theta; soft value iteration gives the same number)."""
    r = episode_features(mdp, phi) @ theta  # (N,) R_theta of every episode
    log_z = torch.stack([torch.logsumexp(r[mdp.table.prompt == p], 0) for p in range(len(mdp.prompts))])
    return per_prompt_mean(mdp, expert, r[:, None]).squeeze(0) - log_z.mean()


def maxent_gradient(mdp: MicroMDP, phi: torch.Tensor, theta: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    """grad L = E_{p_E}[Phi] - E_{p_theta}[Phi], mean over prompts, (F,): exact."""
    counts = episode_features(mdp, phi)
    model, _ = model_distribution(mdp, phi, theta.detach())
    return per_prompt_mean(mdp, expert, counts) - per_prompt_mean(mdp, model, counts)


def importance_weighted_gradient(expert_counts: torch.Tensor, sample_counts: torch.Tensor, sample_logq: torch.Tensor,
                                 theta: torch.Tensor) -> torch.Tensor:
    """Guided cost learning's estimate of grad L for one prompt, without soft value iteration:
    the expert term from demonstrations' features (n, F), the model term from samples of another
    policy q with features (m, F) and log q(tau) (m,), weighted by w = exp(R_theta(tau)) / q(tau)
    and self-normalized: sum w Phi / sum w estimates E_{p_theta}[Phi] (biased for finite m,
    consistent as m grows; the normalization is what cancels the unknown Z)."""
    log_w = sample_counts @ theta - sample_logq  # (m,)
    w = torch.softmax(log_w, dim=0)
    return expert_counts.mean(0) - (w[:, None] * sample_counts).sum(0)


# ---------------------------------------------------------------- over an enumerable set (plans)
def plan_features(plans: list[tuple[str, ...]]) -> torch.Tensor:
    """Simple features of each plan, (n, 6 + 36): how often each activity appears, then how often
    each ordered pair of activities appears consecutively (a repeat is the pair (a, a)). Every plan
    has 4 activities and 3 pairs, so adding a constant to all activity weights, or to all pair
    weights, adds a constant to every plan's reward: those directions are not identified."""
    acts = grammar.ACTIVITIES
    index = {a: k for k, a in enumerate(acts)}
    phi = torch.zeros(len(plans), len(acts) + len(acts) ** 2, dtype=torch.float64)
    for n, plan in enumerate(plans):
        for a in plan:
            phi[n, index[a]] += 1
        for a, b in zip(plan, plan[1:]):
            phi[n, len(acts) + index[a] * len(acts) + index[b]] += 1
    return phi


def empirical_distribution(plans: list[tuple[str, ...]], demos: list[tuple[str, ...]]) -> torch.Tensor:
    """(n,) the share of the demonstrations that are each plan of `plans`."""
    index = {p: k for k, p in enumerate(plans)}
    counts = torch.zeros(len(plans), dtype=torch.float64)
    for d in demos:
        counts[index[d]] += 1
    return counts / counts.sum()


def fit_maxent(features: torch.Tensor, expert: torch.Tensor, steps: int = 2000, lr: float = 0.5,
               l2: float = 0.0) -> torch.Tensor:
    """MaxEnt IRL over an enumerated set: theta maximizing E_expert[Phi] . theta - log sum exp(Phi theta)
    - (l2/2)|theta|^2 by gradient ascent from 0 (gradient: expert feature counts minus the model's,
    minus l2 theta). The model is p_theta = softmax(Phi theta), its partition function a plain sum.
    With demonstrations instead of the exact distribution, a feature never seen would be driven to
    -inf: l2 > 0 keeps it finite (a deviation from Ziebart et al., who fit without a prior)."""
    theta = torch.zeros(features.size(1), dtype=torch.float64)
    target = expert @ features  # (F,)
    for _ in range(steps):
        model = torch.softmax(features @ theta, dim=0)
        theta = theta + lr * (target - model @ features - l2 * theta)
    return theta
