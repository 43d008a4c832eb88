"""What a group-normalized advantage does to the rewards it is given, exactly on the micro world.

The world's goal reward is the correctness signal: `correct` is 1 when a completion ends with EOS
and contains the prompt's goal token. Beside it, a format signal of the kind RLVR recipes add:
`formatted` is 1 when the answer is closed (ends with EOS) within two tokens, so a correct answer
can be unformatted ("ab<eos>") and a wrong one formatted ("a<eos>").

- `with_bonus(weight)`: correct + weight * formatted, the additive format bonus. Group
  normalization divides by the group's std, so in a group whose answers are all equally correct
  the bonus alone sets the advantages, at full strength whatever its weight (down to the eps of
  the std).
- `sum_then_normalize` and `normalize_then_sum`: two rewards combined before or after each is
  normalized in its group; `misranking_probability` is the exact chance that a group sampled
  from a policy gives some wrong answer a higher advantage than some correct one.
- `random_reward_drift`: a reward that is a fair coin, independent of the completion, has zero
  policy gradient; the exact expected change of the policy after several inner steps of GRPO's
  clipped loss on one group, over every group and every draw of the coins.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core import validate
from ..core.advantages import group_normalize
from ..core.losses import grpo_loss
from ..core.ops import check_finite, check_float
from . import micro
from .group_updates import _check_policy, _check_prompt, _multisets
from .mdp import MicroMDP

__all__ = ["correct", "formatted", "with_bonus", "sum_then_normalize", "normalize_then_sum", "COMBINATIONS",
           "misranking_probability", "Drift", "random_reward_drift"]



def _check_completion(prompt, completion) -> None:
    """A prompt of the micro world and a completion: a non-empty tuple of tokens."""
    if prompt not in micro.PROMPTS:
        raise ValueError(f"unknown prompt {prompt!r}; the micro world's prompts are {micro.PROMPTS}")
    if not isinstance(completion, tuple) or not completion:
        raise TypeError(f"completion must be a non-empty tuple of tokens such as ('a', {micro.EOS!r}), got "
                        f"{completion!r:.60}")


def correct(prompt: str, completion: tuple[str, ...]) -> float:
    """1 when the completion ends with EOS and contains the prompt's goal token (the world's goal reward)."""
    _check_completion(prompt, completion)
    return micro.terminal_reward(prompt, completion) / micro.GOAL_REWARD


def formatted(prompt: str, completion: tuple[str, ...]) -> float:
    """1 when the completion is closed by EOS within two tokens (its own token and EOS)."""
    _check_completion(prompt, completion)
    return float(completion[-1] == micro.EOS and len(completion) <= 2)


def with_bonus(weight: float) -> Callable[[str, tuple[str, ...]], float]:
    """The reward correct + weight * formatted."""
    validate.number("weight", weight, 0.0)
    return lambda prompt, completion: correct(prompt, completion) + weight * formatted(prompt, completion)


def _check_rewards(rewards: torch.Tensor, weights: torch.Tensor) -> None:
    """rewards (..., G, K) finite floats, weights (K,) finite floats, G >= 2."""
    check_float("rewards", rewards)
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a torch.Tensor of one weight per reward, e.g. torch.tensor([1.0, 1.0], "
                        f"dtype=torch.float64); got {type(weights).__name__}")
    check_float("weights", weights)
    if weights.dim() != 1:
        raise ValueError(f"weights must be 1-D, one weight per reward (K,), got shape {tuple(weights.shape)}")
    if rewards.dim() < 2 or rewards.size(-1) != weights.numel():
        raise ValueError(f"rewards are (..., G, K) with one column per weight ({weights.numel()}), "
                         f"got shape {tuple(rewards.shape)}")
    if rewards.size(-2) < 2:
        raise ValueError("a group needs at least two completions to normalize")
    check_finite("rewards", rewards)
    check_finite("weights", weights)


def _normalize(r: torch.Tensor) -> torch.Tensor:
    """`group_normalize` along dim -1 (each row of r a group)."""
    return group_normalize(r.reshape(-1), r.size(-1)).view_as(r)


def sum_then_normalize(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Advantages (..., G) of the weighted sum of K rewards (..., G, K), normalized in the group."""
    _check_rewards(rewards, weights)
    return _normalize(rewards @ weights.to(rewards.dtype))


def normalize_then_sum(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each of the K rewards (..., G, K) normalized in the group, then the weighted sum (..., G)."""
    _check_rewards(rewards, weights)
    return _normalize(rewards.transpose(-1, -2)).transpose(-1, -2) @ weights.to(rewards.dtype)


COMBINATIONS = {"sum then normalize": sum_then_normalize, "normalize then sum": normalize_then_sum}


def misranking_probability(mdp: MicroMDP, logits: torch.Tensor, group_size: int,
                           combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                           weights: tuple[float, float] = (1.0, 1.0)) -> float:
    """The probability that a group of `group_size` completions of a prompt (the prompts equally
    likely) sampled from the policy gives some wrong answer a strictly higher advantage than some
    correct one, when the advantages are `combine`((correct, formatted) rewards, weights); exact,
    over every multiset of the four (correct, formatted) types. combine may also be named by its key in
    COMBINATIONS ('sum then normalize', 'normalize then sum')."""
    _check_policy(mdp, logits)
    validate.integer("group_size", group_size, minimum=2)
    if isinstance(combine, str):
        validate.choice("combine", combine, list(COMBINATIONS))
        combine = COMBINATIONS[combine]
    if not callable(combine):
        raise TypeError(f"combine must be a function (rewards, weights) -> advantages, e.g. "
                        f"reward_design.sum_then_normalize or a key of COMBINATIONS; got {type(combine).__name__}")
    if isinstance(weights, torch.Tensor) and weights.dim() == 1:
        weights = weights.tolist()
    if not isinstance(weights, (tuple, list)) or len(weights) != 2:
        raise ValueError(f"weights must be a pair (weight of correct, weight of formatted), e.g. (1.0, 0.5); "
                         f"got {weights!r:.60}")
    weights = tuple(validate.number(f"weights[{k}]", x) for k, x in enumerate(weights))
    types = torch.tensor(list(itertools.product((0.0, 1.0), repeat=2)), dtype=torch.float64)  # (4, 2)
    w = torch.tensor(weights, dtype=torch.float64)
    total = 0.0
    for p in mdp.prompts:
        probs = mdp.completion_probs(logits.detach().double(), p)
        q = torch.zeros(len(types), dtype=torch.float64)
        for c, prob in zip(mdp.completions, probs):
            q[2 * int(correct(p, c)) + int(formatted(p, c))] += prob
        sets, prob = _multisets(q, group_size)
        r = types[sets]  # (n, G, 2)
        a = combine(r, w)  # (n, G)
        if not isinstance(a, torch.Tensor) or a.shape != r.shape[:-1]:
            raise ValueError(f"combine must return one advantage per completion, shape {tuple(r.shape[:-1])} for "
                             f"rewards of shape {tuple(r.shape)}; got "
                             f"{tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__}")
        right = r[..., 0] == 1
        best_wrong = torch.where(right, -math.inf, a).amax(-1)
        worst_right = torch.where(right, a, math.inf).amin(-1)
        total += float(prob[best_wrong > worst_right + 1e-9].sum())
    return total / len(mdp.prompts)


@dataclass(frozen=True)
class Drift:
    """Where one round of updates on a random reward takes the policy, in expectation over every
    group and every draw of the rewards.

    step            E[theta_after - theta] (n_states, n_actions): the systematic part of the update
    before, after   the completions' probabilities (n_completions,) before, and their expectation after
    entropy_change  E[H(pi_after)] - H(pi) of the completion distribution (nats): the systematic
                    drift and the spread that zero-mean noise adds
    mean_step_entropy_change   H(pi at theta + step) - H(pi): the systematic drift alone"""
    step: torch.Tensor
    before: torch.Tensor
    after: torch.Tensor
    entropy_change: float
    mean_step_entropy_change: float


def _completion_log_probs(mdp: MicroMDP, logits: torch.Tensor, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log pi of every completion of `prompt` (..., n_completions, K) for a batch of
    tabular policies logits (..., n_states, n_actions), and the tokens' mask (n_completions, K)."""
    t = mdp.table
    rows = torch.tensor([n for n in range(t.prompt.numel()) if mdp.prompts[t.prompt[n]] == prompt])
    logp = torch.log_softmax(logits, dim=-1)[..., t.states[rows], t.actions[rows]]
    return logp * t.mask[rows], t.mask[rows]


def random_reward_drift(mdp: MicroMDP, logits: torch.Tensor, prompt: str, group_size: int, inner_steps: int,
                        lr: float, clip_eps: float | None = 0.2) -> Drift:
    """The expected effect of `inner_steps` gradient steps (plain SGD, rate lr) of GRPO's loss
    (`minirl.core.losses.grpo_loss`: group-std advantages, token ratios against the policy that
    sampled, sequence mean, no KL) on one group of `group_size` completions of `prompt`, whose
    rewards are fair coins drawn independently of the completions. clip_eps None: no clip (the
    ratio's gradient unbounded). Exact: every multiset of completions, every draw of the coins."""
    _check_policy(mdp, logits)
    validate.integer("group_size", group_size, minimum=2)
    validate.integer("inner_steps", inner_steps)
    validate.number("lr", lr, 0.0, open_low=True)
    if clip_eps is not None:
        validate.number("clip_eps", clip_eps, 0.0, finite=False)
    _check_prompt(mdp, prompt)
    theta0 = logits.detach().double()
    old, mask = _completion_log_probs(mdp, theta0, prompt)  # (n, K)
    seq_logp = old.sum(-1)
    sets, set_prob = _multisets(seq_logp.exp(), group_size)  # (S, G), (S,)
    coins = torch.tensor(list(itertools.product((0.0, 1.0), repeat=group_size)), dtype=torch.float64)  # (C, G)
    items = sets.repeat_interleave(coins.size(0), 0)  # (S*C, G): every group with every draw
    rewards = coins.repeat(sets.size(0), 1)
    weight = set_prob.repeat_interleave(coins.size(0)) / coins.size(0)
    adv = group_normalize(rewards.flatten(), group_size)  # (S*C*G,)
    theta = theta0.expand(items.size(0), *theta0.shape).clone().requires_grad_(True)
    m = mask[items].flatten(0, 1).bool()  # (S*C*G, K)
    old_tokens = old[items].flatten(0, 1)
    eps = math.inf if clip_eps is None else clip_eps
    for _ in range(inner_steps):
        logp, _ = _completion_log_probs(mdp, theta, prompt)
        new_tokens = logp.gather(1, items[..., None].expand(-1, -1, logp.size(-1))).flatten(0, 1)
        loss, _ = grpo_loss(new_tokens, old_tokens, old_tokens, adv, m, clip_eps=eps, beta=0.0)
        grad, = torch.autograd.grad(loss * items.size(0), theta)  # each group's own loss, summed
        theta = (theta - lr * grad).detach().requires_grad_(True)
    theta = theta.detach()
    after = _completion_log_probs(mdp, theta, prompt)[0].sum(-1).exp()  # (S*C, n)
    step = torch.einsum("b,bsa->sa", weight, theta - theta0)
    entropy = float(_entropy(mdp, theta0, prompt))
    return Drift(step, seq_logp.exp(), weight @ after, float(weight @ _entropy(mdp, theta, prompt)) - entropy,
                 float(_entropy(mdp, theta0 + step, prompt)) - entropy)


def _entropy(mdp: MicroMDP, logits: torch.Tensor, prompt: str) -> torch.Tensor:
    """The entropy of the completion distribution of `prompt` (...,) for policies logits (..., S, A)."""
    logp = _completion_log_probs(mdp, logits, prompt)[0].sum(-1)
    return -(logp.exp() * logp).sum(-1)
