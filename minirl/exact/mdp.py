"""The micro world as a token-level MDP <S, A, T, R, gamma, K>, solved exactly by enumeration.

    S      states: (prompt, prefix), every prefix of fewer than K tokens without EOS
    A      actions: the tokens a, b, c and EOS
    T      deterministic: (prompt, prefix) --a--> (prompt, prefix + a); the episode ends after
           EOS or when the prefix reaches K tokens (truncation is part of the MDP)
    R      r(s, a): the step reward of a, plus the terminal reward when a ends the episode
    gamma  discount, 1 by default
    K      horizon, micro.HORIZON by default

A tabular policy is a logits tensor `theta` of shape (n_states, n_actions), one row per state:
pi(a | s) = softmax(theta[s])[a]. Everything below is a finite sum over the 40 completions of
each prompt, so J(theta), V, Q and the policy gradient are exact.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from ..core import validate
from ..core.ops import check_finite, check_float
from . import micro

__all__ = ["Episodes", "MicroMDP", "bias_and_variance"]


@dataclass(frozen=True)
class Episodes:
    """Every (prompt, completion) of the micro world as padded tensors, for exact sums in one pass:
    N = n_prompts * n_completions rows, prompt by prompt in the order of `MicroMDP.completions`;
    K = the horizon."""
    prompt: torch.Tensor  # (N,) index into MicroMDP.prompts
    states: torch.Tensor  # (N, K) state index of step t (0 on padding)
    actions: torch.Tensor  # (N, K) action index of step t (0 on padding)
    mask: torch.Tensor  # (N, K) float64: 1 on the episode's steps
    rewards: torch.Tensor  # (N, K) float64: r(s_t, a_t), the terminal reward included on the last step


class MicroMDP:
    def __init__(self, gamma: float = 1.0, horizon: int = micro.HORIZON):
        """horizon: the longest completion K (the world's is 3; lesson 12 varies it to watch
        imitation errors compound). Rewards do not depend on it."""
        self.gamma = validate.number("gamma", gamma, 0.0, 1.0)
        self.prompts = micro.PROMPTS
        self.actions = micro.ACTIONS
        self.horizon = validate.integer("horizon", horizon)
        self.states = [(p, prefix) for p in self.prompts for n in range(self.horizon)
                       for prefix in itertools.product(micro.TOKENS, repeat=n)]
        self.state_index = {s: i for i, s in enumerate(self.states)}
        self.completions = micro.completions(self.horizon)
        self._episodes = set(self.completions)
        self.table = self._episode_table()

    def _episode_table(self) -> Episodes:
        rows = [(i, p, c) for i, p in enumerate(self.prompts) for c in self.completions]
        shape = (len(rows), self.horizon)
        states, actions = torch.zeros(shape, dtype=torch.long), torch.zeros(shape, dtype=torch.long)
        mask, rewards = torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
        for n, (_, p, c) in enumerate(rows):
            for t, (s, a) in enumerate(self.steps(p, c)):
                states[n, t], actions[n, t], mask[n, t] = s, a, 1.0
            rewards[n, : len(c)] = torch.tensor(micro.step_rewards(p, c), dtype=torch.float64)
        return Episodes(torch.tensor([i for i, _, _ in rows]), states, actions, mask, rewards)

    def check_logits(self, logits: torch.Tensor, name: str = "logits", minus_inf: bool = True) -> None:
        """A tabular policy: a float tensor of shape (n_states, n_actions) with no NaN or +inf, and some action
        possible in every state; -inf (an action never taken, as `imitation.greedy_expert` writes it) only
        with `minus_inf` (where it would make 0 * inf = NaN, callers pass False)."""
        check_float(name, logits)
        if tuple(logits.shape) != self.shape:
            raise ValueError(f"{name}: a tabular policy's logits have shape {self.shape} (states x actions), "
                             f"got {tuple(logits.shape)}")
        if not minus_inf:
            check_finite(name, logits, " (a tabular policy's logits; for an action never taken use a large "
                                       "negative logit such as -30, not -inf, which makes 0 * inf = NaN here)")
            return
        bad = torch.isnan(logits) | (logits == torch.inf)
        if bool(bad.any()):
            s, a = bad.nonzero()[0].tolist()
            raise ValueError(f"{name} holds NaN or +inf ({logits[s, a].item()} at state {s}, action {a}); a tabular "
                             "policy's logits are finite, or -inf for an action it never takes")
        dead = (logits == -torch.inf).all(dim=1).nonzero().flatten().tolist()
        if dead:
            raise ValueError(f"{name} are -inf for every action in {len(dead)} states (the first: state {dead[0]}, "
                             f"{self.states[dead[0]]}); each state needs at least one action with a finite logit")

    def check_episode(self, prompt: str, completion: tuple[str, ...]) -> None:
        """A prompt of the world and a whole completion: a tuple of actions ending at EOS or the horizon."""
        if prompt not in self.prompts:
            raise ValueError(f"unknown prompt {prompt!r}; the micro world's prompts are {self.prompts}")
        if not isinstance(completion, tuple) or completion not in self._episodes:
            raise ValueError(f"{completion!r} is not a completion of the micro world: a tuple of actions from "
                             f"{self.actions} that ends with EOS (only there) or reaches {self.horizon} tokens, "
                             f"e.g. ('a', {micro.EOS!r})")

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of a tabular policy's logits: (n_states, n_actions)."""
        return len(self.states), len(self.actions)

    def ends(self, prefix: tuple[str, ...], action: str) -> bool:
        """Does taking `action` after `prefix` end the episode (EOS, or the K-th token)?"""
        return action == micro.EOS or len(prefix) + 1 == self.horizon

    def reward(self, prompt: str, prefix: tuple[str, ...], action: str) -> float:
        """r(s, a), the terminal reward included when `action` ends the episode."""
        r = micro.STEP_REWARD[prompt][action]
        if self.ends(prefix, action):
            r += micro.terminal_reward(prompt, prefix + (action,))
        return r

    def steps(self, prompt: str, completion: tuple[str, ...]) -> list[tuple[int, int]]:
        """(state index, action index) of each step of a completion."""
        self.check_episode(prompt, completion)
        return [(self.state_index[(prompt, completion[:t])], self.actions.index(a)) for t, a in enumerate(completion)]

    def discounted_return(self, prompt: str, completion: tuple[str, ...]) -> float:
        """R(tau) = sum_t gamma^t r_t."""
        self.check_episode(prompt, completion)
        return sum(self.gamma**t * r for t, r in enumerate(micro.step_rewards(prompt, completion)))

    # ------------------------------------------------------------ probabilities and J
    def log_prob(self, logits: torch.Tensor, prompt: str, completion: tuple[str, ...]) -> torch.Tensor:
        """log pi(tau | prompt) = sum_t log pi(a_t | s_t) (transitions are deterministic, so they add nothing)."""
        self.check_logits(logits)
        logp = torch.log_softmax(logits, dim=-1)
        return sum(logp[s, a] for s, a in self.steps(prompt, completion))

    def completion_probs(self, logits: torch.Tensor, prompt: str) -> torch.Tensor:
        """(n_completions,) probability of each completion of `prompt`; sums to 1."""
        return torch.stack([self.log_prob(logits, prompt, c) for c in self.completions]).exp()

    def returns(self, prompt: str) -> torch.Tensor:
        """(n_completions,) R(tau) of each completion of `prompt`."""
        return torch.tensor([self.discounted_return(prompt, c) for c in self.completions], dtype=torch.float64)

    def objective(self, logits: torch.Tensor) -> torch.Tensor:
        """J(theta) = mean over prompts of sum_tau pi(tau) R(tau); differentiable in `logits`."""
        per_prompt = [(self.completion_probs(logits, p) * self.returns(p).to(logits.dtype)).sum() for p in self.prompts]
        return torch.stack(per_prompt).mean()

    def episode_log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(N,) log pi(tau | prompt) of every episode of `self.table`, in one pass."""
        self.check_logits(logits)
        t = self.table
        return (torch.log_softmax(logits, dim=-1)[t.states, t.actions] * t.mask).sum(dim=1)

    def weighted_scores(self, logits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """(N, n_states, n_actions): sum_t weights[:, t] grad_theta log pi(a_t | s_t) for every episode
        of `self.table`; weights (N, K) (a return on every step, reward-to-go, an advantage ...)."""
        self.check_logits(logits)
        t, pi = self.table, torch.softmax(logits.detach(), dim=-1)
        rows = torch.arange(t.states.size(0))
        out = torch.zeros(rows.numel(), *self.shape, dtype=pi.dtype)
        for k in range(self.horizon):
            g = -pi[t.states[:, k]]  # (N, A): grad log pi(a | s) = onehot(a) - pi(. | s) on row s
            g[rows, t.actions[:, k]] += 1.0
            out[rows, t.states[:, k]] += (weights[:, k] * t.mask[:, k])[:, None] * g
        return out

    # ------------------------------------------------------------ the exact gradient
    def score(self, logits: torch.Tensor, prompt: str, completion: tuple[str, ...]) -> torch.Tensor:
        """grad_theta log pi(tau), by hand: at each visited state s_t, onehot(a_t) - pi(. | s_t)."""
        self.check_logits(logits)
        pi = torch.softmax(logits, dim=-1)
        g = torch.zeros_like(logits)
        for s, a in self.steps(prompt, completion):
            g[s] -= pi[s]
            g[s, a] += 1.0
        return g

    def exact_gradient(self, logits: torch.Tensor) -> torch.Tensor:
        """grad J = mean over prompts of sum_tau pi(tau) R(tau) grad log pi(tau), by enumeration."""
        logits = logits.detach()
        grad = torch.zeros_like(logits)
        for p in self.prompts:
            probs, returns = self.completion_probs(logits, p), self.returns(p)
            for c, prob, ret in zip(self.completions, probs, returns):
                grad += prob * ret * self.score(logits, p, c)
        return grad / len(self.prompts)

    # ------------------------------------------------------------ values
    def values(self, logits: torch.Tensor) -> torch.Tensor:
        """V(s) for every state (n_states,): V(s) = sum_a pi(a|s) Q(s, a)."""
        return (torch.softmax(logits.detach(), dim=-1) * self.q_values(logits)).sum(dim=-1)

    def q_values(self, logits: torch.Tensor) -> torch.Tensor:
        """Q(s, a) = r(s, a) + gamma V(s') (0 after the episode ends), (n_states, n_actions)."""
        self.check_logits(logits)
        pi = torch.softmax(logits.detach(), dim=-1)
        return self.backward_q(lambda s, q_s: (pi[s] * q_s).sum(), pi.dtype)

    def backward_q(self, state_value, dtype=torch.float64, rewards: torch.Tensor | None = None) -> torch.Tensor:
        """Backward induction from the horizon: Q(s, a) = r(s, a) + gamma V(s') (0 after the end),
        with V(s) = state_value(s, Q(s, .)) once every longer prefix is done. (n_states, n_actions).
        rewards: a table r(s, a) (n_states, n_actions) to use instead of the world's reward."""
        q = torch.zeros(len(self.states), len(self.actions), dtype=dtype)
        v = torch.zeros(len(self.states), dtype=dtype)
        for s in sorted(range(len(self.states)), key=lambda i: -len(self.states[i][1])):  # longest prefix first
            prompt, prefix = self.states[s]
            for a, action in enumerate(self.actions):
                q[s, a] = self.reward(prompt, prefix, action) if rewards is None else rewards[s, a]
                if not self.ends(prefix, action):
                    q[s, a] += self.gamma * v[self.state_index[(prompt, prefix + (action,))]]
            v[s] = state_value(s, q[s])
        return q

    # ------------------------------------------------------------ KL-regularized RL
    def kl(self, logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
        """KL(pi || pi_ref) over whole completions, mean over prompts; differentiable in `logits`."""
        per_prompt = []
        for p in self.prompts:
            probs = self.completion_probs(logits, p)
            per_prompt.append((probs * (probs.log() - self.completion_probs(ref_logits, p).log())).sum())
        return torch.stack(per_prompt).mean()

    def regularized_objective(self, logits: torch.Tensor, ref_logits: torch.Tensor, beta: float) -> torch.Tensor:
        """J(theta) - beta * KL(pi_theta || pi_ref): what PPO-RLHF maximizes with R_total = r - beta*KL."""
        return self.objective(logits) - beta * self.kl(logits, ref_logits)

    def partition(self, ref_logits: torch.Tensor, beta: float, prompt: str) -> torch.Tensor:
        """Z(x) = sum_tau pi_ref(tau | x) exp(R(tau) / beta)."""
        validate.number("beta", beta, 0.0, open_low=True)
        return (self.completion_probs(ref_logits, prompt) * torch.exp(self.returns(prompt) / beta)).sum()

    def optimal_completion_probs(self, ref_logits: torch.Tensor, beta: float, prompt: str) -> torch.Tensor:
        """The maximizer of J - beta*KL over all distributions on completions, in closed form:
        pi*(tau | x) = pi_ref(tau | x) exp(R(tau) / beta) / Z(x)."""
        return self.completion_probs(ref_logits, prompt) * torch.exp(self.returns(prompt) / beta) / self.partition(
            ref_logits, beta, prompt)

    def optimal_logits(self, ref_logits: torch.Tensor, beta: float) -> torch.Tensor:
        """A tabular policy whose completions follow pi*: logits(s, a) = log pi_ref(a|s) + Q_soft(s, a) / beta,
        with the soft values Q_soft(s, a) = r(s, a) + V_soft(s') and V_soft(s) = beta log sum_a
        pi_ref(a|s) exp(Q_soft(s, a) / beta) (0 after the end), computed backwards from the horizon.
        Needs gamma = 1 (the closed form above is for undiscounted returns)."""
        if self.gamma != 1.0:
            raise ValueError("the closed-form optimum is for gamma = 1")
        self.check_logits(ref_logits)
        validate.number("beta", beta, 0.0, open_low=True)
        log_ref = torch.log_softmax(ref_logits.detach().double(), dim=-1)
        q = self.backward_q(lambda s, q_s: beta * torch.logsumexp(log_ref[s] + q_s / beta, dim=0), log_ref.dtype)
        return log_ref + q / beta

    def soft_value_iteration(self, rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """MaxEnt soft value iteration for a reward table r(s, a) (n_states, n_actions), backwards from
        the horizon: Q(s, a) = r(s, a) + V(s') (0 after the end), V(s) = log sum_a exp Q(s, a).
        Returns (Q, V). The policy pi(a | s) = exp(Q(s, a) - V(s)), i.e. logits Q, writes each
        completion with probability exp(R(tau)) / Z(x), R the sum of its step rewards, and
        Z(x) = exp V(prompt state) is the partition function over completions, each counted once
        (a uniform base measure; `optimal_logits` uses pi_ref's instead). Needs gamma = 1."""
        if self.gamma != 1.0:
            raise ValueError("soft value iteration here is for gamma = 1")
        check_float("rewards", rewards)
        if tuple(rewards.shape) != self.shape:
            raise ValueError(f"a reward table has shape {self.shape} (states x actions), got {tuple(rewards.shape)}")
        q = self.backward_q(lambda s, q_s: torch.logsumexp(q_s, dim=0), rewards.dtype, rewards=rewards)
        return q, torch.logsumexp(q, dim=1)

    # ------------------------------------------------------------ sampling
    def sample(self, logits: torch.Tensor, n: int, generator: torch.Generator | None = None) -> list[tuple[str, tuple[str, ...]]]:
        """n episodes (prompt, completion): the prompt uniformly at random, then tokens from pi."""
        self.check_logits(logits)
        validate.integer("n", n, minimum=0)
        validate.generator_type(generator)
        pi = torch.softmax(logits.detach().double(), dim=-1)
        episodes = []
        for i in torch.randint(len(self.prompts), (n,), generator=generator).tolist():
            prompt, prefix = self.prompts[i], ()
            while True:
                a = self.actions[int(torch.multinomial(pi[self.state_index[(prompt, prefix)]], 1, generator=generator))]
                prefix += (a,)
                if self.ends(prefix[:-1], a):
                    break
            episodes.append((prompt, prefix))
        return episodes

    def monte_carlo_values(self, logits: torch.Tensor, episodes: int,
                           generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A learned critic whose truth is known: V_hat(s) = the mean discounted return-to-go seen
        from s over `episodes` sampled episodes, and how many returns each mean averages. A state
        never visited gets V_hat = 0. Both (n_states,)."""
        totals = torch.zeros(len(self.states), dtype=torch.float64)
        visits = torch.zeros(len(self.states), dtype=torch.float64)
        for prompt, completion in self.sample(logits, episodes, generator):
            rewards = micro.step_rewards(prompt, completion)
            to_go = 0.0
            for t in reversed(range(len(completion))):
                to_go = rewards[t] + self.gamma * to_go
                s = self.state_index[(prompt, completion[:t])]
                totals[s] += to_go
                visits[s] += 1
        return totals / visits.clamp(min=1), visits


def bias_and_variance(terms: torch.Tensor, probs: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    """Exact bias |E g - exact| and variance E |g - E g|^2 of an estimator g that takes the value
    terms[i] (one tensor shaped like `exact`) with probability probs[i]."""
    if terms.shape[1:] != exact.shape or probs.shape != terms.shape[:1]:
        raise ValueError(f"terms {tuple(terms.shape)} need shape (n,) + exact.shape {tuple(exact.shape)} and probs (n,), "
                         f"got probs {tuple(probs.shape)}")
    if bool((probs < 0).any()) or abs(float(probs.sum()) - 1) > 1e-4:
        raise ValueError(f"probs must be a distribution (>= 0, summing to 1); they sum to {float(probs.sum()):.6g}")
    mean = (probs.view(-1, *[1] * exact.dim()) * terms).sum(0)
    variance = (probs * (terms - mean).flatten(1).pow(2).sum(1)).sum()
    return (mean - exact).norm().item(), variance.item()
