"""minirl: a small from-scratch engine for learning reinforcement learning for language models.

    import minirl
    enc = minirl.load_tokenizer()          # tiktoken.Encoding from the course's own BPE ranks
    model = minirl.load_model("base")      # the tiny GPT pretrained on the tiny world
    out = minirl.sample(model, ["q: 17+25= a:"], max_new_tokens=6, group_size=8)
    out.texts, out.logprobs, out.mask      # completions and their RL tensors

Modules: ops (masked reductions, log-probs), grammar (the world's validators), rewards (reward
functions), datasets (the world's files), model, sampling, evaluate, check (exercise checkers),
notebook (lesson setup), micro (the enumerable micro world), mdp (its exact solutions),
advantages (returns, GAE, baselines), kl (k1, k2, k3), losses, critic (value head), tasks (RL tasks), training
(what the trainers share: batches, rewards, reward functions), pg_trainer (REINFORCE and actor-critic), ppo_trainer,
grpo_trainer, memory (training memory by model size), validate (argument checks), preferences (Bradley-Terry,
Elo, rankings, accuracy ceilings), reward_model (a reward head on the trunk, trained on pairs), sft (supervised
fine-tuning, behaviour cloning), best_of_n (best-of-N sampling, its exact distribution and KL), raft (reward-ranked
fine-tuning), rlhf (lesson 08's measurements on the orders world), overoptimization (exact over-optimization curves,
Gao et al.'s forms), compare (comparing runs: verdicts only where seeds separate, reads at matched KL, late
windows, learning rates chosen on a bracketing grid).
"""
from . import (advantages, best_of_n, check, compare, critic, datasets, evaluate, grammar, grpo_trainer, kl, losses, mdp,
               memory, micro, ops, overoptimization, pg_trainer, ppo_trainer, preferences, raft, reward_model, rewards, rlhf,
               sft, tasks, training, validate)
from .model import GPT, GPTConfig, KVCache, load_model
from .notebook import setup
from .paths import DataError
from .sampling import Rollout, completion_logprobs, sample, sample_tokens
from .tokenizer import load_tokenizer

__all__ = [
    "GPT", "GPTConfig", "KVCache", "Rollout", "DataError", "advantages", "best_of_n", "check", "compare", "completion_logprobs",
    "critic", "datasets", "evaluate", "grammar", "grpo_trainer", "kl", "load_model", "load_tokenizer", "losses", "mdp",
    "memory", "micro", "ops", "overoptimization", "pg_trainer", "ppo_trainer", "preferences", "raft", "reward_model",
    "rewards", "rlhf", "sample", "sample_tokens", "setup", "sft", "tasks", "training", "validate",
]
