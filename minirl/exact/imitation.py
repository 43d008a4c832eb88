"""Behaviour cloning on the micro world, its compounding error, and DAgger (Ross et al. 2011),
everything exact except the demonstrations themselves.

Behaviour cloning is SFT: maximize the likelihood of the expert's actions in the expert's states.
For a tabular policy the maximizer is the expert's action frequencies in each state it visited
(`behaviour_cloning`, with add-alpha smoothing, so a state the demonstrations never reached gets
the uniform policy). The learner is then judged where it actually goes: its own states, which
drift from the expert's once it errs, and errors there were never trained on. `state_visitation`
gives each policy's exact probability of reaching each state, so the per-step error under the
expert's states and under the learner's own are finite sums. DAgger fixes the mismatch by
rolling out the learner, asking the expert (known exactly here) what it would do in the states the
learner reached, and refitting on everything gathered so far.
"""
from __future__ import annotations

import torch

from ..core import validate
from ..core.ops import check_float
from .mdp import MicroMDP

__all__ = ["reward_table", "expert_logits", "greedy_expert", "state_visitation", "expected_return", "action_counts",
           "behaviour_cloning", "total_variation", "per_step_error", "dagger"]


def _check_mdp(mdp) -> MicroMDP:
    if not isinstance(mdp, MicroMDP):
        raise TypeError(f"mdp must be a MicroMDP, e.g. MicroMDP(); got {type(mdp).__name__}")
    return mdp


def _check_policy(mdp: MicroMDP, logits: torch.Tensor, name: str = "logits") -> None:
    """A tabular policy of `mdp` (-inf for an action never taken is fine: `greedy_expert` writes it)."""
    _check_mdp(mdp).check_logits(logits, name)


def _check_episodes(episodes) -> None:
    """A list of (prompt, completion) pairs (each episode is then checked by `mdp.steps`)."""
    if not isinstance(episodes, list):
        raise ValueError(f"episodes must be a list of (prompt, completion) pairs such as [('x', ('a', '<eos>'))], "
                         f"got a {type(episodes).__name__}; wrap a single episode in a list")
    for n, e in enumerate(episodes):
        if not isinstance(e, (tuple, list)) or len(e) != 2:
            raise ValueError(f"episodes[{n}] must be a (prompt, completion) pair such as ('x', ('a', '<eos>')), "
                             f"got {e!r:.80}")


def reward_table(mdp: MicroMDP) -> torch.Tensor:
    """r(s, a) of the world, the terminal reward included, (n_states, n_actions)."""
    _check_mdp(mdp)
    return torch.tensor([[mdp.reward(p, prefix, a) for a in mdp.actions] for p, prefix in mdp.states],
                        dtype=torch.float64)


def expert_logits(mdp: MicroMDP, temperature: float) -> torch.Tensor:
    """The soft-optimal expert for the world's reward at a temperature: completions drawn with
    probability proportional to exp(R / temperature) (near-deterministic for a small temperature)."""
    validate.number("temperature", temperature, 0.0, open_low=True)
    return _check_mdp(mdp).soft_value_iteration(reward_table(mdp) / temperature)[0]


def greedy_expert(mdp: MicroMDP) -> torch.Tensor:
    """The deterministic expert: in each state the action with the highest optimal Q (plain value
    iteration, ties to the first of `mdp.actions`), as logits 0 there and -inf elsewhere."""
    q = _check_mdp(mdp).backward_q(lambda s, q_s: q_s.max())
    logits = torch.full(mdp.shape, -torch.inf, dtype=torch.float64)
    logits[torch.arange(len(mdp.states)), q.argmax(dim=1)] = 0.0
    return logits


def state_visitation(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """(n_states,) the probability that an episode (prompt uniform) passes through each state; a
    state is a prefix, so it is visited at most once, and the values sum to the expected length."""
    _check_policy(mdp, logits)
    pi = torch.softmax(logits.detach().double(), dim=-1)
    reach = torch.zeros(len(mdp.states), dtype=torch.float64)
    for s in sorted(range(len(mdp.states)), key=lambda i: len(mdp.states[i][1])):  # shortest prefix first
        prompt, prefix = mdp.states[s]
        if not prefix:
            reach[s] = 1 / len(mdp.prompts)
        for a, action in enumerate(mdp.actions):
            if not mdp.ends(prefix, action):
                reach[mdp.state_index[(prompt, prefix + (action,))]] += reach[s] * pi[s, a]
    return reach


def expected_return(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """J = sum over states of visitation(s) * sum_a pi(a | s) r(s, a), the prompt uniform: the same number
    as `mdp.objective`, in one pass over the states instead of one per completion."""
    _check_policy(mdp, logits)
    pi = torch.softmax(logits.detach().double(), dim=-1)
    return (state_visitation(mdp, logits) * (pi * reward_table(mdp)).sum(dim=1)).sum()


def action_counts(mdp: MicroMDP, episodes: list[tuple[str, tuple[str, ...]]]) -> torch.Tensor:
    """(n_states, n_actions) how often each action was taken in each state over (prompt, completion) episodes."""
    _check_mdp(mdp)
    _check_episodes(episodes)
    counts = torch.zeros(mdp.shape, dtype=torch.float64)
    for prompt, completion in episodes:
        for s, a in mdp.steps(prompt, completion):
            counts[s, a] += 1
    return counts


def behaviour_cloning(counts: torch.Tensor, alpha: float = 0.1) -> torch.Tensor:
    """Tabular logits maximizing the likelihood of the counted actions (the SFT loss's minimizer for
    a tabular policy), smoothed: pi(a | s) proportional to counts + alpha."""
    validate.number("alpha", alpha, 0.0, open_low=True)
    check_float("counts", counts)
    if counts.dim() != 2:
        raise ValueError(f"counts must have shape (n_states, n_actions), as action_counts gives, got "
                         f"{tuple(counts.shape)}")
    if not bool(torch.isfinite(counts).all()) or bool((counts < 0).any()):
        raise ValueError("counts must be finite and >= 0 (how often each action was taken in each state), got "
                         f"{'NaN or inf' if not bool(torch.isfinite(counts).all()) else 'negative'} entries")
    return torch.log(counts + alpha)


def total_variation(logits: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """(n_states,) the total-variation distance between two tabular policies in each state."""
    check_float("logits", logits)
    check_float("other", other)
    if logits.shape != other.shape or logits.dim() != 2:
        raise ValueError(f"logits and other must be two tabular policies of one shape (n_states, n_actions), got "
                         f"{tuple(logits.shape)} and {tuple(other.shape)}")
    return 0.5 * (torch.softmax(logits.double(), -1) - torch.softmax(other.double(), -1)).abs().sum(-1)


def per_step_error(mdp: MicroMDP, learner: torch.Tensor, expert: torch.Tensor, states_of: torch.Tensor) -> float:
    """The mean over the steps of an episode of TV(learner, expert) in the state reached, the states
    drawn from the policy `states_of` (the expert's, or the learner's own)."""
    d = state_visitation(mdp, states_of)
    _check_policy(mdp, learner, "learner")
    _check_policy(mdp, expert, "expert")
    return ((d * total_variation(learner, expert)).sum() / d.sum()).item()


def dagger(mdp: MicroMDP, expert: torch.Tensor, demos: list, rounds: int, episodes: int, generator: torch.Generator,
           alpha: float = 0.1) -> list[torch.Tensor]:
    """DAgger: start from behaviour cloning on `demos`; each round, roll out the current learner for
    `episodes` episodes, label every state it reached with the expert's action probabilities (the
    expert is known exactly, so a label is its whole distribution, not one sampled action), add them
    to the data and refit. Returns the learner's logits after each round (round 0 = BC)."""
    validate.integer("rounds", rounds, minimum=0)
    validate.integer("episodes", episodes, minimum=0)
    _check_policy(mdp, expert, "expert")
    _check_episodes(demos)
    pi_expert = torch.softmax(expert.double(), dim=-1)
    counts = action_counts(mdp, demos)
    learners = [behaviour_cloning(counts, alpha)]
    for _ in range(rounds):
        for prompt, completion in mdp.sample(learners[-1], episodes, generator):
            for s, _ in mdp.steps(prompt, completion):
                counts[s] += pi_expert[s]
        learners.append(behaviour_cloning(counts, alpha))
    return learners
