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

from ..core import validate
from ..core.ops import check_float
from ..world import grammar
from . import micro
from .mdp import MicroMDP

__all__ = ["micro_features", "true_theta", "episode_features", "episode_distribution", "expert_distribution",
           "per_prompt_mean", "model_distribution", "log_likelihood", "maxent_gradient",
           "importance_weighted_gradient", "plan_features", "empirical_distribution", "fit_maxent"]


# ---------------------------------------------------------------- argument checks (shared with micro_gail)
def _check_mdp(mdp) -> MicroMDP:
    """`mdp` after checking it is a MicroMDP (not a horizon, nor a tensor passed in its place)."""
    if not isinstance(mdp, MicroMDP):
        raise TypeError(f"mdp must be a MicroMDP, e.g. MicroMDP(); got {type(mdp).__name__}")
    return mdp


def _check_tensor(name: str, x, shape: tuple, what: str = "", finite: bool = True) -> torch.Tensor:
    """`x` after checking it is a floating-point tensor of `shape` (an int is a size, a str a name
    for any size) holding no NaN (and no inf, unless finite=False); `what` says what it is."""
    check_float(name, x)
    if x.dim() != len(shape) or any(isinstance(k, int) and k != n for k, n in zip(shape, x.shape)):
        want = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name} must have shape {want}{f' ({what})' if what else ''}, got {tuple(x.shape)}")
    bad = torch.isnan(x) if not finite else ~torch.isfinite(x)
    if bool(bad.any()):
        raise ValueError(f"{name} must be {'free of NaN' if not finite else 'finite'}, got {int(bad.sum())} "
                         f"{'NaN' if not finite else 'NaN or inf'} entries (the first at index "
                         f"{tuple(bad.nonzero()[0].tolist())})")
    return x


def _check_nonnegative(name: str, p: torch.Tensor) -> None:
    """p (finite, checked) holds no negative entry: it is a distribution."""
    neg = (p < 0).nonzero()
    if len(neg):
        i = tuple(neg[0].tolist())
        raise ValueError(f"{name} has {len(neg)} negative entries (the first {p[i].item():.4g} at index {i}); it is a "
                         "distribution: probabilities >= 0")


def _check_episode_distribution(mdp: MicroMDP, name: str, p, sums: bool = True) -> torch.Tensor:
    """p (N,) after checking it is a distribution over each prompt's episodes of `mdp.table`:
    finite, >= 0 and (with `sums`) summing to 1 over each prompt, as p(tau | x) does."""
    _check_tensor(name, p, (len(mdp.table.prompt),), "one probability per episode of mdp.table")
    _check_nonnegative(name, p)
    if sums:
        total = torch.zeros(len(mdp.prompts), dtype=torch.float64).index_add_(0, mdp.table.prompt, p.detach().double())
        if bool(((total - 1).abs() > 1e-6).any()):
            raise ValueError(f"{name} must sum to 1 over each prompt's episodes (it is p(tau | x)), got sums "
                             f"{[round(t, 6) for t in total.tolist()]} for prompts {list(mdp.prompts)}; divide counts "
                             "by each prompt's total")
    return p


def _check_phi(mdp: MicroMDP, phi) -> torch.Tensor:
    return _check_tensor("phi", phi, (*mdp.shape, "F"), "states x actions x features, as micro_features(mdp) gives")


def _check_theta(theta, features: int) -> torch.Tensor:
    return _check_tensor("theta", theta, (features,), "one weight per feature")


def micro_features(mdp: MicroMDP) -> torch.Tensor:
    """phi(s, a), (n_states, n_actions, F): F = n_prompts * n_actions token indicators (prompt
    first), then n_prompts goal indicators (a is EOS and the prefix holds the prompt's goal)."""
    _check_mdp(mdp)
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
    _check_mdp(mdp)
    steps = [micro.STEP_REWARD[p][a] for p in mdp.prompts for a in mdp.actions]
    return torch.tensor(steps + [micro.GOAL_REWARD] * len(mdp.prompts), dtype=torch.float64)


def episode_features(mdp: MicroMDP, phi: torch.Tensor) -> torch.Tensor:
    """Phi(tau) for every episode of `mdp.table`, (N, F): the sum of phi over its steps."""
    _check_phi(_check_mdp(mdp), phi)
    t = mdp.table
    return (phi[t.states, t.actions] * t.mask[..., None]).sum(dim=1)


def episode_distribution(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """(N,) probability of each episode of `mdp.table` given its prompt, under tabular `logits`."""
    return _check_mdp(mdp).episode_log_probs(logits).exp()


def expert_distribution(mdp: MicroMDP) -> torch.Tensor:
    """(N,) p_E(tau | x) = exp(R(tau)) / Z(x) for the world's true reward, by soft value iteration."""
    _check_mdp(mdp)
    rewards = torch.einsum("saf,f->sa", micro_features(mdp), true_theta(mdp))
    return episode_distribution(mdp, mdp.soft_value_iteration(rewards)[0])


def per_prompt_mean(mdp: MicroMDP, weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """sum over each prompt's episodes of weights * values (values (N, F)), averaged over prompts."""
    N = len(_check_mdp(mdp).table.prompt)
    _check_tensor("weights", weights, (N,), "one per episode of mdp.table", finite=False)
    _check_tensor("values", values, (N, "F"), "one row per episode of mdp.table", finite=False)
    per_episode = weights[:, None] * values
    return torch.stack([per_episode[mdp.table.prompt == p].sum(0) for p in range(len(mdp.prompts))]).mean(0)


def model_distribution(mdp: MicroMDP, phi: torch.Tensor, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(p_theta over the episodes (N,), log Z_theta per prompt (n_prompts,)) by soft value iteration."""
    _check_theta(theta, _check_phi(_check_mdp(mdp), phi).size(-1))
    q, v = mdp.soft_value_iteration(torch.einsum("saf,f->sa", phi, theta))
    start = [mdp.state_index[(p, ())] for p in mdp.prompts]
    return episode_distribution(mdp, q), v[start]


def log_likelihood(mdp: MicroMDP, phi: torch.Tensor, theta: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    """L(theta) = mean over prompts of E_{p_E}[R_theta] - log Z_theta(x), with log Z summed over the
    enumerated completions (differentiable in theta; soft value iteration gives the same number)."""
    counts = episode_features(mdp, phi)
    _check_theta(theta, counts.size(1))
    _check_episode_distribution(mdp, "expert", expert)
    r = counts @ theta  # (N,) R_theta of every episode
    log_z = torch.stack([torch.logsumexp(r[mdp.table.prompt == p], 0) for p in range(len(mdp.prompts))])
    return per_prompt_mean(mdp, expert, r[:, None]).squeeze(0) - log_z.mean()


def maxent_gradient(mdp: MicroMDP, phi: torch.Tensor, theta: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    """grad L = E_{p_E}[Phi] - E_{p_theta}[Phi], mean over prompts, (F,): exact."""
    counts = episode_features(mdp, phi)
    _check_theta(theta, counts.size(1))
    _check_episode_distribution(mdp, "expert", expert)
    model, _ = model_distribution(mdp, phi, theta.detach())
    return per_prompt_mean(mdp, expert, counts) - per_prompt_mean(mdp, model, counts)


def importance_weighted_gradient(expert_counts: torch.Tensor, sample_counts: torch.Tensor, sample_logq: torch.Tensor,
                                 theta: torch.Tensor) -> torch.Tensor:
    """Guided cost learning's estimate of grad L for one prompt, without soft value iteration:
    the expert term from demonstrations' features (n, F), the model term from samples of another
    policy q with features (m, F) and log q(tau) (m,), weighted by w = exp(R_theta(tau)) / q(tau)
    and self-normalized: sum w Phi / sum w estimates E_{p_theta}[Phi] (biased for finite m,
    consistent as m grows; the normalization is what cancels the unknown Z)."""
    F = _check_tensor("expert_counts", expert_counts, ("n", "F"), "the demonstrations' features").size(1)
    m = _check_tensor("sample_counts", sample_counts, ("m", F), "the samples' features").size(0)
    _check_tensor("sample_logq", sample_logq, (m,), "log q of each sample: a sample q can draw has log q > -inf")
    _check_theta(theta, F)
    if not len(expert_counts) or not m:
        raise ValueError(f"the estimate needs at least one demonstration and at least one sample, got "
                         f"{len(expert_counts)} and {m}")
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
    for n, plan in enumerate(plans):
        if isinstance(plan, str) or not isinstance(plan, (tuple, list)):
            raise ValueError(f"plans[{n}] must be a tuple of activities such as ('run', 'nap', 'cook', 'read'), got "
                             f"{plan!r}")
        unknown = [a for a in plan if a not in index]
        if unknown:
            raise ValueError(f"plans[{n}] = {plan!r} holds {unknown[0]!r}, which is not an activity; the activities "
                             f"are {', '.join(acts)}")
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
    if isinstance(demos, (str, dict)) or not len(demos):
        raise ValueError("demos must be a list of at least one plan, each a tuple of activities such as "
                         "('run', 'nap', 'cook', 'read')")
    for n, d in enumerate(demos):
        if not isinstance(d, tuple):
            raise ValueError(f"demos[{n}] is a {type(d).__name__}; each demonstration is a plan, a tuple of activities "
                             "(from a record: tuple(d['completion'].split()[:-1]))")
        if d not in index:
            raise ValueError(f"demos[{n}] = {d!r} is not one of plans")
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
    n = _check_tensor("features", features, ("n", "F"), "one row of features per element of the set").size(0)
    _check_tensor("expert", expert, (n,), "one probability per row of features")
    if expert.dtype != features.dtype:
        raise TypeError(f"expert is {expert.dtype} but features {features.dtype}; pass both in one dtype "
                        "(expert.double(): plan_features gives float64)")
    _check_nonnegative("expert", expert)
    if abs(expert.sum().item() - 1) > 1e-6:
        raise ValueError(f"expert must sum to 1 (a distribution over the set), got a sum of {expert.sum().item():.6g}; "
                         "divide counts by their total (empirical_distribution does)")
    validate.integer("steps", steps, minimum=0)
    validate.number("lr", lr, 0.0, open_low=True)
    validate.number("l2", l2, 0.0)
    theta = torch.zeros(features.size(1), dtype=torch.float64)
    target = expert @ features  # (F,)
    for _ in range(steps):
        model = torch.softmax(features @ theta, dim=0)
        theta = theta + lr * (target - model @ features - l2 * theta)
    return theta
