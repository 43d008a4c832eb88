"""Process against outcome supervision, exactly: a micro world of steps that the world can check.

The world (`StepWorld`): a prompt is K digits d_1 ... d_K; the policy writes K tokens, the partial
sums s_1 ... s_K modulo M, one token per step. The world knows two things about an episode:

    step label   l_t = 1 if s_t = s_{t-1} + d_t (mod M), with s_0 = 0: the step is right given
                 what was written before it, as a checker reading that one step sees it
    outcome      R = 1 if s_K = d_1 + ... + d_K (mod M): the final answer is right

The two can disagree. Errors can cancel: a wrong step, then a second wrong step that undoes it,
reaches the right answer with two steps labelled wrong. And after a mistake, a right step carries
it on to a wrong answer. A state is a prefix (the prompt and the partial sums written so far); the
policy is tabular, pi(a | s) = softmax(theta[s])[a], theta of shape (n_states, M).

Every estimator here is g = (1/P) sum over the P prompts of sum_t w_t grad log pi(a_t | s_t), from
one episode of each prompt, with per-step weights w_t (`weights`):

    outcome            w_t = R                       REINFORCE on the 0/1 outcome (outcome supervision)
    outcome_baseline   w_t = R - V(s_t)              the same with the state's value as a baseline
    step_labels        w_t = l(s_t, a_t)             each step credited with its own label
    step_labels_to_go  w_t = sum_{t' >= t} l_t'      each step credited with its label and the later ones
    value_labels       w_t = Q_mu(s_t, a_t) - V_mu(s_t)   Math-Shepherd's soft label (Wang et al., 2024):
                       Q_mu(s, a) = P(right answer | s, a, then the completer mu writes the rest),
                       computed exactly instead of from N rollouts, minus the same label of the state

Lightman et al. (2023) train a process reward model (PRM) on human labels of each step and use it to
rerank; Math-Shepherd labels each step by rollouts, trains a PRM on those labels, and uses it to
rerank and as the step reward of PPO.
Here the labels are the world's own (exact, or a `lenient_labels` PRM that marks a slip right) and
enter the policy gradient as each step's reward. What `moments` shows, exactly, against grad J with
J = P(right answer):

  * outcome and outcome_baseline are unbiased (the policy-gradient theorem, and the baseline lemma).
  * value_labels with mu = the current policy is Q - V, the advantage: unbiased, and quieter than
    outcome_baseline on every world of this kind: a prefix tree's states differ from step to step,
    so |g|^2 = sum_t w_t^2 |grad log pi(a_t | s_t)|^2, and E[(R - V)^2 | s_t, a_t] = (Q - V)^2 +
    Var(R | s_t, a_t). Not always quieter than outcome without a baseline: V is not the best
    baseline for a 0/1 outcome (the tests hold a case).
  * with a fixed completer mu (Math-Shepherd labels once, with another model), the update is the
    gradient of sum_s d(s) sum_a pi(a | s) Q_mu(s, a) with the visitation d held fixed
    (`frozen_visitation_objective`): biased once the policy is not the completer.
  * step_labels_to_go is the policy gradient of another objective, E[sum_t l_t] the expected number
    of right steps (`label_objective`); step_labels ascends sum_s d(s) sum_a pi(a | s) l(s, a) with d
    held fixed. After a mistake the label credits carrying it on, the outcome credits cancelling it:
    on those states (`after_mistake`) the two updates point apart (`compare`'s cosine_after_mistake:
    -0.98 to -0.21 on the three WORLDS at four policies each that lean towards the right step, random
    logits plus 2 on each label, seeds 0-3). Labels from the start (1 only on the true partial sum)
    pay only the step that cancels a mistake, and there agree with the outcome (0.90 to 1.00).
  * a PRM that marks a slip right scores the policy that always slips first, then steps rightly, as
    high as the perfect one (every step marked right), and that policy never answers rightly.

Deviations from the papers: the labels are exact (no human labeller, no learned PRM, no finite
rollouts; Math-Shepherd's soft label only, not its hard one, "does any rollout reach the answer");
a label enters the update directly as its step's weight, with no critic, and value_labels subtract
the state's own label V_mu(s) as a baseline, where Math-Shepherd's PPO learns one.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from ..core import validate
from ..core.advantages import reward_to_go
from ..core.ops import check_float
from .group_updates import Moments

__all__ = ["ESTIMATORS", "StepWorld", "WORLDS", "weights", "moments", "label_objective", "frozen_visitation_objective",
           "compare"]

ESTIMATORS = ("outcome", "outcome_baseline", "step_labels", "step_labels_to_go", "value_labels")
MAX_EPISODES = 4096  # per prompt: M ** K, so every sum stays a short loop


class StepWorld:
    def __init__(self, digits: Sequence[Sequence[int]], modulus: int):
        """digits: one tuple of K digits per prompt (every prompt the same K); modulus: M, the
        number of tokens, each a residue 0 ... M-1. Enumerates every state and every episode."""
        self.modulus = validate.integer("modulus", modulus, minimum=2)
        if isinstance(digits, (str, bytes)) or not isinstance(digits, Sequence) or not digits:
            raise TypeError(f"digits must be a list of prompts, each a tuple of digits, e.g. ((1, 2, 1), (2, 2, 0)); "
                            f"got {digits!r}")
        if any(isinstance(p, (str, bytes)) or not isinstance(p, Sequence) for p in digits):
            raise TypeError(f"each prompt is a tuple of digits, e.g. ((1, 2, 1), (2, 2, 0)); got {digits!r}")
        self.prompts = tuple(tuple(validate.integer("a digit", d, minimum=0) for d in p) for p in digits)
        self.steps = len(self.prompts[0])
        if self.steps == 0 or any(len(p) != self.steps for p in self.prompts):
            raise ValueError(f"every prompt needs the same number of digits, at least one; got {digits!r}")
        if any(d >= modulus for p in self.prompts for d in p):
            raise ValueError(f"digits are residues modulo {modulus}: each in 0 ... {modulus - 1}; got {digits!r}")
        if modulus ** self.steps > MAX_EPISODES:
            raise ValueError(f"{modulus} ** {self.steps} = {modulus ** self.steps} episodes per prompt is too many to "
                             f"enumerate here (at most {MAX_EPISODES}); use fewer digits or a smaller modulus")
        M, K = self.modulus, self.steps
        self.states = [(i, prefix) for i in range(len(self.prompts)) for n in range(K)
                       for prefix in itertools.product(range(M), repeat=n)]
        self.state_index = {s: n for n, s in enumerate(self.states)}
        S = len(self.states)
        self.labels = torch.zeros(S, M, dtype=torch.float64)  # l(s, a): the world's exact step labels
        self.final = torch.zeros(S, M, dtype=torch.float64)  # R where a ends the episode, else 0
        self.child = torch.full((S, M), -1, dtype=torch.long)  # the state after a; -1 where a ends it
        for n, (i, prefix) in enumerate(self.states):
            digits_i, previous = self.prompts[i], (prefix[-1] if prefix else 0)
            for a in range(M):
                self.labels[n, a] = float(a == (previous + digits_i[len(prefix)]) % M)
                if len(prefix) == K - 1:
                    self.final[n, a] = float(a == sum(digits_i) % M)
                else:
                    self.child[n, a] = self.state_index[(i, prefix + (a,))]
        episodes = [(i, seq) for i in range(len(self.prompts)) for seq in itertools.product(range(M), repeat=K)]
        self.prompt = torch.tensor([i for i, _ in episodes])  # (N,) the prompt of each episode
        self.actions = torch.tensor([seq for _, seq in episodes])  # (N, K) the token of each step
        self.state = torch.tensor([[self.state_index[(i, seq[:t])] for t in range(K)] for i, seq in episodes])  # (N, K)
        self.outcome = self.final[self.state[:, -1], self.actions[:, -1]]  # (N,) R of each episode

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of a tabular policy's logits: (n_states, M)."""
        return len(self.states), self.modulus

    def check_logits(self, name: str, logits: torch.Tensor) -> None:
        """A tabular policy: a float tensor of shape (n_states, M)."""
        check_float(name, logits)
        if tuple(logits.shape) != self.shape:
            raise ValueError(f"{name}: a tabular policy's logits have shape {self.shape} (states x tokens), "
                             f"got {tuple(logits.shape)}")

    def check_table(self, name: str, table: torch.Tensor) -> None:
        """A per-(state, token) table, such as step labels: finite floats of shape (n_states, M)."""
        check_float(name, table)
        if tuple(table.shape) != self.shape:
            raise ValueError(f"{name}: a table over (state, token) has shape {self.shape}, got {tuple(table.shape)}")
        if not bool(torch.isfinite(table).all()):
            raise ValueError(f"{name} must be finite everywhere")

    # ------------------------------------------------------------ labels
    def after_mistake(self) -> torch.Tensor:
        """(n_states,) bool: the states whose prefix already holds a wrong partial sum."""
        return torch.tensor([any(s != sum(self.prompts[i][: t + 1]) % self.modulus for t, s in enumerate(prefix))
                             for i, prefix in self.states])

    def lenient_labels(self, slip: int = 1, steps: Sequence[int] | None = None) -> torch.Tensor:
        """A PRM with a blind spot: the exact labels, except that the wrong step s_t = s_{t-1} + d_t + slip
        (mod M) is marked right at the steps named (0-based; None: every step). (n_states, M)."""
        validate.integer("slip", slip, minimum=1)
        if slip % self.modulus == 0:
            raise ValueError(f"a slip of {slip} is no mistake modulo {self.modulus}; "
                             f"pick one in 1 ... {self.modulus - 1}")
        steps = tuple(range(self.steps) if steps is None else steps)
        for t in steps:
            validate.integer("a step", t, minimum=0)
            if t >= self.steps:
                raise ValueError(f"steps are numbered 0 ... {self.steps - 1}; got {t}")
        labels = self.labels.clone()
        for n, (i, prefix) in enumerate(self.states):
            if len(prefix) in steps:
                previous = prefix[-1] if prefix else 0
                labels[n, (previous + self.prompts[i][len(prefix)] + slip) % self.modulus] = 1.0
        return labels

    # ------------------------------------------------------------ probabilities and values
    def episode_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(N,) P(episode | its prompt) = prod_t pi(a_t | s_t); each prompt's sum to 1. Differentiable."""
        self.check_logits("logits", logits)
        return torch.log_softmax(logits, -1)[self.state, self.actions].sum(1).exp()

    def objective(self, logits: torch.Tensor) -> torch.Tensor:
        """J = P(right answer), the mean over prompts: what outcome supervision ascends. Differentiable."""
        return (self.episode_probs(logits) * self.outcome.to(logits.dtype)).sum() / len(self.prompts)

    def exact_gradient(self, logits: torch.Tensor) -> torch.Tensor:
        """grad J (n_states, M), by autograd of the exact objective."""
        x = logits.detach().clone().requires_grad_(True)
        return torch.autograd.grad(self.objective(x), x)[0]

    def q_values(self, logits: torch.Tensor) -> torch.Tensor:
        """Q(s, a) = P(right answer | s, a, then pi writes the rest), (n_states, M), backwards from the last step."""
        self.check_logits("logits", logits)
        pi = torch.softmax(logits.detach().double(), -1)
        q = self.final.clone()
        lengths = torch.tensor([len(prefix) for _, prefix in self.states])
        for n in range(self.steps - 2, -1, -1):
            rows = (lengths == n).nonzero().squeeze(1)
            child = self.child[rows]
            q[rows] = (pi[child] * q[child]).sum(-1)
        return q

    def values(self, logits: torch.Tensor) -> torch.Tensor:
        """V(s) = sum_a pi(a | s) Q(s, a) = P(right answer | s), (n_states,)."""
        return (torch.softmax(logits.detach().double(), -1) * self.q_values(logits)).sum(-1)

    def visitation(self, logits: torch.Tensor) -> torch.Tensor:
        """(n_states,) d(s) = P(the episode passes s), over a uniform prompt. Differentiable."""
        probs = self.episode_probs(logits) / len(self.prompts)
        d = torch.zeros(len(self.states), dtype=probs.dtype)
        for t in range(self.steps):
            d = d.index_add(0, self.state[:, t], probs)
        return d

    # ------------------------------------------------------------ sampling
    def sample(self, logits: torch.Tensor, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(n,) n sampled episodes as their rows in the world's tables (`prompt`, `actions`, `state`, `outcome`):
        a uniform prompt, then each token from pi."""
        self.check_logits("logits", logits)
        validate.integer("n", n, minimum=0)
        validate.generator_type(generator)
        pi = torch.softmax(logits.detach().double(), -1)
        prompt = torch.randint(len(self.prompts), (n,), generator=generator)
        s = torch.tensor([self.state_index[(i, ())] for i in range(len(self.prompts))])[prompt]
        row = prompt * self.modulus ** self.steps
        for t in range(self.steps):
            a = torch.multinomial(pi[s], 1, generator=generator).squeeze(1) if n else s
            row = row + a * self.modulus ** (self.steps - 1 - t)
            s = self.child[s, a]
        return row


# the worlds the comparisons are made on; in "four sums mod 2" every mistake is the same slip, so any
# two mistakes cancel
WORLDS = {  # name: (digits, modulus), for StepWorld(*WORLDS[name])
    "three sums mod 3": (((1, 2, 1), (2, 2, 0)), 3),
    "two sums mod 4": (((1, 3), (2, 1)), 4),
    "four sums mod 2": (((1, 0, 1, 1), (0, 1, 1, 0)), 2),
}


def weights(world: StepWorld, logits: torch.Tensor, estimator: str, labels: torch.Tensor | None = None,
            completer: torch.Tensor | None = None) -> torch.Tensor:
    """w_t of every step of every episode (N, K), for the single-episode update sum_t w_t grad log pi(a_t | s_t).
    labels: the step labels of 'step_labels' and 'step_labels_to_go' (n_states, M; None: the world's
    exact ones); completer: mu's logits for 'value_labels' (None: the current policy)."""
    world.check_logits("logits", logits)
    validate.choice("estimator", estimator, ESTIMATORS)
    if labels is not None and not estimator.startswith("step_labels"):
        raise ValueError(f"labels are the step labels of 'step_labels' and 'step_labels_to_go'; {estimator!r} does not "
                         "read them")
    if completer is not None and estimator != "value_labels":
        raise ValueError(f"a completer writes the rollouts of 'value_labels'; {estimator!r} does not use one")
    s, a = world.state, world.actions
    if estimator == "outcome":
        return world.outcome[:, None].expand(s.shape).clone()
    if estimator == "outcome_baseline":
        return world.outcome[:, None] - world.values(logits)[s]
    if estimator == "value_labels":
        mu = logits if completer is None else completer
        world.check_logits("completer", mu)
        return world.q_values(mu)[s, a] - world.values(mu)[s]
    if labels is None:
        labels = world.labels
    world.check_table("labels", labels)
    per_step = labels.double()[s, a]
    return per_step if estimator == "step_labels" else reward_to_go(per_step, torch.ones_like(per_step))


def moments(world: StepWorld, logits: torch.Tensor, estimator: str, labels: torch.Tensor | None = None,
            completer: torch.Tensor | None = None) -> Moments:
    """E[g] (n_states, M) and E|g - E g|^2 of g = (1/P) sum over prompts of sum_t w_t grad log pi(a_t | s_t),
    one episode of each of the P prompts drawn from pi, exactly by enumeration (`weights` for w)."""
    w = weights(world, logits, estimator, labels, completer)
    pi = torch.softmax(logits.detach().double(), -1)
    n, steps = w.shape
    row = torch.arange(n)[:, None].expand(n, steps)
    hits = torch.zeros(n, *world.shape, dtype=torch.float64).index_put_((row, world.state, world.actions), w,
                                                                         accumulate=True)
    visits = torch.zeros(n, len(world.states), dtype=torch.float64).index_put_((row, world.state), w, accumulate=True)
    f = (hits - visits[..., None] * pi).flatten(1)  # (N, D): onehot(a_t) - pi(. | s_t) on row s_t, weighted
    prob = world.episode_probs(logits.detach().double())
    P = len(world.prompts)
    mean, variance = torch.zeros(f.size(1), dtype=torch.float64), 0.0
    for i in range(P):  # the prompts' episodes are independent: their variances add
        rows = world.prompt == i
        m = prob[rows] @ f[rows]
        variance += float(prob[rows] @ (f[rows] * f[rows]).sum(1) - m @ m) / P ** 2
        mean += m / P
    return Moments(mean.view(world.shape), variance)


def label_objective(world: StepWorld, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """E[sum_t labels(s_t, a_t)], mean over prompts: the expected number of steps a PRM marks right,
    what 'step_labels_to_go' ascends. Differentiable in `logits`."""
    world.check_table("labels", labels)
    per_episode = labels.to(logits.dtype)[world.state, world.actions].sum(1)
    return (world.episode_probs(logits) * per_episode).sum() / len(world.prompts)


def frozen_visitation_objective(world: StepWorld, logits: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """sum_s d(s) sum_a pi(a | s) table(s, a) with the visitation d held where it is (detached): what a
    per-step credit ascends when each step reads only its own table entry ('step_labels' with the
    labels, 'value_labels' with Q_mu). With table = Q of the current policy its gradient is grad J."""
    world.check_table("table", table)
    d = world.visitation(logits.detach())
    return (d[:, None] * torch.softmax(logits, -1) * table.to(logits.dtype)).sum()


def compare(world: StepWorld, logits: torch.Tensor, labels: torch.Tensor | None = None,
            completer: torch.Tensor | None = None) -> dict[str, dict[str, float]]:
    """Each estimator against grad J: `Moments.against`'s scale, bias_share, cosine and relative_variance,
    the unscaled bias |E g - grad J| and variance E|g - E g|^2, and cosine_after_mistake, the cosine on
    the states after a mistake only (NaN where either update is 0 there). labels: the step labels of
    the two step-label estimators (None: exact); completer: value_labels' mu (None: the policy)."""
    grad, off = world.exact_gradient(logits.double()), world.after_mistake()
    out = {}
    for name in ESTIMATORS:
        m = moments(world, logits, name, labels if name.startswith("step_labels") else None,
                    completer if name == "value_labels" else None)
        row = m.against(grad)
        a, b = m.mean[off].flatten(), grad[off].flatten()
        norms = float(a.norm() * b.norm())
        row.update(bias=float((m.mean - grad).norm()), variance=m.variance,
                   cosine_after_mistake=float(a @ b) / norms if norms > 0 else float("nan"))
        out[name] = row
    return out
