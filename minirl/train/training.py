"""What every trainer shares: its config checks, the on-policy batch loop, the frozen reference,
one optimizer step, and the guard that stops a run on NaN or inf. The rewards the learner sees,
from a task or from a TRL-style reward function, come from `minirl.world.tasks.training_rewards`.
"""
from __future__ import annotations

import copy
import math
import random
from typing import Iterator

import torch

from ..core import validate
from ..core.notebook import progress
from ..lm.model import GPT
from ..lm.multiturn import sample_episodes
from ..lm.sampling import Rollout, sample
from ..world.tasks import Task

__all__ = ["check_inputs", "check_config", "training_batches", "frozen_reference", "check_finite", "optimizer_step", "batches"]


def check_inputs(policy, task, config, config_type: type, multi_turn: bool = False) -> None:
    """A trainer's arguments are what it expects: a minirl GPT, a Task and its own config class;
    a task with an environment only for a trainer that keeps its tokens out of the loss (multi_turn)."""
    if not isinstance(policy, GPT):
        raise TypeError(f"policy must be a minirl GPT, e.g. minirl.load_model('base'); got {type(policy).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must be a minirl.world.tasks.Task, e.g. tasks.arithmetic_task(); got {type(task).__name__}")
    if not isinstance(config, config_type):
        raise TypeError(f"config must be a {config_type.__name__}, got {type(config).__name__}")
    if task.env is not None and not multi_turn:
        raise ValueError(f"task {task.name!r} has an environment that writes tokens into the episode; "
                         f"the trainer of {config_type.__name__} does not yet keep them out of its loss: "
                         "train with train_grpo, train_ppo or train_policy_gradient")


def check_config(config) -> None:
    """The fields every trainer config has: loop sizes, learning rate, clipping and seed."""
    for name in ("steps", "prompts_per_step", "group_size"):
        validate.integer(name, getattr(config, name))
    validate.number("lr", config.lr, 0.0, open_low=True)
    validate.number("max_grad_norm", config.max_grad_norm, 0.0, open_low=True, finite=False)  # inf: no clipping
    validate.number("beta", config.beta, 0.0)
    validate.integer("seed", config.seed, minimum=-2**63)


def training_batches(policy: GPT, task: Task, config, generator: torch.Generator, tokenizer,
                     desc: str) -> Iterator[tuple[int, Rollout]]:
    """The on-policy loop every trainer shares: for each of `config.steps` steps (with a progress
    bar), draw `config.prompts_per_step` training prompts (seeded by `config.seed`) and sample
    `config.group_size` completions of each from the current policy at temperature 1 (episodes,
    the task's environment answering its calls, when it has one). Yields (step, rollout);
    `generator` drives the sampling."""
    if isinstance(task.train_prompts, str) or not task.train_prompts:
        raise ValueError(f"task {task.name!r} needs a non-empty list of training prompts, got {task.train_prompts!r:.60}")
    rng = random.Random(config.seed)
    for step in progress(range(config.steps), desc=desc):
        prompts = [rng.choice(task.train_prompts) for _ in range(config.prompts_per_step)]
        if task.env is None:
            yield step, sample(policy, prompts, max_new_tokens=task.max_new_tokens, group_size=config.group_size,
                               generator=generator, tokenizer=tokenizer)
        else:
            yield step, sample_episodes(policy, prompts, task.env, max_new_tokens=task.max_new_tokens,
                                        max_calls=task.max_calls, group_size=config.group_size, generator=generator,
                                        tokenizer=tokenizer)


def frozen_reference(policy: GPT) -> GPT:
    """A frozen copy of the policy at the start of training: pi_ref, for the KL penalty."""
    return copy.deepcopy(policy).eval().requires_grad_(False)


def check_finite(loss: torch.Tensor, step: int, what: str = "loss") -> None:
    """Stop the run with a clear message when a loss is NaN or inf."""
    if not math.isfinite(loss.item()):
        raise FloatingPointError(f"{what} is {loss.item()} at step {step}: training diverged; lower the learning rate "
                                 "or check the rewards")


def optimizer_step(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], loss: torch.Tensor,
                   max_grad_norm: float | None) -> None:
    """One step on `loss`: gradients, clipped to `max_grad_norm` in global norm (None: not
    clipped), then the update."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    opt.step()


def batches(n: int, batch_size: int, steps: int, rng: random.Random):
    """`steps` lists of indices into range(n): shuffled epochs, cut into batches of batch_size."""
    order: list[int] = []
    for _ in range(steps):
        if len(order) < min(batch_size, n):
            fresh = list(range(n))
            rng.shuffle(fresh)
            order += fresh
        yield order[:batch_size]
        order = order[batch_size:]
