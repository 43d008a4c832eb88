"""The micro world, solved exactly: a language small enough to enumerate, where every expectation,
gradient and optimum is a finite sum.

    micro         a language small enough to enumerate every completion
    mdp           it as a token-level MDP: exact values, gradients, estimator variance
    imitation     behaviour cloning, its compounding error, DAgger
    irl           maximum-entropy inverse RL
    micro_dpo     DPO and IPO against the closed-form RLHF optimum
    micro_gail    GAIL with a tabular discriminator
    group_updates  the GRPO family's expected update and its variance, on- and off-policy
    entropy       how a policy-gradient step changes each state's entropy (a covariance)
    reward_design  a format bonus, two rewards combined, a random reward, under group normalization
    distillation  on-policy distillation, SFT on a teacher's samples and RL: expected updates and noise
    micro_env     an environment's turn: its tokens are transitions, not actions; the as-if gradient's bias
    process       process against outcome supervision on a world of checkable steps: each estimator's bias and variance
    expert_iteration  one round of expert iteration is a policy-gradient step with a 0/1 advantage, against GRPO
"""
from . import (distillation, entropy, expert_iteration, group_updates, imitation, irl, mdp, micro, micro_dpo, micro_env,
               micro_gail, process, reward_design)

__all__ = ["distillation", "entropy", "expert_iteration", "group_updates", "imitation", "irl", "mdp", "micro",
           "micro_dpo", "micro_env", "micro_gail", "process", "reward_design"]
