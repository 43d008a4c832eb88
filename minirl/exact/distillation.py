"""Learning from a teacher policy T instead of a reward, exactly on the micro world.

Three ways to move a student pi toward a teacher, each an expected update (n_states, n_actions):

    on-policy distillation   the student samples, the teacher scores every token: descend the
                             reverse KL of whole completions, KL(pi || T) = E_{tau~pi} sum_t delta_t,
                             delta_t = log pi(a_t|s_t) - log T(a_t|s_t). Its gradient is
                             E_{tau~pi} sum_t grad log pi(a_t|s_t) * sum_{t'>=t} delta_t' (a policy
                             gradient with reward -delta; the score's own term has mean zero)
    per-token                the same samples, each token scored by its own delta_t only (the
                             future's deltas dropped): the gradient of sum_s d_pi(s) KL(pi(.|s) || T(.|s))
                             with the visitation d_pi held fixed
    SFT                      the teacher samples, the student imitates: ascend E_{tau~T} log pi(tau),
                             i.e. descend the forward KL(T || pi), on the states the teacher visits

DAgger (Ross et al., 2011) is the ancestor of the on-policy form: the student's own states, labelled
by the expert (`minirl.exact.imitation.dagger`). On-policy distillation of language models: Agarwal
et al. (2024, GKD); Lu and Thinking Machines Lab (2025). `single_sample_moments` gives each estimator's
mean and variance from one sampled completion per prompt, so the noise of a dense teacher signal
can be set beside the policy gradient of a sparse reward.
"""
from __future__ import annotations

import torch

from ..core import validate
from ..core.advantages import reward_to_go
from .group_updates import Moments, _check_mdp, _check_policy
from .mdp import MicroMDP

__all__ = ["ESTIMATORS", "token_log_ratios", "estimator_weights", "single_sample_moments", "expected_update",
           "forward_kl"]

ESTIMATORS = ("on_policy", "per_token", "sft", "reward")


def token_log_ratios(mdp: MicroMDP, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """delta_t = log pi(a_t|s_t) - log T(a_t|s_t) on every step of every episode of `mdp.table` (N, K), 0 on padding."""
    _check_policy(mdp, student, "student")
    _check_policy(mdp, teacher, "teacher")
    t = mdp.table
    delta = torch.log_softmax(student.detach().double(), -1) - torch.log_softmax(teacher.detach().double(), -1)
    return delta[t.states, t.actions] * t.mask


def estimator_weights(mdp: MicroMDP, student: torch.Tensor, teacher: torch.Tensor, estimator: str) -> torch.Tensor:
    """The weight on grad log pi(a_t|s_t) of every step of every episode (N, K), such that the
    single-sample update is sum_t w_t grad log pi(a_t|s_t) and its expectation ascends the
    estimator's objective: -sum_{t'>=t} delta_t' (on_policy), -delta_t (per_token), 1 (sft, on the
    teacher's samples), the reward-to-go of the world's rewards (reward, REINFORCE)."""
    _check_arguments(mdp, student, teacher, estimator)
    t = mdp.table
    if estimator == "reward":
        return reward_to_go(t.rewards, t.mask)
    if estimator == "sft":
        return t.mask.clone()
    delta = token_log_ratios(mdp, student, teacher)
    return -(reward_to_go(delta, t.mask) if estimator == "on_policy" else delta)


def _check_arguments(mdp: MicroMDP, student: torch.Tensor, teacher: torch.Tensor, estimator: str) -> None:
    """The mdp, the estimator's name and both policies: finite logits, except that where no log-ratio is
    formed ('sft', 'reward') an action never taken may have a -inf logit."""
    _check_mdp(mdp)
    if not isinstance(estimator, str):
        raise TypeError(f"estimator must be a name, one of {', '.join(map(repr, ESTIMATORS))}; got "
                        f"{type(estimator).__name__}")
    validate.choice("estimator", estimator, ESTIMATORS)
    ratios = estimator in ("on_policy", "per_token")
    _check_policy(mdp, student, "student", minus_inf=not ratios)
    _check_policy(mdp, teacher, "teacher", minus_inf=not ratios)


def _sampler(mdp: MicroMDP, student: torch.Tensor, teacher: torch.Tensor, estimator: str) -> torch.Tensor:
    """The probability of every episode of `mdp.table` under the policy that samples for `estimator`,
    each prompt's completions summing to 1 (N,)."""
    logits = teacher if estimator == "sft" else student
    return mdp.episode_log_probs(logits.detach().double()).exp()


def single_sample_moments(mdp: MicroMDP, student: torch.Tensor, teacher: torch.Tensor, estimator: str) -> Moments:
    """E[g] and E|g - E g|^2 of the update g = (1/P) sum over prompts of sum_t w_t grad log pi
    (`estimator_weights`) from one completion of each of the P prompts, drawn by the student (or the
    teacher, for 'sft'); exact, by enumeration."""
    _check_arguments(mdp, student, teacher, estimator)
    w = estimator_weights(mdp, student, teacher, estimator)
    f = mdp.weighted_scores(student.detach().double(), w).flatten(1)  # (N, D)
    prob = _sampler(mdp, student, teacher, estimator)
    prompts = len(mdp.prompts)
    mean, variance = torch.zeros(f.size(1), dtype=torch.float64), 0.0
    for i in range(prompts):  # the prompts' updates are independent: their variances add
        rows = mdp.table.prompt == i
        m = prob[rows] @ f[rows]
        variance += float(prob[rows] @ (f[rows] * f[rows]).sum(1) - m @ m) / prompts ** 2
        mean += m / prompts
    return Moments(mean.view(mdp.shape), variance)


def expected_update(mdp: MicroMDP, student: torch.Tensor, teacher: torch.Tensor, estimator: str) -> torch.Tensor:
    """E[g] of `single_sample_moments` (n_states, n_actions): the direction an estimator moves the student."""
    return single_sample_moments(mdp, student, teacher, estimator).mean


def forward_kl(mdp: MicroMDP, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL(T || pi) over whole completions, mean over prompts: what SFT on the teacher's samples descends."""
    _check_policy(mdp, student, "student")
    _check_policy(mdp, teacher, "teacher")
    return mdp.kl(teacher, student)
