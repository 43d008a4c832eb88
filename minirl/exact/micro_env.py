"""The micro world with an environment turn: tokens the policy did not write, solved exactly.

An agent's episode interleaves the policy's tokens with the environment's (a tool's reply). Here
the policy writes a first token t1; unless it was EOS, the world replies with one observation
token o in OBSERVATIONS, drawn from P_env(o | prompt, t1) (`ENV_PROBS`); then the policy writes
again until EOS or its third token (micro.HORIZON policy tokens; the reply does not count). Rewards:

    r_t = STEP_REWARD[prompt][token] for each of the policy's tokens; the world's token earns nothing
    R   += GOAL_REWARD if the episode ended by EOS and the policy wrote GOAL[prompt][o] after o

so acting well means reading the observation. One softmax over VOCAB is written at every history,
as a language model's would be, from the logits

    logits(h) = theta[h] + w

`theta` (n_histories, n_vocab) has a row for every history where a token is written, the policy's
(where pi(. | h) = softmax(logits(h)) is sampled) and the world's (where the model's prediction
softmax(logits(h)) is never sampled; P_env writes instead). `w` (n_vocab,) is one bias shared by
every history, like a language model's output bias: the smallest parameter sharing there is. w = 0
and left untrained is the purely tabular model. J reads the policy's histories only.

The derivation (the log-derivative trick with environment transitions):

    P(tau | x) = prod_{policy t} pi(a_t | h_t) * prod_{world t} P_env(o_t | h_t)
    grad J = sum_tau P(tau) R(tau) grad log P(tau) = E[ R(tau) sum_{policy t} grad log pi(a_t | h_t) ]

because grad log P_env = 0. Training as if the policy had written the world's tokens (leaving them
in the loss mask) adds E[ R(tau) sum_{world t} grad log pi(o_t | h_t) ]. On theta this is
sum_{world h} P(h) sum_o P_env(o | h) E[R | h, o] (onehot(o) - pi(. | h)) on the world's rows: a
return-weighted fit of the model's prediction of the reply, not zero even at a constant return (then
it is c P(h) (P_env(. | h) - pi(. | h))). J never reads those rows, so on a purely tabular model the
policy's gradient is untouched and training on the wrong mask changes nothing the policy does. But w
enters every history's logits, so grad_w = sum_h grad_theta[h] (`MicroEnvMDP.gradient`): the world's
rows' term reaches w, and through w every decision of the policy. On w it is sum_{world h} P(h)
(sum_o P_env(o | h) E[R | h, o] onehot(o) - E[R | h] pi(. | h)): where the returns are positive it
moves probability towards u and v, the world's tokens, at the policy's own decisions too, where they
earn nothing. `estimator_bias` measures the bias on theta's policy rows (0) and on w (not 0);
`train` follows each estimator's exact expectation. Measured at lr 4, 25 steps, from zeros and 30
random starts: the as-if run ends 0.04 to 0.29 lower in J (0.16 from zeros), with u and v 7% to 32%
of the policy's own tokens against at most 5%. The damage is mostly a delay: the world's rows learn
to predict the reply, the term on w fades, and after 800 steps at lr 2 the median gap is 0.001; but
the detour can end on another plateau of J (a worse one from 2 of the 30 starts, a better one from 1).
The world's numbers (ENV_PROBS, STEP_REWARD) were not tuned to show any of this.

The history is the state: Q(h, a) after ("x", (t1, "u")) and after ("x", (t1, "v")) differ, and so
do their best tokens (`q_by_observation`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..core import validate
from ..core.ops import check_finite, check_float
from . import micro
from .mdp import bias_and_variance

__all__ = ["ENV_PROBS", "GOAL", "OBSERVATIONS", "STEP_REWARD", "VOCAB", "WHICH_TOKENS", "Episode", "EstimatorBias",
           "Gradient", "MicroEnvMDP", "Training"]

OBSERVATIONS = ("u", "v")
VOCAB = micro.TOKENS + OBSERVATIONS + (micro.EOS,)  # one softmax over these at every history
# the policy may write "u" or "v" itself: an ordinary token, worth nothing, and no observation
STEP_REWARD = {p: {**micro.STEP_REWARD[p], **{o: 0.0 for o in OBSERVATIONS}} for p in micro.PROMPTS}
# P_env(o | prompt, t1) for o = (u, v): depends on the prompt and on the policy's first token
ENV_PROBS = {
    "x": {"a": (0.7, 0.3), "b": (0.4, 0.6), "c": (0.9, 0.1), "u": (0.5, 0.5), "v": (0.5, 0.5)},
    "y": {"a": (0.2, 0.8), "b": (0.6, 0.4), "c": (0.3, 0.7), "u": (0.5, 0.5), "v": (0.5, 0.5)},
}
GOAL = {"x": {"u": "b", "v": "c"}, "y": {"u": "a", "v": "b"}}  # the goal token, given what the world said
WHICH_TOKENS = ("policy", "env", "all")  # whose tokens a score function sums over


@dataclass(frozen=True)
class Episode:
    """One episode: the prompt, every token in order, and which of them the world wrote."""
    prompt: str
    tokens: tuple[str, ...]
    by_env: tuple[bool, ...]


class Gradient(NamedTuple):
    """A gradient on both parameters, with any leading batch dimensions (one per episode, say).
    logits(h) = theta[h] + w, so d/dw = sum_h d/dtheta[h]: `MicroEnvMDP.gradient` forms w's part so."""
    theta: torch.Tensor  # (..., H, V)
    w: torch.Tensor  # (..., V)

    def flat(self) -> torch.Tensor:
        """(..., H * V + V) both parts in one vector, for norms and cosines over every parameter."""
        return torch.cat([self.theta.flatten(-2), self.w], dim=-1)


@dataclass(frozen=True)
class EstimatorBias:
    """The score-function gradient's expectation against autograd of exact J, at one (theta, w).
    Norms are Euclidean over the parameters named: all of them (theta and w) unless a field says."""
    gradient: Gradient  # grad J on theta (H, V) and on w (V,), autograd of the exact objective
    correct_bias: float  # |E[R sum_policy grad log pi] - grad J|: 0 up to rounding
    as_if_bias: float  # |E[R sum_all grad log pi] - grad J|: the world's tokens trained as the policy's
    cosine: float  # cos(E[as-if estimator], grad J), over theta and w
    policy_rows_bias: float  # the as-if bias on theta's policy rows: 0 (theta's rows are separate)
    shared_bias: float  # the as-if bias on w, which every policy decision reads: not 0
    shared_cosine: float  # cos(E[as-if estimator] on w, grad_w J)
    correct_variance: float  # E|g - E g|^2 of one episode's correct estimate, over theta and w
    as_if_variance: float  # the same for the as-if estimate


@dataclass(frozen=True)
class Training:
    """Exact gradient ascent on J: the parameters after `steps` steps, and J before each step and after the last."""
    theta: torch.Tensor  # (H, V)
    w: torch.Tensor  # (V,)
    objectives: torch.Tensor  # (steps + 1,)


class MicroEnvMDP:
    def __init__(self):
        """Enumerate every history (where a token is written, and by whom) and every episode."""
        self.prompts = micro.PROMPTS
        self.vocab = VOCAB
        self.horizon = micro.HORIZON  # policy tokens per episode at most
        self.histories: list[tuple[str, tuple[str, ...]]] = []
        self.episodes: list[Episode] = []
        for p in self.prompts:
            self._grow(p, ())
        self.history_index = {h: i for i, h in enumerate(self.histories)}
        self.episode_index = {(e.prompt, e.tokens): n for n, e in enumerate(self.episodes)}
        H, V = self.shape
        self.by_env = torch.tensor([self.env_writes(prefix) for _, prefix in self.histories])  # (H,) bool
        self.policy_rows = (~self.by_env).nonzero().squeeze(1)  # (n_policy,)
        self.env_rows = self.by_env.nonzero().squeeze(1)  # (n_env,)
        self.child = torch.full((H, V), -1, dtype=torch.long)  # (H, V) index of h + k; -1 where token k ends or cannot follow
        self.rewards = torch.zeros(H, V, dtype=torch.float64)  # (H, V) r(h, k), terminal included; 0 where the world writes
        self.env_probs = torch.zeros(H, V, dtype=torch.float64)  # (H, V) P_env(k | h) on the world's rows, 0 elsewhere
        for i, (p, prefix) in enumerate(self.histories):
            for k, token in enumerate(self.vocab):
                if self.by_env[i]:
                    if token in OBSERVATIONS:
                        self.env_probs[i, k] = ENV_PROBS[p][prefix[0]][OBSERVATIONS.index(token)]
                        self.child[i, k] = self.history_index[(p, prefix + (token,))]
                    continue
                self.rewards[i, k] = STEP_REWARD[p][token]
                if self.ends(prefix, token):
                    self.rewards[i, k] += self.terminal_reward(p, prefix + (token,))
                else:
                    self.child[i, k] = self.history_index[(p, prefix + (token,))]
        self._table()

    def _grow(self, prompt: str, prefix: tuple[str, ...]) -> None:
        """Depth-first: record the history, then each token that can follow it."""
        self.histories.append((prompt, prefix))
        env = self.env_writes(prefix)
        for token in OBSERVATIONS if env else self.vocab:
            if not env and self.ends(prefix, token):
                tokens = prefix + (token,)
                self.episodes.append(Episode(prompt, tokens, tuple(self.env_writes(tokens[:t]) for t in range(len(tokens)))))
            else:
                self._grow(prompt, prefix + (token,))

    def _table(self) -> None:
        """Every episode as padded (N, L) tensors, L = the longest episode (horizon + 1 tokens)."""
        N, L = len(self.episodes), self.horizon + 1
        self.rows = torch.zeros(N, L, dtype=torch.long)  # (N, L) history index of step t (0 on padding)
        self.tokens = torch.zeros(N, L, dtype=torch.long)  # (N, L) vocabulary index of token t (0 on padding)
        self.mask = torch.zeros(N, L, dtype=torch.float64)  # (N, L) 1 on the episode's tokens
        self.env_mask = torch.zeros(N, L, dtype=torch.float64)  # (N, L) 1 on the world's tokens
        self.prompt_of = torch.tensor([self.prompts.index(e.prompt) for e in self.episodes])  # (N,)
        for n, e in enumerate(self.episodes):
            for t, token in enumerate(e.tokens):
                self.rows[n, t] = self.history_index[(e.prompt, e.tokens[:t])]
                self.tokens[n, t] = self.vocab.index(token)
                self.mask[n, t], self.env_mask[n, t] = 1.0, float(e.by_env[t])

    # ------------------------------------------------------------ the world
    @property
    def shape(self) -> tuple[int, int]:
        """Shape of theta: (n_histories, n_vocab), one row for every history where a token is written."""
        return len(self.histories), len(self.vocab)

    def env_writes(self, prefix: tuple[str, ...]) -> bool:
        """Does the world write the token after `prefix`? Exactly after the policy's first token."""
        return len(prefix) == 1

    def ends(self, prefix: tuple[str, ...], token: str) -> bool:
        """Does the policy's `token` after `prefix` end the episode (EOS, or its horizon-th token)?"""
        policy_tokens = len(prefix) - (len(prefix) >= 2)  # the world's reply is not the policy's
        return token == micro.EOS or policy_tokens + 1 == self.horizon

    def terminal_reward(self, prompt: str, tokens: tuple[str, ...]) -> float:
        """GOAL_REWARD if the episode ended by EOS and the policy wrote the goal for the world's reply after it."""
        if tokens[-1] != micro.EOS or len(tokens) < 3:
            return 0.0
        return micro.GOAL_REWARD if GOAL[prompt][tokens[1]] in tokens[2:] else 0.0

    # ------------------------------------------------------------ the model
    def logits(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """(H, V) logits(h) = theta[h] + w at every history: theta (H, V) one row per history, w (V,) one bias
        shared by all of them (None: zeros, the tabular model). Every probability here is read from this."""
        check_float("theta", theta)
        if tuple(theta.shape) != self.shape:
            raise ValueError(f"theta has shape {self.shape} (histories x vocabulary), got {tuple(theta.shape)}")
        check_finite("theta", theta)
        if w is None:
            return theta
        check_float("w", w)
        if tuple(w.shape) != (len(self.vocab),):
            raise ValueError(f"w has shape ({len(self.vocab)},) (one bias per vocabulary token), got {tuple(w.shape)}")
        check_finite("w", w)
        return theta + w

    def gradient(self, g: torch.Tensor) -> Gradient:
        """The gradient on (theta, w) of anything whose gradient on theta is g (..., H, V): w is added to every
        history's logits, so its gradient is g summed over the histories, the world's included."""
        check_float("g", g)
        if tuple(g.shape[-2:]) != self.shape:
            raise ValueError(f"g must have shape (..., {self.shape[0]}, {self.shape[1]}) (a gradient on theta: "
                             f"histories x vocabulary), got {tuple(g.shape)}")
        return Gradient(g, g.sum(dim=-2))

    # ------------------------------------------------------------ probabilities and J
    def next_token_probs(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """(H, V) the distribution of the next token at every history: pi(. | h) = softmax(logits(h)) where
        the policy writes, P_env(. | h) where the world does. Differentiable in theta and w."""
        logits = self.logits(theta, w)
        return torch.where(self.by_env[:, None], self.env_probs.to(logits.dtype), torch.softmax(logits, dim=-1))

    def episode_log_probs(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """(N,) log P(tau | prompt) = sum_policy log pi(a_t | h_t) + sum_world log P_env(o_t | h_t)."""
        logp = self.next_token_probs(theta, w).log()[self.rows, self.tokens]  # (N, L)
        return (logp * self.mask).sum(dim=1)

    def episode_probs(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """(N,) P(tau | prompt); the episodes of each prompt sum to 1."""
        return self.episode_log_probs(theta, w).exp()

    def returns(self) -> torch.Tensor:
        """(N,) R(tau): the policy's step rewards plus the terminal reward (undiscounted)."""
        return (self.rewards[self.rows, self.tokens] * (self.mask - self.env_mask)).sum(dim=1)

    def objective(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """J(theta, w) = mean over prompts of sum_tau P(tau | prompt) R(tau); differentiable in theta and w."""
        return (self.episode_probs(theta, w) * self.returns().to(theta.dtype)).sum() / len(self.prompts)

    def exact_gradient(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> Gradient:
        """grad J on theta (H, V; 0 on the world's rows) and on w (V,), by autograd of the exact objective."""
        self.logits(theta, w)  # checks theta and w
        theta = theta.detach().clone().requires_grad_(True)
        w = (torch.zeros(len(self.vocab), dtype=theta.dtype) if w is None else w.detach().clone()).requires_grad_(True)
        return Gradient(*torch.autograd.grad(self.objective(theta, w), (theta, w)))

    def world_token_share(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> float:
        """The share of the policy's own tokens that are the world's tokens (u or v), where they earn nothing:
        E[# policy tokens in OBSERVATIONS] / E[# policy tokens], over a uniform prompt."""
        own = self.mask - self.env_mask  # (N, L)
        world_token = sum(self.tokens == self.vocab.index(o) for o in OBSERVATIONS)  # (N, L)
        probs = self.episode_probs(theta, w).detach()
        return ((probs @ (own * world_token).sum(1)) / (probs @ own.sum(1))).item()

    # ------------------------------------------------------------ score-function estimators
    def _score_sum(self, pi: torch.Tensor, coef: torch.Tensor, per_episode: bool) -> torch.Tensor:
        """sum over the (n, t) of coef (N, L) of coef[n, t] * grad_theta log softmax(logits(h_t))[k_t], which is
        onehot(k_t) - pi(. | h_t) on row h_t: (N, H, V) one sum per episode, or (H, V) over all of them."""
        index = (self.rows, self.tokens)
        if per_episode:
            index = (torch.arange(len(self.episodes))[:, None].expand_as(self.rows),) + index
        shape = ((len(self.episodes),) if per_episode else ()) + self.shape
        hits = torch.zeros(shape, dtype=pi.dtype).index_put_(index, coef.to(pi.dtype), accumulate=True)
        visits = torch.zeros(shape[:-1], dtype=pi.dtype).index_put_(index[:-1], coef.to(pi.dtype), accumulate=True)
        return hits - visits[..., None] * pi

    def _token_weights(self, which: str) -> torch.Tensor:
        """(N, L) 1 on the tokens a score sums over: the policy's, the world's, or all."""
        validate.choice("which", which, WHICH_TOKENS)
        return {"policy": self.mask - self.env_mask, "env": self.env_mask, "all": self.mask}[which]

    def scores(self, theta: torch.Tensor, which: str = "policy", w: torch.Tensor | None = None) -> Gradient:
        """For every episode, sum_t grad log softmax(logits(h_t))[k_t], k_t the token written at h_t, over the
        policy's tokens (which="policy": grad log P(tau), the correct score), the world's tokens scored as if
        the policy had written them ("env"), or both ("all": the world's tokens left in the loss). On theta
        (N, H, V): onehot(k_t) - pi(. | h_t) on row h_t; on w (N, V): those summed over the episode's tokens."""
        pi = torch.softmax(self.logits(theta, w).detach(), dim=-1)
        return self.gradient(self._score_sum(pi, self._token_weights(which), per_episode=True))

    def estimator_terms(self, theta: torch.Tensor, which: str = "policy", w: torch.Tensor | None = None) -> Gradient:
        """One episode's REINFORCE estimate R(tau) * scores(tau), for every episode: the value the estimator takes on tau."""
        score = self.scores(theta, which, w)
        R = self.returns().to(score.w.dtype)
        return Gradient(R[:, None, None] * score.theta, R[:, None] * score.w)

    def episode_weights(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """(N,) the probability of drawing each episode: a uniform prompt, then P(tau | prompt); sums to 1."""
        return self.episode_probs(theta, w).detach() / len(self.prompts)

    def expected_estimate(self, theta: torch.Tensor, which: str = "policy", w: torch.Tensor | None = None) -> Gradient:
        """E[R(tau) scores(tau)], exactly: the sum over every episode weighted by its probability.
        which="policy" is grad J; "env" is the term the as-if estimator adds; "all" = the two summed."""
        pi = torch.softmax(self.logits(theta, w).detach(), dim=-1)
        coef = (self.episode_weights(theta, w) * self.returns().to(pi.dtype))[:, None] * self._token_weights(which)
        return self.gradient(self._score_sum(pi, coef, per_episode=False))

    def estimator_bias(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> EstimatorBias:
        """The correct and the as-if estimator against autograd of exact J: bias norms over all the
        parameters, on theta's policy rows and on w, cosines of the as-if expectation to grad J, each
        one-episode variance (`mdp.bias_and_variance` over the enumeration, theta and w as one vector)."""
        grad, probs = self.exact_gradient(theta, w), self.episode_weights(theta, w)
        correct_bias, correct_var = bias_and_variance(self.estimator_terms(theta, "policy", w).flat(), probs, grad.flat())
        as_if = self.estimator_terms(theta, "all", w)
        as_if_bias, as_if_var = bias_and_variance(as_if.flat(), probs, grad.flat())
        mean = Gradient(torch.einsum("n,nhv->hv", probs, as_if.theta), probs @ as_if.w)
        cos = torch.nn.functional.cosine_similarity
        return EstimatorBias(grad, correct_bias, as_if_bias, cos(mean.flat(), grad.flat(), dim=0).item(),
                             (mean.theta - grad.theta)[self.policy_rows].norm().item(), (mean.w - grad.w).norm().item(),
                             cos(mean.w, grad.w, dim=0).item(), correct_var, as_if_var)

    def train(self, which: str, lr: float, steps: int, shared: bool = True, theta: torch.Tensor | None = None,
              w: torch.Tensor | None = None) -> Training:
        """Exact gradient ascent: `steps` steps of (theta, w) += lr * expected_estimate(which), the estimator's
        expectation (no sampling), from (theta, w) (None: zeros). shared=False leaves w where it starts: the
        tabular model, on which "all" moves the policy exactly as "policy" does."""
        validate.choice("which", which, WHICH_TOKENS)
        validate.number("lr", lr, 0.0, open_low=True)
        validate.integer("steps", steps, minimum=0)
        if not isinstance(shared, bool):
            raise TypeError(f"shared must be True or False (train w too, or leave it where it starts), got {shared!r}")
        if theta is not None:
            self.logits(theta, w)  # checks theta, and w with it
        elif w is not None:
            self.logits(torch.zeros(self.shape, dtype=torch.float64), w)
        theta = torch.zeros(self.shape, dtype=torch.float64) if theta is None else theta.detach().clone()
        w = torch.zeros(len(self.vocab), dtype=theta.dtype) if w is None else w.detach().clone()
        objectives = [self.objective(theta, w).item()]
        for _ in range(steps):
            step = self.expected_estimate(theta, which, w)
            theta = theta + lr * step.theta
            if shared:
                w = w + lr * step.w
            objectives.append(self.objective(theta, w).item())
        return Training(theta, w, torch.tensor(objectives, dtype=torch.float64))

    # ------------------------------------------------------------ values
    def _backward_q(self, policy_value) -> torch.Tensor:
        """Backward induction, longest history first: Q(h, k) = r(h, k) + V(h + k) (0 after the end);
        V(h) = sum_o P_env(o | h) Q(h, o) where the world writes, policy_value(rows, Q[rows]) where
        the policy does. Returns Q (H, V); on the world's rows Q(h, o) = V(h + o), 0 off OBSERVATIONS."""
        q = torch.zeros(self.shape, dtype=torch.float64)
        v = torch.zeros(len(self.histories), dtype=torch.float64)
        lengths = torch.tensor([len(prefix) for _, prefix in self.histories])
        for length in range(int(lengths.max()), -1, -1):
            rows = (lengths == length).nonzero().squeeze(1)
            child = self.child[rows]
            q[rows] = self.rewards[rows] + torch.where(child >= 0, v[child.clamp(min=0)], 0.0)
            env = self.by_env[rows]
            v[rows] = torch.where(env, (self.env_probs[rows] * q[rows]).sum(-1), policy_value(rows, q[rows]))
        return q

    def q_values(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """(H, V) Q^pi(h, a) = r(h, a) + E[return after h + a]: at the policy's rows, the value of each token."""
        pi = torch.softmax(self.logits(theta, w).detach().double(), dim=-1)
        return self._backward_q(lambda rows, q: (pi[rows] * q).sum(-1))

    def values(self, theta: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """(H,) V^pi(h) = sum_a P(a | h) Q(h, a), P the policy where it writes and P_env where the world does."""
        probs = self.next_token_probs(theta, w).detach().double()
        return (probs * self.q_values(theta, w)).sum(-1)

    def optimal_q_values(self) -> torch.Tensor:
        """(H, V) Q*(h, a): the best policy's values, V*(h) = max_a Q*(h, a) where the policy writes."""
        return self._backward_q(lambda rows, q: q.max(-1).values)

    def q_by_observation(self, q: torch.Tensor, prompt: str, first: str) -> torch.Tensor:
        """(n_observations, V) the rows of q at the decision after the world's reply: Q((prompt, (first, o)), .)
        for each o in OBSERVATIONS. Histories that differ only in o are different states."""
        check_float("q", q)
        if tuple(q.shape) != self.shape:
            raise ValueError(f"q must have shape {self.shape} (histories x vocabulary, e.g. mdp.q_values(theta) or "
                             f"mdp.optimal_q_values()), got {tuple(q.shape)}")
        if (prompt, (first,)) not in self.history_index:
            raise ValueError(f"the world replies after a first token from {VOCAB[:-1]} of a prompt in "
                             f"{self.prompts}, got {prompt!r}, {first!r}")
        return q[[self.history_index[(prompt, (first, o))] for o in OBSERVATIONS]]

    # ------------------------------------------------------------ sampling
    def sample(self, theta: torch.Tensor, n: int, generator: torch.Generator | None = None,
               w: torch.Tensor | None = None) -> list[Episode]:
        """n episodes: the prompt uniformly at random, then each next token from pi where the policy
        writes and from P_env where the world does, all n episodes a token at a time."""
        validate.integer("n", n, minimum=0)
        validate.generator_type(generator)
        probs = self.next_token_probs(theta, w).detach().double()
        prompt = torch.randint(len(self.prompts), (n,), generator=generator)
        h = torch.tensor([self.history_index[(p, ())] for p in self.prompts])[prompt]  # (n,) current history
        alive = torch.ones(n, dtype=torch.bool)
        tokens = torch.full((n, self.horizon + 1), -1, dtype=torch.long)
        for t in range(self.horizon + 1):
            if n == 0 or not alive.any():
                break
            k = torch.multinomial(probs[h], 1, generator=generator).squeeze(1)  # (n,) the next token
            tokens[:, t] = torch.where(alive, k, -1)
            alive &= self.child[h, k] >= 0
            h = torch.where(alive, self.child[h, k], h)
        out = []
        for i, row in zip(prompt.tolist(), tokens.tolist()):
            key = (self.prompts[i], tuple(self.vocab[k] for k in row if k >= 0))
            out.append(self.episodes[self.episode_index[key]])
        return out
