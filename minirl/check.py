"""Exercise checkers: `minirl.check.<name>(student_fn)`.

Each checker runs the student's function on a fixed set of cases, edge cases included, compares
with a reference written independently of the student's path (exact arithmetic where possible),
and prints one clear line: PASS with the tolerance every case met (not the difference itself,
whose last digits change from one CPU to another), or FAIL with the first failing cases. It never
raises, so a notebook with an unfinished exercise still runs to the end. It returns None on
purpose: a returned value would be displayed after the PASS/FAIL line.
"""
from __future__ import annotations

import copy
import itertools
import math
from fractions import Fraction

import torch

TOLERANCE = 1e-6
NOT_DONE = "FAIL {name}: not implemented yet (replace `raise NotImplementedError` with your code)"


def as_numbers(x) -> torch.Tensor:
    """What a student function returned, as a float64 tensor, or a TypeError saying what it was."""
    if x is None:
        raise TypeError("returned None: did you forget to `return` the result?")
    if isinstance(x, (list, tuple)) and any(isinstance(t, torch.Tensor) and t.dim() > 0 for t in x):
        raise TypeError(f"returned a {type(x).__name__} of tensors: return one tensor (torch.stack the rows)")
    try:
        return torch.as_tensor(x.detach() if isinstance(x, torch.Tensor) else x, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"returned a {type(x).__name__}, not a number or a tensor of numbers") from None


def max_difference(got, want) -> float:
    """Largest difference, absolute where |want| <= 1 and relative above (a float32 answer to a
    value near 1e6 is off by about 0.1); NaN in the same places counts as equal, elsewhere as inf."""
    got, want = as_numbers(got), as_numbers(want)
    if got.shape != want.shape:
        raise ValueError(f"shape {tuple(got.shape)} but expected {tuple(want.shape)}")
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return math.inf
    both = ~torch.isnan(want)
    if not both.any():
        return 0.0
    return float(((got[both] - want[both]).abs() / want[both].abs().clamp(min=1.0)).max())


def run_cases(name: str, student_fn, reference_fn, cases: list[tuple[str, tuple]], tolerance: float = TOLERANCE) -> None:
    """Compare student_fn(*args) with reference_fn(*args) on each (label, args); print PASS/FAIL.

    Each function gets its own deep copy of the arguments, so a student function that changes its
    inputs in place can neither corrupt the reference's inputs nor pass by zeroing them.
    """
    failures = []
    for label, args in cases:
        try:
            got = student_fn(*copy.deepcopy(args))
        except NotImplementedError:
            print(NOT_DONE.format(name=name))
            return
        except Exception as e:  # a student's bug must not stop the notebook
            failures.append(f"{label}: raised {type(e).__name__}: {e}")
            continue
        try:
            diff = max_difference(got, reference_fn(*copy.deepcopy(args)))
        except (ValueError, TypeError) as e:
            failures.append(f"{label}: {e}")
            continue
        if not diff <= tolerance:
            failures.append(f"{label}: largest difference {diff:.1e} (tolerance {tolerance:.0e})")
    if failures:
        print(f"FAIL {name}: {len(failures)} of {len(cases)} cases wrong")
        for f in failures[:3]:
            print(f"  - {f}")
        return
    within = "equal to the reference" if tolerance == 0 else f"within {tolerance:.0e} of the reference"
    print(f"PASS {name}: {len(cases)} cases, each {within}")


# ---------------------------------------------------------------- lesson 00
def _exact_pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k) in exact rational arithmetic."""
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


PASS_AT_K_CASES = [
    ("n=16, c=4, k=1", (16, 4, 1)),
    ("n=16, c=4, k=8", (16, 4, 8)),
    ("no correct sample (c=0)", (16, 0, 8)),
    ("all correct (c=n)", (16, 16, 1)),
    ("fewer wrong than k (n-c < k)", (16, 10, 8)),
    ("k = n", (16, 1, 16)),
    ("large n", (200, 3, 100)),
    ("n=1", (1, 1, 1)),
]


def pass_at_k(student_fn) -> None:
    """Check pass_at_k(n, c, k): the unbiased estimate of pass@k from n samples with c correct."""
    run_cases("pass_at_k", student_fn, _exact_pass_at_k, PASS_AT_K_CASES)


def _loop_masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None):
    """A plain float64 loop: the reference for masked_mean."""
    x, mask = x.double(), mask.double()
    if dim is None:
        total = sum(float(a) * float(m) for a, m in zip(x.flatten(), mask.flatten()))
        count = float(mask.sum())
        return torch.tensor(total / count if count else math.nan, dtype=torch.float64)
    out = []
    for row_x, row_m in zip(x, mask):  # dim=1 on a 2-D tensor
        count = float(row_m.sum())
        out.append(sum(float(a) * float(m) for a, m in zip(row_x, row_m)) / count if count else math.nan)
    return torch.tensor(out, dtype=torch.float64)


def _masked_mean_cases() -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]).float()
    big = x * 1e6
    return [
        ("all ones, dim=None", (x, torch.ones_like(x))),
        ("padded rows, dim=None", (x, mask)),
        ("padded rows, dim=1 (an all-padding row gives NaN)", (x, mask, 1)),
        ("large values, dim=1", (big, mask, 1)),
    ]


def masked_mean(student_fn) -> None:
    """Check masked_mean(x, mask, dim=None) = sum(x*mask)/sum(mask), NaN for an all-masked slice."""
    run_cases("masked_mean", student_fn, _loop_masked_mean, _masked_mean_cases())


# ---------------------------------------------------------------- lesson 01
def _loop_discounted_return(rewards: list[float], gamma: float) -> float:
    total, discount = 0.0, 1.0
    for r in rewards:
        total += discount * r
        discount *= gamma
    return total


DISCOUNTED_RETURN_CASES = [
    ("one reward", ([1.0], 0.9)),
    ("undiscounted", ([0.3, -0.2, 1.0], 1.0)),
    ("discounted", ([0.3, -0.2, 1.0], 0.5)),
    ("gamma = 0 keeps only the first reward", ([2.0, 5.0, 7.0], 0.0)),
    ("a long sparse episode", ([0.0] * 30 + [1.0], 0.95)),
]


def discounted_return(student_fn) -> None:
    """Check discounted_return(rewards, gamma) = sum_t gamma^t r_t."""
    run_cases("discounted_return", student_fn, _loop_discounted_return, DISCOUNTED_RETURN_CASES)


def _micro_cases(with_completion: bool) -> list[tuple[str, tuple]]:
    from .mdp import MicroMDP

    mdp, discounted = MicroMDP(), MicroMDP(gamma=0.8)
    g = torch.Generator().manual_seed(0)
    random = torch.randn(mdp.shape, generator=g, dtype=torch.float64)
    peaked = 6 * torch.randn(mdp.shape, generator=g, dtype=torch.float64)
    uniform = torch.zeros(mdp.shape, dtype=torch.float64)
    if not with_completion:
        return [("uniform policy", (mdp, uniform)), ("random policy", (mdp, random)),
                ("peaked policy", (mdp, peaked)), ("discounted, gamma 0.8", (discounted, random))]
    eos = mdp.actions[-1]
    return [("EOS at once", (mdp, random, "x", (eos,))), ("ends by EOS", (mdp, random, "y", ("a", "c", eos))),
            ("truncated at K", (mdp, random, "x", ("b", "b", "a"))), ("peaked policy", (mdp, peaked, "y", ("c", eos)))]


def trajectory_log_prob(student_fn) -> None:
    """Check trajectory_log_prob(mdp, logits, prompt, completion) = sum_t log pi(a_t | s_t)."""
    run_cases("trajectory_log_prob", student_fn, lambda mdp, logits, p, c: mdp.log_prob(logits, p, c).detach(),
              _micro_cases(with_completion=True))


def exact_objective(student_fn) -> None:
    """Check exact_objective(mdp, logits) = J = mean over prompts of sum_tau pi(tau) R(tau)."""
    run_cases("exact_objective", student_fn, lambda mdp, logits: mdp.objective(logits).detach(),
              _micro_cases(with_completion=False))


# ---------------------------------------------------------------- lesson 02
def _autograd_score(mdp, logits, prompt, completion):
    theta = logits.detach().clone().requires_grad_(True)
    mdp.log_prob(theta, prompt, completion).backward()
    return theta.grad


def score_function(student_fn) -> None:
    """Check score_function(mdp, logits, prompt, completion) = grad_theta log pi(tau), against autograd."""
    run_cases("score_function", student_fn, _autograd_score,
              _micro_cases(with_completion=True))


def _surrogate_cases() -> list[tuple[str, tuple]]:
    from .mdp import MicroMDP

    mdp = MicroMDP()
    logits = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    small = mdp.sample(logits, 8, torch.Generator().manual_seed(2))
    large = mdp.sample(logits, 200, torch.Generator().manual_seed(3))
    return [("8 episodes", (mdp, logits, small)), ("200 episodes", (mdp, logits, large)),
            ("one episode", (mdp, logits, small[:1]))]


def _surrogate_gradient(loss_fn):
    """grad_theta of loss_fn(trajectory log-probs, returns) on the given episodes, negated (an ascent direction)."""
    def grad(mdp, logits, episodes):
        theta = logits.detach().clone().requires_grad_(True)
        logps = torch.stack([mdp.log_prob(theta, p, c) for p, c in episodes])
        returns = torch.tensor([mdp.discounted_return(p, c) for p, c in episodes], dtype=logits.dtype)
        loss_fn(logps, returns).backward()
        return -theta.grad
    return grad


def surrogate_loss(student_fn) -> None:
    """Check surrogate_loss(logps, returns): its gradient must be the REINFORCE estimate
    (1/N) sum_i R_i grad log pi(tau_i) (negated: it is a loss to minimise)."""
    def estimator(mdp, logits, episodes):
        return torch.stack([mdp.discounted_return(p, c) * mdp.score(logits, p, c) for p, c in episodes]).mean(0)
    run_cases("surrogate_loss", _surrogate_gradient(student_fn), estimator, _surrogate_cases())


# ---------------------------------------------------------------- lesson 03
def _loop_reward_to_go(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    for i in range(rewards.size(0)):
        running = 0.0
        for t in reversed(range(rewards.size(1))):
            if mask[i, t]:
                running = float(rewards[i, t]) + gamma * running
                out[i, t] = running
    return out


def _rtg_cases() -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(0)
    r = torch.randn(3, 5, generator=g, dtype=torch.float64)
    full = torch.ones(3, 5, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    poisoned = r.clone()
    poisoned[ragged == 0] = 100.0  # rewards on padding must be ignored
    return [("no padding, gamma 1", (r, full, 1.0)), ("truncated and EOS rows, gamma 1", (r, ragged, 1.0)),
            ("discounted, gamma 0.9", (r, ragged, 0.9)), ("junk on the padding", (poisoned, ragged, 1.0))]


def reward_to_go(student_fn) -> None:
    """Check reward_to_go(rewards, mask, gamma): G_t = sum_{t'>=t} gamma^(t'-t) r_t' within each row, 0 on padding."""
    run_cases("reward_to_go", student_fn, _loop_reward_to_go, _rtg_cases())


def reinforce_loss(student_fn) -> None:
    """Check reinforce_loss(logprobs, rewards, mask): value and gradient of the reward-to-go
    surrogate -(1/B) sum_i sum_t G_it log pi(a_it | s_it)."""
    def value_and_grad(fn):
        def run(logprobs, rewards, mask):
            lp = logprobs.detach().clone().requires_grad_(True)
            loss = fn(lp, rewards, mask)
            loss.backward()
            return torch.cat([loss.detach().reshape(1), lp.grad.flatten()])
        return run

    def reference(lp, rewards, mask):
        returns = _loop_reward_to_go(rewards, mask, 1.0)
        return -(returns * lp * mask).sum(dim=1).mean()

    g = torch.Generator().manual_seed(1)
    lp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    cases = [(label, (lp, r, m)) for label, (r, m, _) in _rtg_cases()]
    run_cases("reinforce_loss", value_and_grad(student_fn), value_and_grad(reference), cases)


# ---------------------------------------------------------------- lesson 04
def _loop_gae(rewards, values, mask, gamma, lam):
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    for i in range(rewards.size(0)):
        n = int(mask[i].sum())
        r, v = [float(x) for x in rewards[i, :n]], [float(x) for x in values[i, :n]]
        deltas = [r[t] + gamma * (v[t + 1] if t + 1 < n else 0.0) - v[t] for t in range(n)]
        for t in range(n):
            out[i, t] = sum((gamma * lam) ** (j - t) * deltas[j] for j in range(t, n))
    return out


def _gae_cases() -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(0)
    r = torch.randn(3, 5, generator=g, dtype=torch.float64)
    v = torch.randn(3, 5, generator=g, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    junk_v = v.clone()
    junk_v[ragged == 0] = 50.0  # values on padding must never be bootstrapped from
    return [("lambda 1 (Monte Carlo advantage)", (r, v, ragged, 1.0, 1.0)), ("lambda 0 (one-step TD error)", (r, v, ragged, 1.0, 0.0)),
            ("gamma 0.9, lambda 0.95", (r, v, ragged, 0.9, 0.95)), ("junk values on the padding", (r, junk_v, ragged, 1.0, 0.5))]


def gae(student_fn) -> None:
    """Check gae(rewards, values, mask, gamma, lam) -> advantages (B, T), 0 on padding, no bootstrap past a row's end."""
    def advantages_only(*args):
        out = student_fn(*args)
        return out[0] if isinstance(out, (tuple, list)) else out
    run_cases("gae", advantages_only, _loop_gae, _gae_cases())


def _loop_bias_variance(terms, probs, exact):
    mean = sum(float(p) * t.double() for p, t in zip(probs, terms))
    bias = float((mean - exact).norm())
    variance = sum(float(p) * float((t.double() - mean).pow(2).sum()) for p, t in zip(probs, terms))
    return torch.tensor([bias, variance])


def bias_and_variance(student_fn) -> None:
    """Check bias_and_variance(terms, probs, exact) -> (|E g - exact|, E |g - E g|^2) for an estimator
    taking the value terms[i] with probability probs[i]."""
    g = torch.Generator().manual_seed(0)
    terms = torch.randn(6, 4, 3, generator=g, dtype=torch.float64)
    probs = torch.softmax(torch.randn(6, generator=g, dtype=torch.float64), 0)
    exact = (probs[:, None, None] * terms).sum(0)
    cases = [("unbiased estimator", (terms, probs, exact)), ("biased estimator", (terms + 0.3, probs, exact)),
             ("a sure thing (one outcome)", (terms[:1], torch.ones(1, dtype=torch.float64), terms[0]))]
    def pair(*args):
        out = student_fn(*args)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"returned {type(out).__name__}: return the pair (bias, variance)")
        return torch.tensor([float(x) for x in out])
    run_cases("bias_and_variance", pair, _loop_bias_variance, cases)


# ---------------------------------------------------------------- lesson 05
def _loop_clipped_objective(ratio, advantages, eps):
    out = torch.zeros(ratio.shape, dtype=torch.float64)
    for idx in itertools.product(*(range(n) for n in ratio.shape)):
        r, a = float(ratio[idx]), float(advantages[idx])
        clipped = min(max(r, 1 - eps), 1 + eps)
        out[idx] = min(r * a, clipped * a)
    return out


def clipped_objective(student_fn) -> None:
    """Check clipped_objective(ratio, advantages, eps) -> min(ratio A, clip(ratio, 1-eps, 1+eps) A), per token."""
    g = torch.Generator().manual_seed(0)
    ratio = torch.exp(0.5 * torch.randn(4, 6, generator=g, dtype=torch.float64))  # on both sides of the clip
    adv = torch.randn(4, 6, generator=g, dtype=torch.float64)
    edges = torch.tensor([[0.8, 1.2, 1.0, 0.5, 3.0, 0.0]], dtype=torch.float64)  # the clip's edges, far outside
    cases = [("random ratios and advantages", (ratio, adv, 0.2)),
             ("positive advantages only", (ratio, adv.abs(), 0.2)),
             ("negative advantages only", (ratio, -adv.abs(), 0.2)),
             ("ratios on the edges, A = +1", (edges, torch.ones_like(edges), 0.2)),
             ("ratios on the edges, A = -1", (edges, -torch.ones_like(edges), 0.2)),
             ("zero advantages", (ratio, torch.zeros_like(ratio), 0.2)),
             ("eps = 0.1", (ratio, adv, 0.1))]
    run_cases("clipped_objective", student_fn, _loop_clipped_objective, cases)


# ---------------------------------------------------------------- lesson 06
def _loop_group_advantages(rewards, group_size, eps):
    out = []
    values = [float(r) for r in rewards]
    for start in range(0, len(values), group_size):
        group = values[start : start + group_size]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))  # sample std, N - 1
        out += [(r - mean) / (std + eps) for r in group]
    return torch.tensor(out, dtype=torch.float64)


def group_advantages(student_fn) -> None:
    """Check group_advantages(rewards, group_size, eps) -> (r - group mean) / (sample std + eps), groups consecutive."""
    g = torch.Generator().manual_seed(0)
    cases = [("one group of 8", (torch.randn(8, generator=g, dtype=torch.float64), 8, 1e-4)),
             ("three groups of 4", (torch.randn(12, generator=g, dtype=torch.float64), 4, 1e-4)),
             ("0/1 rewards, one group all correct", (torch.tensor([1.0, 0, 1, 0, 1, 1, 1, 1], dtype=torch.float64), 4, 1e-4)),
             ("a group of all-equal rewards (zero, not NaN)", (torch.full((4,), 3.0, dtype=torch.float64), 4, 1e-4)),
             ("groups of 2", (torch.tensor([0.0, 1.0, 5.0, -5.0], dtype=torch.float64), 2, 1e-4)),
             ("large rewards", (1e3 * torch.randn(8, generator=g, dtype=torch.float64), 4, 1e-4))]
    run_cases("group_advantages", student_fn, _loop_group_advantages, cases)


def _loop_k3(logp, ref_logp):
    out = torch.zeros(logp.shape, dtype=torch.float64)
    for idx in itertools.product(*(range(n) for n in logp.shape)):
        q_over_p = math.exp(float(ref_logp[idx]) - float(logp[idx]))
        out[idx] = q_over_p - 1 - math.log(q_over_p)
    return out


def kl_k3(student_fn) -> None:
    """Check kl_k3(logp, ref_logp) -> q/p - 1 - log(q/p) per token, p = pi_theta, q = pi_ref."""
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    ref = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    cases = [("random log-probs", (logp, ref)), ("the same policy (0)", (logp, logp.clone())),
             ("reference far less likely", (logp, logp - 5.0)), ("reference far more likely", (logp - 5.0, logp)),
             ("one token", (logp[:1, :1], ref[:1, :1]))]
    run_cases("kl_k3", student_fn, _loop_k3, cases)


# ---------------------------------------------------------------- lesson 07
def _loop_bt_loss(chosen, rejected, labels):
    total = 0.0
    for c, r, y in zip(chosen.tolist(), rejected.tolist(), labels.tolist()):
        d = c - r
        log_p = -math.log1p(math.exp(-d)) if d > -30 else d  # log sigmoid(d)
        log_q = -math.log1p(math.exp(d)) if d < 30 else -d  # log sigmoid(-d)
        total -= y * log_p + (1 - y) * log_q
    return total / len(chosen)


def bradley_terry_loss(student_fn) -> None:
    """Check bradley_terry_loss(chosen, rejected, labels) -> mean of -[y log sigmoid(r_c - r_r) + (1 - y) log sigmoid(r_r - r_c)]."""
    g = torch.Generator().manual_seed(0)
    c, r = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    ones = torch.ones(8, dtype=torch.float64)
    cases = [("hard labels (y = 1)", (c, r, ones)),
             ("ties (y = 1/2)", (c, r, ones / 2)),
             ("a mix of wins, ties and losses", (c, r, torch.tensor([1, 0.5, 0, 1, 1, 0.5, 0, 1], dtype=torch.float64))),
             ("equal rewards: log 2", (c, c.clone(), ones)),
             ("large reward gaps (no overflow)", (50 * c, -50 * c, ones / 2)),
             ("one pair", (c[:1], r[:1], ones[:1]))]
    run_cases("bradley_terry_loss", student_fn, _loop_bt_loss, cases)


def _loop_elo_update(rating_a, rating_b, score_a, k):
    expected = 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / 400.0))
    return torch.tensor([rating_a + k * (score_a - expected), rating_b - k * (score_a - expected)], dtype=torch.float64)


def elo_update(student_fn) -> None:
    """Check elo_update(rating_a, rating_b, score_a, k) -> (new_a, new_b) on the 400-point scale."""
    cases = [("equal players, a wins", (1500.0, 1500.0, 1.0, 32.0)),
             ("favourite wins", (1800.0, 1400.0, 1.0, 32.0)),
             ("upset", (1400.0, 1800.0, 1.0, 32.0)),
             ("a draw", (1600.0, 1500.0, 0.5, 16.0)),
             ("a loses", (1500.0, 1500.0, 0.0, 24.0))]
    run_cases("elo_update", lambda *a: torch.as_tensor(student_fn(*a), dtype=torch.float64), _loop_elo_update, cases)


def _loop_ceiling(utilities, probs):
    num = norm = 0.0
    for i, (ui, pi) in enumerate(zip(utilities.tolist(), probs.tolist())):
        for j, (uj, pj) in enumerate(zip(utilities.tolist(), probs.tolist())):
            if i != j:
                num += pi * pj / (1 + math.exp(-abs(ui - uj)))
                norm += pi * pj
    return num / norm


def accuracy_ceiling(student_fn) -> None:
    """Check accuracy_ceiling(utilities, probs) -> E[sigmoid(|u_i - u_j|)] over pairs of two different
    items drawn independently with probabilities probs."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(6, generator=g, dtype=torch.float64)
    p = torch.rand(6, generator=g, dtype=torch.float64)
    p /= p.sum()
    cases = [("six items", (u, p)), ("uniform probabilities", (u, torch.full((6,), 1 / 6, dtype=torch.float64))),
             ("two items", (u[:2], torch.tensor([0.3, 0.7], dtype=torch.float64))),
             ("equal utilities: 1/2", (torch.zeros(4, dtype=torch.float64), torch.full((4,), 0.25, dtype=torch.float64))),
             ("one item far better", (torch.tensor([5.0, 0.0, 0.0], dtype=torch.float64), torch.tensor([0.1, 0.45, 0.45], dtype=torch.float64)))]
    run_cases("accuracy_ceiling", student_fn, _loop_ceiling, cases)


# ---------------------------------------------------------------- lesson 08
def _loop_sft_loss(logits, tokens, mask):
    total = count = 0.0
    for b in range(tokens.size(0)):
        for t in range(tokens.size(1)):
            if mask[b, t]:
                row = [float(x) for x in logits[b, t]]
                top = max(row)
                log_z = top + math.log(sum(math.exp(x - top) for x in row))
                total -= row[int(tokens[b, t])] - log_z
                count += 1
    return total / count


def sft_loss(student_fn) -> None:
    """Check sft_loss(logits, tokens, mask) -> mean negative log-likelihood of the tokens where mask
    is 1 (the response), over all of them; the prompt and the padding (mask 0) are never targets."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, 7, (3, 5), generator=g)
    response = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0], [0, 0, 0, 1, 1]], dtype=torch.float64)
    loud_prompt = logits.clone()
    loud_prompt[:, :2] *= 40  # confident, wrong predictions where the prompt is: counting them moves the loss a lot
    cases = [("prompt masked out", (logits, tokens, response)),
             ("a confident prompt that must not count", (loud_prompt, tokens, response)),
             ("an all-padding tail", (logits, tokens, torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]],
                                                                   dtype=torch.float64))),
             ("every token a target", (logits, tokens, torch.ones(3, 5, dtype=torch.float64))),
             ("one response token", (logits[:1], tokens[:1], torch.tensor([[0, 0, 0, 0, 1]], dtype=torch.float64)))]
    run_cases("sft_loss", student_fn, _loop_sft_loss, cases)


def _loop_select_best(scores, n):
    picks = []
    for start in range(0, len(scores), n):
        group = [float(s) for s in scores[start:start + n]]
        picks.append(start + group.index(max(group)))
    return torch.tensor(picks, dtype=torch.float64)


def select_best(student_fn) -> None:
    """Check select_best(scores, n) -> the index into scores of each group's best, groups being
    consecutive blocks of n; a tie goes to the first of the tied draws."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(12, generator=g, dtype=torch.float64)
    cases = [("three groups of four", (s, 4)), ("two groups of six", (s, 6)),
             ("n = 1: every draw is its own best", (s, 1)),
             ("ties go to the first", (torch.tensor([1.0, 3.0, 3.0, 0.0, 2.0, 2.0], dtype=torch.float64), 3)),
             ("all scores negative", (-s.abs(), 3)),
             ("all equal", (torch.zeros(8, dtype=torch.float64), 4))]
    run_cases("select_best", lambda *a: as_numbers(student_fn(*a)), _loop_select_best, cases, tolerance=0.0)


def best_of_n_kl_bound(student_fn) -> None:
    """Check best_of_n_kl_bound(n) -> log N - (N - 1)/N, the KL of best-of-N with continuous rewards."""
    cases = [(f"N = {n}", (n,)) for n in (1, 2, 4, 16, 100, 10_000)]
    run_cases("best_of_n_kl_bound", student_fn, lambda n: math.log(n) - (n - 1) / n, cases)


# ---------------------------------------------------------------- lesson 09
def _loop_dpo(pc, pr, rc, rr, beta):
    """loss, then the chosen and the rejected implicit rewards, as one vector (1 + 2B,)."""
    total, chosen, rejected = 0.0, [], []
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist()):
        h = beta * ((a - c) - (b - d))
        total += math.log1p(math.exp(-h)) if h > -30 else -h  # -log sigmoid(h)
        chosen.append(beta * (a - c))
        rejected.append(beta * (b - d))
    return torch.tensor([total / len(chosen)] + chosen + rejected, dtype=torch.float64)


def _flat_dpo(student_fn):
    def run(*args):
        out = student_fn(*args)
        if not isinstance(out, tuple) or len(out) != 3:
            raise TypeError("return three things: (loss, chosen_rewards, rejected_rewards)")
        loss, chosen, rejected = (as_numbers(x) for x in out)
        return torch.cat([loss.reshape(1), chosen.reshape(-1), rejected.reshape(-1)])
    return run


def dpo_loss(student_fn) -> None:
    """Check dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) -> (loss,
    chosen_rewards, rejected_rewards): the mean over pairs of -log sigmoid(beta * h), h the
    log-ratio margin, and the implicit rewards beta * (log pi - log pi_ref) of each side."""
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (-4 * torch.rand(6, generator=g, dtype=torch.float64) for _ in range(4))
    cases = [("six pairs, beta = 0.1", (pc, pr, rc, rr, 0.1)),
             ("beta = 2", (pc, pr, rc, rr, 2.0)),
             ("the policy is the reference: log 2, rewards 0", (pc, pr, pc.clone(), pr.clone(), 0.5)),
             ("a margin of -1000 (log sigmoid, not log of sigmoid)", (pc - 1000, pr, rc, rr, 1.0)),
             ("one pair", (pc[:1], pr[:1], rc[:1], rr[:1], 0.3))]
    run_cases("dpo_loss", _flat_dpo(student_fn), _loop_dpo, cases)


def _loop_sequence_logprob(logprobs, mask):
    return torch.tensor([sum(float(x) for x, m in zip(row, mrow) if m) for row, mrow in zip(logprobs, mask)],
                        dtype=torch.float64)


def sequence_logprob(student_fn) -> None:
    """Check sequence_logprob(logprobs, mask) -> (B,) the sum of each row's log-probs where mask is 1."""
    g = torch.Generator().manual_seed(0)
    x = -3 * torch.rand(3, 5, generator=g, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float64)
    junk = x.clone()
    junk[ragged == 0] = -math.inf  # a padded position can hold -inf (log 0): it must not reach the sum
    cases = [("ragged rows", (x, ragged)),
             ("-inf on the padding", (junk, ragged)),
             ("no padding", (x, torch.ones(3, 5, dtype=torch.float64))),
             ("an all-padding tail after one token", (x[2:], ragged[2:]))]
    run_cases("sequence_logprob", student_fn, _loop_sequence_logprob, cases)


def _log_sum_exp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _enumerated_soft_q(mdp, rewards):
    """Q(s, a) = r(s, a) + log of the sum, over every way to finish the episode after a, of
    exp(the rewards still to come): each completion through (s, a) listed and summed, no recursion."""
    r = rewards.tolist()
    q = torch.zeros(tuple(rewards.shape), dtype=torch.float64)
    for s, (prompt, prefix) in enumerate(mdp.states):
        t0 = len(prefix)
        for a, action in enumerate(mdp.actions):
            through = [c for c in mdp.completions if len(c) > t0 and c[:t0] == prefix and c[t0] == action]
            to_go = [sum(r[mdp.state_index[(prompt, c[:t])]][mdp.actions.index(c[t])] for t in range(t0, len(c)))
                     for c in through]
            q[s, a] = _log_sum_exp(to_go)
    return q


def soft_value_iteration(student_fn) -> None:
    """Check soft_value_iteration(mdp, rewards) -> Q (n_states, n_actions): Q(s, a) = r(s, a) + V(s'),
    V(s) = log sum_a exp Q(s, a), 0 after the episode ends."""
    from .imitation import reward_table
    from .mdp import MicroMDP
    g = torch.Generator().manual_seed(0)
    world, long = MicroMDP(), MicroMDP(horizon=4)
    cases = [("the world's rewards, horizon 3", (world, reward_table(world))),
             ("random rewards, horizon 4", (long, torch.randn(long.shape, generator=g, dtype=torch.float64))),
             ("rewards of +-300 (log-sum-exp, not the log of a sum of exp)",
              (world, 300 * torch.randn(world.shape, generator=g, dtype=torch.float64))),
             ("horizon 1: one action ends the episode", (MicroMDP(horizon=1), torch.randn(MicroMDP(horizon=1).shape,
                                                                                          generator=g, dtype=torch.float64)))]
    run_cases("soft_value_iteration", student_fn, _enumerated_soft_q, cases)


def _loop_gail_loss(expert_logits, policy_logits):
    def neg_log_sigmoid(x):  # -log(1 / (1 + e^-x)), written to stay finite for large |x|
        return math.log1p(math.exp(-x)) if x > 0 else -x + math.log1p(math.exp(x))
    e = [neg_log_sigmoid(x) for x in expert_logits.tolist()]
    p = [neg_log_sigmoid(-x) for x in policy_logits.tolist()]
    return 0.5 * (sum(e) / len(e) + sum(p) / len(p))


def gail_discriminator_loss(student_fn) -> None:
    """Check gail_discriminator_loss(expert_logits, policy_logits) -> the scalar
    1/2 [mean of -log D on the expert's + mean of -log(1 - D) on the policy's], D = sigmoid(logit)."""
    g = torch.Generator().manual_seed(0)
    e, p = torch.randn(7, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    cases = [("7 expert against 3 policy samples (each class's own mean)", (e, p)),
             ("D = 1/2 everywhere: log 2", (torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64))),
             ("confident and right: logits +-1000", (e.abs() + 1000, -p.abs() - 1000)),
             ("confident and wrong: logits -+1000 (logsigmoid, not log of sigmoid)", (-e.abs() - 1000, p.abs() + 1000)),
             ("one sample each", (e[:1], p[:1]))]
    run_cases("gail_discriminator_loss", student_fn, _loop_gail_loss, cases)


def _loop_importance_weights(rewards, log_q):
    log_w = [r - lq for r, lq in zip(rewards.tolist(), log_q.tolist())]
    top = max(log_w)
    w = [math.exp(x - top) for x in log_w]
    return torch.tensor([x / sum(w) for x in w], dtype=torch.float64)


def importance_weights(student_fn) -> None:
    """Check importance_weights(rewards, log_q) -> (m,) self-normalized weights w_j proportional to
    exp(R(tau_j)) / q(tau_j), summing to 1."""
    g = torch.Generator().manual_seed(0)
    r, lq = torch.randn(6, generator=g, dtype=torch.float64), -3 * torch.rand(6, generator=g, dtype=torch.float64)
    cases = [("six samples", (r, lq)),
             ("samples from the uniform q: weights proportional to exp(R)", (r, torch.full((6,), -math.log(6), dtype=torch.float64))),
             ("rewards near 1000 (subtract the largest log-weight before exp)", (r + 1000, lq)),
             ("a sample q made far more often than exp(R) says: weight near 0", (r, torch.cat([lq[:5], torch.tensor([50.0], dtype=torch.float64)]))),
             ("one sample: weight 1", (r[:1], lq[:1]))]
    run_cases("importance_weights", student_fn, _loop_importance_weights, cases)


def _loop_positions(mask):
    rows = []
    for row in mask.tolist():
        seen, out = 0, []
        for m in row:
            out.append(max(seen + m - 1, 0))
            seen += m
        rows.append(out)
    return torch.tensor(rows, dtype=torch.float64)


def positions_from_mask(student_fn) -> None:
    """Check positions_from_mask(mask) -> (B, L) position ids for left-padded rows: 0 at the first
    real token, counting up over real tokens; padding gets 0 (it is never attended to)."""
    cases = [("no padding", (torch.ones(2, 5, dtype=torch.long),)),
             ("left padding of 0, 2 and 4 tokens", (torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]),)),
             ("a row of padding only", (torch.tensor([[0, 0, 0], [0, 1, 1]]),)),
             ("one column", (torch.tensor([[1], [0]]),)),
             ("a boolean mask", (torch.tensor([[False, True, True, True]]),))]
    run_cases("positions_from_mask", student_fn, _loop_positions, cases)


def _zero_per_rank(n_params, ranks, stage):
    weights, grads, optimizer = 2 * n_params, 2 * n_params, 12 * n_params  # bytes: bf16, bf16, fp32 master + Adam
    if stage >= 1:
        optimizer /= ranks
    if stage >= 2:
        grads /= ranks
    if stage >= 3:
        weights /= ranks
    return (weights + grads + optimizer) / 1e9


def zero_model_states(student_fn) -> None:
    """Check zero_model_states(n_params, ranks, stage) -> GB of model states per rank under ZeRO
    (mixed-precision Adam: 2 + 2 + 12 bytes per parameter; stage 1 shards the 12, stage 2 also the
    gradients, stage 3 also the weights)."""
    cases = [(f"7.5B on 64 GPUs, stage {s} (the ZeRO paper's Figure 1)", (7.5e9, 64, s)) for s in range(4)]
    cases += [("one rank: nothing to shard", (7e9, 1, 3)), ("7B on 8 GPUs, stage 2", (7e9, 8, 2)),
              ("a 0.3M-parameter model on 2 ranks, stage 3", (3e5, 2, 3))]
    run_cases("zero_model_states", student_fn, _zero_per_rank, cases)
