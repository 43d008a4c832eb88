"""The floor everything stands on: argument checks, the data's paths, progress bars, and the
tensor functions of RL (no model, no world).

    validate      argument checks, and the config classes' refusal of unknown options
    paths         where the data lives, and the manifest that guards it
    figures       the course's figure style (set by minirl.setup), and runs over seeds as a band
    notebook      what a lesson's first cell calls (minirl.setup), and its progress bars
    claims        minirl.claim: a lesson's checked claim, printed with its number
    tables        minirl.table: a lesson's rows as an HTML table in Jupyter, aligned text elsewhere
    ops           masked reductions, per-token log-probs
    kl            the k1, k2, k3 estimators of KL
    advantages    returns, GAE, group baselines
    corrections   importance weights for tokens another policy sampled (stale rollouts, another sampler)
    losses        surrogate losses: policy gradient, PPO, GRPO, GSPO, CISPO, value, SFT, Bradley-Terry, DPO, GAIL
    preferences   Bradley-Terry, Elo, rankings, accuracy ceilings
    compare       comparing runs: verdicts only where seeds separate, reads at matched KL, late
                  windows, learning rates chosen on a bracketing grid
"""
from . import (advantages, claims, compare, corrections, figures, kl, losses, notebook, ops, paths, preferences, tables,
               validate)

__all__ = ["advantages", "claims", "compare", "corrections", "figures", "kl", "losses", "notebook", "ops", "paths", "preferences",
           "tables", "validate"]
