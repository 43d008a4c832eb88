"""The tiny world: its grammar, its hidden ground truth, its files, and the RL tasks on it.

    grammar       its words, and a validator per task family
    rewards       reward functions with TRL's signature, and the hidden ground truth
    datasets      its files: corpora, prompts, preference pairs, demonstrations, scores
    generate      the seeded generator that writes those files (python -m minirl.world)
    tasks         RL tasks: prompts, per-token rewards, gold metrics
    evaluate      validity, truncation, pass@k, the base-model report
    tools         a calculator the model may call before it answers a sum
    steps         sums of several numbers written step by step: every step labelled by the world
"""
from . import datasets, evaluate, generate, grammar, rewards, steps, tasks, tools

__all__ = ["datasets", "evaluate", "generate", "grammar", "rewards", "steps", "tasks", "tools"]
