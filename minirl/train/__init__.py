"""Training the tiny GPT: every trainer with its config, and what lessons 09 and 10 measure.

Each trainer's home is its module; the trainers and their configs are also here, so that
`from minirl.train import GRPOConfig, train_grpo` is the one import homework needs.

    training          what the trainers share: config checks, the batch loop, the reference, a step
    pg                REINFORCE and actor-critic (PGConfig, train_policy_gradient)
    ppo               PPO, RLHF style (PPOConfig, train_ppo)
    grpo              GRPO (GRPOConfig, train_grpo)
    sft               supervised fine-tuning, behaviour cloning (SFTConfig, train_sft)
    reward_model      a reward model trained on preference pairs (RMConfig, train_reward_model)
    dpo               DPO, IPO and SimPO (DPOConfig, train_dpo)
    best_of_n         best-of-N sampling, its exact distribution and KL (best_of_n)
    raft              reward-ranked fine-tuning (RAFTConfig, train_raft)
    expert_iteration  expert iteration: keep what the verifier accepts, fine-tune (ExpertIterationConfig, train_expert_iteration)
    prm               process reward models: exact and Monte Carlo step labels, the loss, aggregations (PRMConfig, train_prm)
    process_rewards   a process or outcome reward model as RL's reward on the steps task
    gail              GAIL and AIRL on the plans world (GAILConfig, train_gail)
    rlhf              lessons 09 and 10's measurements on the orders world
    overoptimization  exact over-optimization curves, Gao et al.'s forms

  Commands, imported by name only:
    pretrain          trains the base model (python -m minirl.train.pretrain)
    reward_models     trains the shipped reward models (python -m minirl.train.reward_models)
    sft_model         trains the shipped SFT model (python -m minirl.train.sft_model)
    tool_model        trains the shipped tool model, which calls the calculator (python -m minirl.train.tool_model)
    steps_model       trains the shipped steps model, which writes sums step by step (python -m minirl.train.steps_model)
    process_models    trains the shipped process and outcome reward models of the steps task
                      (python -m minirl.train.process_models)
"""
from . import (best_of_n, dpo, expert_iteration, gail, grpo, overoptimization, pg, ppo, prm, process_rewards, raft,
               reward_model, rlhf, sft, training)
from .best_of_n import BestOfN
from .dpo import DPOConfig, train_dpo
from .expert_iteration import ExpertIterationConfig, train_expert_iteration
from .gail import GAILConfig, train_gail
from .grpo import GRPOConfig, train_grpo
from .pg import PGConfig, train_policy_gradient
from .ppo import PPOConfig, train_ppo
from .prm import PRMConfig, train_prm
from .raft import RAFTConfig, train_raft
from .reward_model import RMConfig, train_on_scores, train_reward_model
from .sft import SFTConfig, train_sft

__all__ = ["BestOfN", "DPOConfig", "ExpertIterationConfig", "GAILConfig", "GRPOConfig", "PGConfig", "PPOConfig",
           "PRMConfig", "RAFTConfig", "RMConfig", "SFTConfig", "train_dpo", "train_expert_iteration", "train_gail",
           "train_grpo", "train_on_scores", "train_policy_gradient", "train_ppo", "train_prm", "train_raft",
           "train_reward_model", "train_sft",
           "best_of_n", "dpo", "expert_iteration", "gail", "grpo", "overoptimization", "pg", "ppo", "prm",
           "process_rewards", "raft", "reward_model", "rlhf", "sft", "training"]
