"""DPO and IPO solved exactly on the micro world, where the RLHF optimum is known in closed form.

A prompt of the micro world has 40 completions, so a policy over whole completions is a vector of
40 logits z, pi = softmax(z): a *tabular* policy, which can represent any distribution over the
completions (the token-level tabular policy of `minirl.exact.mdp` can too; this one makes the DPO loss a
function of 40 numbers). Preference data is a comparison graph: pairs (i, j) of completions with
labels y = P(i preferred to j). With u = log pi - log pi_ref (the implicit reward over beta):

    DPO   sum over pairs of the Bradley-Terry loss of beta*u_i - beta*u_j with label y
    IPO   sum over pairs (winner w, loser l) of (u_w - u_l - 1/(2 beta))^2

Both depend on u only through differences along the graph's edges, so any normalizer log Z
cancels, and the losses are convex in z. `fit` runs plain gradient descent on the mean over pairs
from z = log pi_ref, with the step 1/L from the loss's curvature bound, so its path is the same on
every machine up to rounding.
"""
from __future__ import annotations

import torch

from ..core import losses, validate

__all__ = ["GRAPHS", "pair_graph", "bt_labels", "hard_pairs", "rlhf_optimum", "dpo_pair_loss", "ipo_pair_loss",
           "step_size", "fit", "ipo_closed_form", "kl"]

GRAPHS = ("all", "star", "split")


def _log_distribution(name: str, x: torch.Tensor) -> None:
    """Check x is a 1-D float tensor of log-probabilities of a distribution over the completions
    (logsumexp 0, so every entry <= 0; -inf, a completion of probability 0, is fine)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or not x.is_floating_point():
        raise TypeError(f"{name} must be a 1-D float tensor of log-probabilities, one per completion; got "
                        f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    lse = torch.logsumexp(x.detach(), 0).item()
    if not abs(lse) <= 1e-5:  # NaN and +inf land here too
        raise ValueError(f"{name} must be the log-probabilities of a distribution (logsumexp 0, every entry <= 0), "
                         f"got logsumexp {lse:.4g}. Probabilities? pass probs.log(); counts, weights or logits? "
                         "pass torch.log_softmax(logits, 0) or (w / w.sum()).log()")


def _index_pairs(names: tuple[str, str], i: torch.Tensor, j: torch.Tensor, n: int) -> None:
    """Check i, j are 1-D integer tensors of one length >= 1, ids of two different completions in [0, n)."""
    for name, x in zip(names, (i, j)):
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.is_floating_point():
            raise TypeError(f"{name} must be a 1-D integer tensor of completion ids (pair_graph, hard_pairs)")
    if i.shape != j.shape or not i.numel():
        raise ValueError(f"{names[0]} and {names[1]} must be equally long and non-empty, one id each per pair; got "
                         f"{i.numel()} and {j.numel()}")
    for name, x in zip(names, (i, j)):
        lo, hi = torch.stack(torch.aminmax(x)).tolist()
        if lo < 0 or hi >= n:
            raise ValueError(f"{name} must hold completion ids in [0, {n}), got ids from {lo} to {hi}")
    if bool((i == j).any()):
        raise ValueError(f"a completion is compared with itself: {names[0]}[k] == {names[1]}[k] for some pair k")


def pair_graph(n: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Index tensors (i, j) of the pairs compared among n completions:
    'all'    every pair once (n(n-1)/2 pairs);
    'star'   every completion against completion 0 (n - 1 pairs: connected, a spanning tree);
    'split'  every pair inside the first half and inside the second half, none across: two
             components, so nothing says how the mass splits between them."""
    validate.integer("n", n, minimum=2)
    validate.choice("kind", kind, GRAPHS)
    if kind == "star":
        j = torch.arange(1, n)
        return torch.zeros_like(j), j
    i, j = torch.triu_indices(n, n, offset=1)
    if kind == "split":
        keep = (i < n // 2) == (j < n // 2)
        i, j = i[keep], j[keep]
    return i, j


def bt_labels(rewards: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Soft labels y = sigmoid(r_i - r_j): the Bradley-Terry probability that i is preferred, what
    an infinite number of annotators' votes on each pair would average to."""
    _index_pairs(("i", "j"), i, j, rewards.numel())
    return torch.sigmoid(rewards[i] - rewards[j])


def hard_pairs(rewards: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(winners, losers): each pair compared once and labelled for the higher reward, ties dropped
    (one annotator, no noise: the data a single hard label per pair records)."""
    _index_pairs(("i", "j"), i, j, rewards.numel())
    keep = rewards[i] != rewards[j]
    i, j = i[keep], j[keep]
    first = rewards[i] > rewards[j]
    return torch.where(first, i, j), torch.where(first, j, i)


def rlhf_optimum(ref_logp: torch.Tensor, rewards: torch.Tensor, beta: float) -> torch.Tensor:
    """log pi*(y) = log pi_ref(y) + r(y)/beta - log Z: the maximizer of E[r] - beta KL(pi || pi_ref)."""
    validate.number("beta", beta, 0.0, open_low=True)
    _log_distribution("ref_logp", ref_logp)
    if not isinstance(rewards, torch.Tensor) or rewards.shape != ref_logp.shape:
        raise ValueError(f"rewards must be a tensor of ref_logp's shape {tuple(ref_logp.shape)}, one per completion")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError(f"rewards hold NaN or inf: {rewards.tolist()!r:.80}")
    return torch.log_softmax(ref_logp + rewards / beta, dim=0)


def dpo_pair_loss(logp: torch.Tensor, ref_logp: torch.Tensor, i: torch.Tensor, j: torch.Tensor, labels: torch.Tensor,
                  beta: float) -> torch.Tensor:
    """DPO with soft labels: the Bradley-Terry loss (mean over pairs) of the implicit rewards
    beta*(log pi - log pi_ref) of i and j with label y = P(i preferred). With y = 1 it is
    `losses.dpo_loss` (sigmoid); with y = 1 - eps, that loss with label smoothing eps."""
    _log_distribution("logp", logp)
    _log_distribution("ref_logp", ref_logp)
    _index_pairs(("i", "j"), i, j, logp.numel())
    u = logp - ref_logp  # (n,)
    return losses.bradley_terry_loss(beta * u[i], beta * u[j], labels)


def ipo_pair_loss(logp: torch.Tensor, ref_logp: torch.Tensor, winners: torch.Tensor, losers: torch.Tensor,
                  beta: float) -> torch.Tensor:
    """IPO on hard labels, `losses.dpo_loss(..., loss_type='ipo')` on each (winner, loser)."""
    _log_distribution("logp", logp)
    _log_distribution("ref_logp", ref_logp)
    _index_pairs(("winners", "losers"), winners, losers, logp.numel())
    return losses.dpo_loss(logp[winners], logp[losers], ref_logp[winners], ref_logp[losers], beta, "ipo")[0]


def step_size(i: torch.Tensor, j: torch.Tensor, n: int, curvature: float) -> float:
    """1/L for gradient descent on a mean over pairs of f(z_i - z_j) with f'' <= curvature: the
    Hessian is at most curvature * Laplacian / n_pairs, so L = curvature * lambda_max / n_pairs."""
    validate.integer("n", n, minimum=2)
    validate.number("curvature", curvature, 0.0, open_low=True)
    _index_pairs(("i", "j"), i, j, n)
    lap = torch.zeros(n, n, dtype=torch.float64)
    lap.index_put_((i, i), torch.ones(len(i), dtype=torch.float64), accumulate=True)
    lap.index_put_((j, j), torch.ones(len(i), dtype=torch.float64), accumulate=True)
    lap.index_put_((i, j), -torch.ones(len(i), dtype=torch.float64), accumulate=True)
    lap.index_put_((j, i), -torch.ones(len(i), dtype=torch.float64), accumulate=True)
    return len(i) / (curvature * torch.linalg.eigvalsh(lap)[-1].item())


def fit(loss_fn, ref_logp: torch.Tensor, lr: float, steps: int, record: list[int]) -> dict[int, torch.Tensor]:
    """Gradient descent on z for `steps` steps from z = log pi_ref; loss_fn(logp) takes the policy's
    log-probs log_softmax(z). Returns {step: log pi} at each step of `record` (0 = the start)."""
    validate.integer("steps", steps)
    validate.number("lr", lr, 0.0, open_low=True)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a function of log pi (such as lambda lp: dpo_pair_loss(lp, ...)), got "
                        f"{type(loss_fn).__name__}")
    _log_distribution("ref_logp", ref_logp)
    for s in record:
        validate.integer("each step of record", s, minimum=0)
    z = ref_logp.detach().clone().double().requires_grad_(True)
    kept = {}
    for step in range(steps + 1):
        if step in record:
            kept[step] = torch.log_softmax(z.detach(), dim=0)
        if step == steps:
            break
        loss = loss_fn(torch.log_softmax(z, dim=0))
        (grad,) = torch.autograd.grad(loss, z)
        with torch.no_grad():
            z -= lr * grad
    return kept


def ipo_closed_form(ref_logp: torch.Tensor, winners: torch.Tensor, losers: torch.Tensor, beta: float) -> torch.Tensor:
    """log pi of IPO's minimizer: u = log pi/pi_ref solves the least-squares problem
    min_u sum over pairs (u_w - u_l - 1/(2 beta))^2, i.e. Laplacian u = (1/(2 beta)) * (wins - losses)
    per completion; on a connected graph u is unique up to a constant, which the normalization
    removes. Computed with the pseudo-inverse of the comparison graph's incidence matrix."""
    validate.number("beta", beta, 0.0, open_low=True)
    _log_distribution("ref_logp", ref_logp)
    _index_pairs(("winners", "losers"), winners, losers, ref_logp.numel())
    n = ref_logp.numel()
    incidence = torch.zeros(len(winners), n, dtype=torch.float64)  # row k: e_w - e_l
    rows = torch.arange(len(winners))
    incidence[rows, winners] = 1.0
    incidence[rows, losers] = -1.0
    target = torch.full((len(winners),), 1 / (2 * beta), dtype=torch.float64)
    u = torch.linalg.pinv(incidence) @ target  # (n,) the minimum-norm least-squares solution
    return torch.log_softmax(ref_logp.double() + u, dim=0)


def kl(logp: torch.Tensor, logq: torch.Tensor) -> float:
    """KL(p || q) = sum p (log p - log q) for log-probability vectors (terms with p = 0 are 0)."""
    _log_distribution("logp", logp)
    _log_distribution("logq", logq)
    if logp.shape != logq.shape:
        raise ValueError(f"logp and logq must have one shape, one entry per completion; got {tuple(logp.shape)} and "
                         f"{tuple(logq.shape)}")
    p = logp.exp()
    return torch.where(p > 0, p * (logp - logq), torch.zeros_like(p)).sum().item()
