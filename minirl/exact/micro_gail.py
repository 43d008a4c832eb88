"""GAIL solved exactly on the micro world: a tabular discriminator over whole episodes against a
tabular token-level policy, every expectation a finite sum over the 80 (prompt, completion) episodes.

The discriminator has one logit psi(tau) per episode, D = sigmoid(psi) = P(expert). Its loss is
`losses.gail_discriminator_loss` with the batch means replaced by expectations under p_E and p_pi
(per prompt, averaged over prompts); for a fixed policy its minimizer is D* = p_E / (p_E + p_pi),
whose logit is log p_E - log p_pi. The policy ascends E_pi[psi] by its exact gradient (the
'logit' reward form of `minirl.train.gail`; no KL penalty). With D at its optimum that gradient is minus
the gradient of KL(p_pi || p_E), so the policy moves toward the expert, and at the end D = 1/2 on
every episode: the discriminator can no longer tell them apart. Ho & Ermon add an entropy bonus
and use TRPO steps; here the steps are plain gradient ascent with a fixed rate.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core import validate
from .imitation import state_visitation
from .irl import (_check_episode_distribution, _check_mdp, _check_nonnegative, _check_tensor, episode_distribution,
                  per_prompt_mean)
from .mdp import MicroMDP

__all__ = ["discriminator_loss", "optimal_logits", "kl", "train", "occupancy", "prefix_logits", "generator_step"]


def _check_pair(name: str, p, other: str, q) -> None:
    """Two finite, non-negative 1-D tensors of one shape (episode distributions, not checked to sum to 1)."""
    for n, x in ((name, p), (other, q)):
        _check_tensor(n, x, ("N",), "a probability per episode")
    if p.shape != q.shape:
        raise ValueError(f"{name} and {other} must be 1-D of one shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    _check_nonnegative(name, p)
    _check_nonnegative(other, q)


def discriminator_loss(mdp: MicroMDP, psi: torch.Tensor, expert: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
    """1/2 [E_{p_E}[-log D] + E_{p_pi}[-log(1 - D)]], mean over prompts. psi, expert, policy: (N,)."""
    _check_tensor("psi", psi, (len(_check_mdp(mdp).table.prompt),), "one discriminator logit per episode of mdp.table")
    _check_episode_distribution(mdp, "expert", expert)
    _check_episode_distribution(mdp, "policy", policy)
    return _discriminator_loss(mdp, psi, expert, policy)


def _discriminator_loss(mdp: MicroMDP, psi: torch.Tensor, expert: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
    """`discriminator_loss` without the checks, for `train`'s inner loop (its inputs checked once)."""
    per_episode = 0.5 * (-expert * F.logsigmoid(psi) - policy * F.logsigmoid(-psi))
    return per_prompt_mean(mdp, torch.ones_like(psi), per_episode[:, None]).squeeze(0)


def optimal_logits(expert: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
    """The logit of D* = p_E / (p_E + p_pi): log p_E - log p_pi, (N,)."""
    _check_pair("expert", expert, "policy", policy)
    return expert.log() - policy.log()


def kl(p: torch.Tensor, q: torch.Tensor, mdp: MicroMDP) -> float:
    """KL(p || q) between two episode distributions, mean over prompts (0 log 0 = 0)."""
    _check_episode_distribution(_check_mdp(mdp), "p", p)
    _check_episode_distribution(mdp, "q", q, sums=False)
    terms = torch.where(p > 0, p * (p.log() - q.log()), torch.zeros_like(p))
    return per_prompt_mean(mdp, torch.ones_like(p), terms[:, None]).item()


def train(mdp: MicroMDP, expert: torch.Tensor, logits: torch.Tensor, steps: int, policy_lr: float = 1.0,
          disc_steps: int = 20, disc_lr: float = 1.0) -> list[dict]:
    """Alternate `disc_steps` gradient steps of the discriminator (from its last value, psi = 0 at the
    start) and one policy step, `steps` times, from tabular `logits`. Returns per step: KL(p_E || p_pi),
    the discriminator's loss, the largest |D - 1/2| over the episodes the expert or policy can write,
    and the largest gap between the discriminator's logit and the optimal one."""
    _check_episode_distribution(_check_mdp(mdp), "expert", expert)
    mdp.check_logits(logits)
    validate.integer("steps", steps, minimum=0)
    validate.integer("disc_steps", disc_steps)
    validate.number("policy_lr", policy_lr, 0.0, open_low=True)
    validate.number("disc_lr", disc_lr, 0.0, open_low=True)
    theta = logits.detach().double().clone().requires_grad_(True)
    psi = torch.zeros(len(expert), dtype=torch.float64, requires_grad=True)
    history = []
    for _ in range(steps):
        policy = episode_distribution(mdp, theta.detach())
        for _ in range(disc_steps):
            loss = _discriminator_loss(mdp, psi, expert, policy)
            (grad,) = torch.autograd.grad(loss, psi)
            psi = (psi - disc_lr * len(mdp.prompts) * grad).detach().requires_grad_(True)
        d = torch.sigmoid(psi.detach())
        seen = (expert > 0) | (policy > 0)
        history.append({"kl": kl(expert, policy, mdp), "disc_loss": loss.item(),
                        "d_gap": (d - 0.5).abs()[seen].max().item(),
                        "logit_error": (psi.detach() - optimal_logits(expert, policy)).abs().max().item()})
        objective = (episode_distribution(mdp, theta) * psi.detach()).sum() / len(mdp.prompts)
        (grad,) = torch.autograd.grad(objective, theta)
        theta = (theta + policy_lr * grad).detach().requires_grad_(True)
    return history


# ---------------------------------------------------------------- a discriminator over prefixes
def occupancy(mdp: MicroMDP, logits: torch.Tensor) -> torch.Tensor:
    """rho(s, a) = P(reach s) pi(a | s), (n_states, n_actions), the prompt uniform."""
    return state_visitation(mdp, logits)[:, None] * torch.softmax(logits.double(), dim=-1)


def prefix_logits(mdp: MicroMDP, expert_logits: torch.Tensor, policy_logits: torch.Tensor) -> torch.Tensor:
    """The optimal discriminator over (prefix, next token) pairs: logit log rho_E - log rho_pi per pair.
    Its reward comes once per token, not once per completion."""
    return occupancy(mdp, expert_logits).log() - occupancy(mdp, policy_logits).log()


def generator_step(mdp: MicroMDP, logits: torch.Tensor, rewards: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """The KL-regularized best response to per-step rewards r(s, a): pi'(tau) = pi(tau) e^{R(tau)/beta} / Z,
    by soft value iteration on r / beta + log pi(a | s). Logits of pi'."""
    validate.number("beta", beta, 0.0, open_low=True)
    _check_mdp(mdp).check_logits(logits)
    if not isinstance(rewards, torch.Tensor) or tuple(rewards.shape) != mdp.shape:
        raise ValueError(f"rewards: a reward table has shape {mdp.shape} (states x actions), got "
                         f"{tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__}")
    return mdp.soft_value_iteration(rewards / beta + torch.log_softmax(logits.double(), dim=-1))[0]
