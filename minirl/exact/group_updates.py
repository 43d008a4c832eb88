"""The expected update of a group-based policy-gradient estimator on the micro world, exactly.

A batch holds one group of G completions of each prompt, sampled from a behaviour policy mu (the
current policy pi when on-policy, an older one when the rollouts are stale). An estimator sends
the batch to an update direction

    g = sum over prompts, sum_i c_i f(tau_i)                               (n_states, n_actions)

    f(tau) = sum_t w_t grad log pi(a_t | s_t)     the completion's score, each token weighted by
                                                  the correction (`Estimator.ratio`): 1 on-policy
    c_i                                           from the batch's rewards and lengths: the
                                                  advantage, and how the loss aggregates tokens

The mean E[g] and the variance E|g - E g|^2 are finite sums, computed without sampling:
completions are grouped into *types* (reward, length), a group is a multiset of G types, and
given the types the G scores are independent, so E|sum_i c_i f_i|^2 = |sum_i c_i E f_i|^2 +
sum_i c_i^2 Var f_i. Estimators that couple the two groups (a token mean over the whole batch, a
batch-wide std) read the other group through its summary statistics, enumerated exactly too.
The two prompts' states are disjoint, so their updates are orthogonal and their variances add.

What the exact numbers compare (`Moments.against`): an estimator's mean is a multiple of the
true gradient plus a bias. The multiple (the scale) is absorbed by the learning rate, so the
bias is measured after the best rescaling: |E g / c - grad J| / |grad J| with c the projection
of E g on grad J, and the variance as Var g / (c |grad J|)^2, the noise of one batch in units of
the signal.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core import validate
from ..core.corrections import CORRECTIONS
from ..core.losses import AGGREGATIONS
from ..core.ops import check_finite, check_float
from . import micro
from .mdp import MicroMDP

__all__ = ["ADVANTAGES", "RATIOS", "Estimator", "FAMILY", "Moments", "completion_scores", "moments"]

ADVANTAGES = ("group_std", "group_mean", "leave_one_out", "batch_std")
RATIOS = ("none", "token", "ppo_clip", "sequence", "geometric") + CORRECTIONS
EPS = 1e-4  # group_normalize's


def _check_mdp(mdp) -> MicroMDP:
    """`mdp` after checking it is a MicroMDP (not a tensor or a horizon passed in its place)."""
    if not isinstance(mdp, MicroMDP):
        raise TypeError(f"mdp must be a MicroMDP, e.g. MicroMDP(); got {type(mdp).__name__}")
    return mdp


def _check_policy(mdp, logits, name: str = "logits", minus_inf: bool = False) -> None:
    """A tabular policy of `mdp`, finite unless `minus_inf` (`MicroMDP.check_logits`)."""
    _check_mdp(mdp).check_logits(logits, name, minus_inf)


def _check_prompt(mdp: MicroMDP, prompt) -> None:
    if prompt not in mdp.prompts:
        raise ValueError(f"unknown prompt {prompt!r}; the micro world's prompts are {mdp.prompts}")


@dataclass(frozen=True)
class Estimator:
    """One member of the family.

    advantage    'group_std' (r - group mean) / (group std + eps), GRPO's; 'group_mean' r - group
                 mean (Dr. GRPO); 'leave_one_out' r - the mean of the others (RLOO); 'batch_std'
                 r - group mean, divided by the std of those over the whole batch (REINFORCE++'s
                 baseline variant, Hu et al., 2025)
    aggregation  one of `minirl.losses.AGGREGATIONS`, over the batch of 2G completions
    ratio        how a token sampled by mu is weighted: 'none' (as if pi had sampled it), 'token'
                 rho_t = pi/mu, 'ppo_clip' the gradient of PPO's clipped rho_t A (0 where the clip
                 binds), 'sequence' the product of the rho_t, 'geometric' GSPO's clipped
                 exp(mean log rho_t) with its built-in 1/|y|, or one of `minirl.core.corrections.CORRECTIONS`
    clip_eps, clip_eps_high   the clip range for 'ppo_clip' and 'geometric' (high: None for symmetric)
    cap          C of the truncated and masked corrections
    """
    advantage: str = "group_std"
    aggregation: str = "sequence_mean"
    ratio: str = "none"
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    cap: float = 2.0

    def __post_init__(self):
        validate.choice("advantage", self.advantage, ADVANTAGES)
        validate.choice("aggregation", self.aggregation, AGGREGATIONS)
        validate.choice("ratio", self.ratio, RATIOS)
        validate.number("clip_eps", self.clip_eps, 0.0, finite=False)
        if self.clip_eps_high is not None:
            validate.number("clip_eps_high", self.clip_eps_high, 0.0, finite=False)
        validate.number("cap", self.cap, 1.0, finite=False)


# the family, on-policy; GSPO's and CISPO's ratios matter only once the rollouts are stale. Clip
# ranges: PPO's 0.2, DAPO's 0.28 above, GSPO's paper's 3e-4 / 4e-4; CISPO's cap 5 is TRL's suggested
# epsilon_high for its cispo loss (after ScaleRL)
FAMILY = {
    "GRPO": Estimator("group_std", "sequence_mean", "ppo_clip"),
    "Dr. GRPO": Estimator("group_mean", "constant", "ppo_clip"),
    "DAPO": Estimator("group_std", "token_mean", "ppo_clip", clip_eps_high=0.28),
    "RLOO": Estimator("leave_one_out", "sequence_sum", "none"),
    "REINFORCE++": Estimator("batch_std", "token_mean", "ppo_clip"),
    "GSPO": Estimator("group_std", "sequence_sum", "geometric", clip_eps=3e-4, clip_eps_high=4e-4),
    "CISPO": Estimator("group_std", "token_mean", "token_truncate", cap=5.0),
}


@dataclass(frozen=True)
class Moments:
    """E[g] (n_states, n_actions) and E|g - E g|^2 of one batch's update."""
    mean: torch.Tensor
    variance: float

    def against(self, exact: torch.Tensor) -> dict[str, float]:
        """scale c (E g projected on the exact gradient, over its squared norm), bias_share
        |E g / c - exact| / |exact| (the tangent of the angle between them), cosine of that angle,
        relative_variance Var g / (c |exact|)^2."""
        check_float("exact", exact)
        if exact.shape != self.mean.shape:
            raise ValueError(f"exact must have the expected update's shape {tuple(self.mean.shape)} (the exact "
                             f"gradient, e.g. mdp.exact_gradient(logits)), got {tuple(exact.shape)}")
        check_finite("exact", exact)
        norm2 = float((exact * exact).sum())
        if norm2 == 0 or float(self.mean.norm()) == 0:
            raise ValueError("the exact gradient or the expected update is zero: there is no direction to compare")
        scale = float((self.mean * exact).sum()) / norm2
        bias = float((self.mean / scale - exact).norm()) / math.sqrt(norm2)
        cosine = scale * math.sqrt(norm2) / float(self.mean.norm())
        return {"scale": scale, "bias_share": bias, "cosine": cosine,
                "relative_variance": self.variance / (scale * scale * norm2)}


def _check_estimator(estimator) -> None:
    if not isinstance(estimator, Estimator):
        hint = (f" (FAMILY[{estimator!r}] is that recipe's)" if isinstance(estimator, str) and estimator in FAMILY
                else "")
        raise TypeError(f"estimator must be an Estimator, e.g. FAMILY['GRPO'] or Estimator('group_mean', "
                        f"'token_mean'); got {estimator!r:.60} ({type(estimator).__name__}){hint}")


def _token_weights(estimator: Estimator, log_rho: torch.Tensor, sign: int) -> torch.Tensor:
    """w_t of one completion's tokens (n,) given log rho_t, when its advantage has `sign` (+1, -1)."""
    rho = log_rho.exp()
    r = estimator.ratio
    high = estimator.clip_eps if estimator.clip_eps_high is None else estimator.clip_eps_high
    if r == "none":
        return torch.ones_like(rho)
    if r == "token":
        return rho
    if r == "ppo_clip":
        clipped = rho > 1 + high if sign > 0 else rho < 1 - estimator.clip_eps
        return torch.where(clipped, torch.zeros_like(rho), rho)
    if r == "geometric":
        s = log_rho.mean().exp()
        clipped = s > 1 + high if sign > 0 else s < 1 - estimator.clip_eps
        return torch.zeros_like(rho) if clipped else torch.full_like(rho, float(s) / rho.numel())
    if r.startswith("sequence"):  # 'sequence' and the two sequence corrections
        rho = log_rho.sum().exp().expand_as(log_rho)
    if r.endswith("truncate"):
        return rho.clamp(max=estimator.cap)
    if r.endswith("mask"):
        return torch.where(rho <= estimator.cap, rho, torch.zeros_like(rho))
    return rho  # 'sequence'


def completion_scores(mdp: MicroMDP, logits: torch.Tensor, behaviour: torch.Tensor, prompt: str,
                      estimator: Estimator) -> torch.Tensor:
    """f(tau) for every completion of `prompt`, for a positive and a negative advantage:
    (2, n_completions, n_states * n_actions), float64. logits: pi's; behaviour: mu's."""
    _check_policy(mdp, logits)
    _check_policy(mdp, behaviour, "behaviour")
    _check_prompt(mdp, prompt)
    _check_estimator(estimator)
    log_pi = torch.log_softmax(logits.detach().double(), dim=-1)
    log_mu = torch.log_softmax(behaviour.detach().double(), dim=-1)
    pi = log_pi.exp()
    out = torch.zeros(2, len(mdp.completions), pi.numel(), dtype=torch.float64)
    for n, c in enumerate(mdp.completions):
        steps = mdp.steps(prompt, c)
        log_rho = torch.stack([log_pi[s, a] - log_mu[s, a] for s, a in steps])
        for k, sign in enumerate((1, -1)):
            w = _token_weights(estimator, log_rho, sign)
            f = torch.zeros_like(pi)
            for (s, a), wt in zip(steps, w):
                f[s] -= wt * pi[s]
                f[s, a] += wt
            out[k, n] = f.flatten()
    return out


def _types(mdp: MicroMDP, prompt: str, reward: Callable[[str, tuple[str, ...]], float]
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each completion's type index (n_completions,), and each type's reward and length (V,)."""
    keys = [(round(_reward_value(reward, prompt, c), 9), len(c)) for c in mdp.completions]
    distinct = sorted(set(keys))
    index = torch.tensor([distinct.index(k) for k in keys])
    reward = torch.tensor([r for r, _ in distinct], dtype=torch.float64)
    length = torch.tensor([n for _, n in distinct], dtype=torch.float64)
    return index, reward, length


def _reward_value(reward: Callable, prompt: str, completion: tuple[str, ...]) -> float:
    """reward(prompt, completion) as a float, after checking it is a finite number."""
    value = reward(prompt, completion)
    try:
        if isinstance(value, str):
            raise TypeError
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"reward must return a number for every (prompt, completion), got {value!r:.60} "
                        f"({type(value).__name__}) for ({prompt!r}, {completion!r}); return a float, e.g. 1.0 "
                        "or 0.0") from None
    if not math.isfinite(v):
        raise ValueError(f"reward must return a finite number, got {v} for ({prompt!r}, {completion!r})")
    return v


def _multisets(q: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every multiset of `group_size` types (n, G) and its probability (n,) when each draw is
    type v with probability q[v]."""
    sets = torch.tensor(list(itertools.combinations_with_replacement(range(q.numel()), group_size)))
    counts = torch.zeros(sets.size(0), q.numel(), dtype=torch.float64).scatter_add_(
        1, sets, torch.ones_like(sets, dtype=torch.float64))
    log_ways = math.lgamma(group_size + 1) - torch.lgamma(counts + 1).sum(1)
    return sets, (log_ways + (counts * q.log()).sum(1)).exp()


def _per_completion(estimator: Estimator, r: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """The part of c_i that the group alone sets (n, G), from its rewards and lengths (n, G)."""
    g = r.size(-1)
    a = r - r.mean(-1, keepdim=True)  # 'group_mean', and 'batch_std' before the batch's std
    if estimator.advantage == "leave_one_out":
        a = a * g / (g - 1)
    elif estimator.advantage == "group_std":
        a = a / (r.std(-1, keepdim=True) + EPS)
    return a / length if estimator.aggregation == "sequence_mean" else a


def _batch_factor(estimator: Estimator, r: torch.Tensor, length: torch.Tensor, other_ss: torch.Tensor,
                  other_len: torch.Tensor, horizon: int) -> torch.Tensor:
    """The factor of c_i shared by the whole group (n, Z), given the other group's summaries (Z,):
    the aggregation's count (over a batch of two groups) and, for 'batch_std', 1 / the batch's std."""
    g = r.size(-1)
    factor = {"sequence_sum": 1.0 / (2 * g), "sequence_mean": 1.0 / (2 * g), "constant": 1.0 / (2 * g * horizon)}
    if estimator.aggregation == "token_mean":  # one mean over every token of the batch
        k = 1.0 / (length.sum(-1, keepdim=True) + other_len[None, :])
    else:
        k = torch.full((r.size(0), other_len.numel()), factor[estimator.aggregation], dtype=torch.float64)
    if estimator.advantage == "batch_std":  # the batch's centred values have mean 0
        ss = ((r - r.mean(-1, keepdim=True)) ** 2).sum(-1, keepdim=True) + other_ss[None, :]
        k = k / ((ss / (2 * g - 1)).sqrt() + EPS)
    return k


def _summaries(sets: torch.Tensor, prob: torch.Tensor, reward: torch.Tensor, length: torch.Tensor,
               estimator: Estimator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distribution of what the *other* group contributes: its centred sum of squares (for
    'batch_std') and its total length (for 'token_mean'), distinct values and their probabilities."""
    r = reward[sets]
    ss = ((r - r.mean(1, keepdim=True)) ** 2).sum(1) if estimator.advantage == "batch_std" else torch.zeros_like(prob)
    tokens = length[sets].sum(1) if estimator.aggregation == "token_mean" else torch.zeros_like(prob)
    keys = torch.stack([ss.round(decimals=9), tokens], 1)
    distinct, where = torch.unique(keys, dim=0, return_inverse=True)
    return distinct[:, 0], distinct[:, 1], torch.zeros(distinct.size(0), dtype=torch.float64).index_add_(0, where, prob)


def moments(mdp: MicroMDP, logits: torch.Tensor, estimator: Estimator, group_size: int,
            behaviour: torch.Tensor | None = None,
            reward: Callable[[str, tuple[str, ...]], float] = micro.total_reward) -> Moments:
    """E[g] and Var g of `estimator`'s update from one group of `group_size` completions of each
    prompt, sampled from `behaviour` (default: the policy `logits` itself), exactly. reward(prompt,
    completion): the scalar the group normalizes, the world's return by default (lesson 13 adds a
    format bonus)."""
    _check_policy(mdp, logits)
    behaviour = logits if behaviour is None else behaviour
    _check_policy(mdp, behaviour, "behaviour")
    _check_estimator(estimator)
    validate.integer("group_size", group_size, minimum=2)
    if not callable(reward):
        raise TypeError(f"reward must be a function reward(prompt, completion) -> float, such as "
                        f"micro.total_reward; got {type(reward).__name__}")
    if len(mdp.prompts) != 2:
        raise ValueError("the batch here is one group of each of the micro world's two prompts")
    mu = torch.softmax(behaviour.detach().double(), dim=-1)
    parts = {}
    for p in mdp.prompts:
        index, rewards, length = _types(mdp, p, reward)
        probs = mdp.completion_probs(torch.log(mu), p)  # mu's probability of each completion
        f = completion_scores(mdp, logits, behaviour, p, estimator)  # (2, n, D)
        q = torch.zeros(rewards.numel(), dtype=torch.float64).index_add_(0, index, probs)
        mean_f = torch.zeros(2, q.numel(), f.size(-1), dtype=torch.float64).index_add_(1, index, probs[:, None] * f) / q[:, None]
        second = torch.zeros(2, q.numel(), dtype=torch.float64).index_add_(1, index, probs * (f * f).sum(-1)) / q
        var_f = second - (mean_f * mean_f).sum(-1)  # (2, V)
        sets, set_prob = _multisets(q, group_size)
        parts[p] = (rewards, length, mean_f, var_f, sets, set_prob)
    total_mean, total_second = 0.0, 0.0
    for p, other in zip(mdp.prompts, reversed(mdp.prompts)):
        rewards, length, mean_f, var_f, sets, set_prob = parts[p]
        o_ss, o_len, o_prob = _summaries(*parts[other][4:6], *parts[other][:2], estimator)
        a = _per_completion(estimator, rewards[sets], length[sets])  # (n, G)
        k = _batch_factor(estimator, rewards[sets], length[sets], o_ss, o_len, mdp.horizon)  # (n, Z)
        k1, k2 = k @ o_prob, (k * k) @ o_prob  # E_z k and E_z k^2, (n,)
        sign = (a < 0).long()  # 0: the positive-advantage score, 1: the negative one (k > 0)
        u = (a[..., None] * mean_f[sign, sets]).sum(1)  # (n, D): sum_i a_i E f_i
        noise = (a * a * var_f[sign, sets]).sum(1)  # (n,): sum_i a_i^2 Var f_i
        total_mean = total_mean + ((set_prob * k1)[:, None] * u).sum(0)
        total_second += float((set_prob * k2 * ((u * u).sum(1) + noise)).sum())
    mean = total_mean.view(mdp.shape)
    return Moments(mean, total_second - float((mean * mean).sum()))
