"""minirl: a small from-scratch engine for learning reinforcement learning for language models.

    import minirl
    enc = minirl.load_tokenizer()          # tiktoken.Encoding from the course's own BPE ranks
    model = minirl.load_model("base")      # the tiny GPT pretrained on the tiny world
    out = minirl.sample(model, ["q: 17+25= a:"], max_new_tokens=6, group_size=8)
    out.texts, out.logprobs, out.mask      # completions and their RL tensors
    minirl.sequence_logprobs(model, [("q: 17+25= a:", " 42")])   # log pi(" 42" + EOS | prompt), (1,)

Every trainer takes a config dataclass (GRPOConfig, PPOConfig, DPOConfig, ...) whose help lists
what each option means; an option it does not have is refused with the nearest name it does have.

Modules (`import minirl` loads all but the last group):

  The tiny world
    grammar            its words, and a validator per task family
    rewards            reward functions with TRL's signature, and the hidden ground truth
    datasets           its files: corpora, prompts, preference pairs, demonstrations, scores
    world              the seeded generator that writes those files (python -m minirl.world)
    tasks              RL tasks: prompts, per-token rewards, gold metrics
    paths              where the data lives, and the manifest that guards it

  The model
    tokenizer          byte-level BPE, loaded into tiktoken
    model              the tiny GPT, laid out like GPT-2, with a KV cache
    sampling           batched sampling, and the log-probs of sampled completions
    evaluate           validity, truncation, pass@k, the base-model report
    export             to Hugging Face's GPT-2 classes and a fast tokenizer, for TRL

  Tensor functions
    ops                masked reductions, per-token log-probs
    kl                 the k1, k2, k3 estimators of KL
    advantages         returns, GAE, group baselines
    losses             surrogate losses: policy gradient, PPO, GRPO, value, SFT, Bradley-Terry, DPO, GAIL
    critic             the value head

  The micro world, solved exactly
    micro              a language small enough to enumerate every completion
    mdp                it as a token-level MDP: exact values, gradients, estimator variance
    imitation          behaviour cloning, its compounding error, DAgger
    irl                maximum-entropy inverse RL
    micro_dpo          DPO and IPO against the closed-form RLHF optimum
    micro_gail         GAIL with a tabular discriminator

  Training the tiny GPT
    training           what the trainers share: config checks, the batch loop, the reference, a step
    pg_trainer         REINFORCE and actor-critic (PGConfig)
    ppo_trainer        PPO, RLHF style (PPOConfig)
    grpo_trainer       GRPO (GRPOConfig)
    sft                supervised fine-tuning, behaviour cloning (SFTConfig); `sequence_logprobs`
    reward_model       a reward head on the trunk, trained on preference pairs (RMConfig)
    dpo                DPO, IPO and SimPO (DPOConfig)
    best_of_n          best-of-N sampling, its exact distribution and KL
    raft               reward-ranked fine-tuning (RAFTConfig)
    gail               GAIL and AIRL on the plans world (GAILConfig)

  Measuring
    preferences        Bradley-Terry, Elo, rankings, accuracy ceilings
    rlhf               lesson 08's measurements on the orders world
    overoptimization   exact over-optimization curves, Gao et al.'s forms
    compare            comparing runs: verdicts only where seeds separate, reads at matched KL, late
                       windows, learning rates chosen on a bracketing grid
    memory             training memory by model size and precision
    validate           argument checks, and the config classes' refusal of unknown options

  The lessons
    notebook           what a lesson's first cell calls (minirl.setup), and its progress bars
    check              exercise checkers

  Commands, imported by name only (course and site are instructor tools on nbformat and nbconvert)
    pretrain           trains the base model (python -m minirl.pretrain)
    train_reward_models  trains the shipped reward models (python -m minirl.train_reward_models)
    course             the course's commands: open it, hand it out, check it, grade it
    site               the lessons as a static site
"""
from . import (advantages, best_of_n, check, compare, critic, datasets, dpo, evaluate, export, gail, grammar,
               grpo_trainer, imitation, irl, kl, losses, mdp, memory, micro, micro_dpo, micro_gail, model, notebook,
               ops, overoptimization, paths, pg_trainer, ppo_trainer, preferences, raft, reward_model, rewards, rlhf,
               sampling, sft, tasks, tokenizer, training, validate, world)
from .model import GPT, GPTConfig, KVCache, load_model
from .notebook import setup
from .paths import DataError
from .sampling import Rollout, completion_logprobs, sample, sample_tokens
from .sft import sequence_logprobs
from .tokenizer import load_tokenizer

__all__ = [
    "GPT", "GPTConfig", "KVCache", "Rollout", "DataError", "completion_logprobs", "load_model", "load_tokenizer",
    "sample", "sample_tokens", "sequence_logprobs", "setup",
    "advantages", "best_of_n", "check", "compare", "critic", "datasets", "dpo", "evaluate", "export", "gail", "grammar",
    "grpo_trainer", "imitation", "irl", "kl", "losses", "mdp", "memory", "micro", "micro_dpo", "micro_gail", "model",
    "notebook", "ops", "overoptimization", "paths", "pg_trainer", "ppo_trainer", "preferences", "raft",
    "reward_model", "rewards", "rlhf", "sampling", "sft", "tasks", "tokenizer", "training", "validate", "world",
]
