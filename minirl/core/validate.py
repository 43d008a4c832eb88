"""Argument checks for the public entry points: each raises a clear error that names the argument,
what was wrong with it and what to pass instead, before torch meets the value deep inside a call.

Every config class (`GRPOConfig`, `DPOConfig`, ...) goes through `known_options`, so a misspelt or
foreign option name (TRL's `learning_rate`) fails with the option meant and the list of options,
where Python would say only "unexpected keyword argument". A setting that lives elsewhere (the
completion length, on the Task a trainer takes: `TASK_SETTINGS`) is refused with where it lives.

Tensor checks (shapes, masks, dtypes) live with the tensor functions in `minirl.ops`.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import operator

import torch

__all__ = ["TRL_NAMES", "TASK_SETTINGS", "known_options", "unknown_option", "integer", "number", "choice", "token_ids",
           "resolve_device", "generator_type", "generator_for"]

# TRL's names for options minirl spells otherwise (its trainers' configs, and the PPOConfig of earlier
# TRL releases); a config suggests the right-hand name only where it has that field
TRL_NAMES = {
    "learning_rate": "lr", "max_steps": "steps", "per_device_train_batch_size": "batch_size",
    "num_generations": "group_size", "epsilon": "clip_eps", "num_iterations": "inner_steps",
    "lr_scheduler_type": "lr_schedule", "kl_coef": "beta", "cliprange": "clip_eps", "cliprange_value": "value_clip",
    "num_ppo_epochs": "epochs", "num_mini_batches": "minibatches",
}

_ON_THE_TASK = ("the completion length lives on the task, not in the config: task.max_new_tokens, which the "
                "trainer samples with. Set it there: tasks.custom_task(name, prompts, reward_fn, max_new_tokens=24), "
                "or dataclasses.replace(tasks.arithmetic_task(), max_new_tokens=8)")
# settings a user may look for on the config of a trainer that takes a Task, but which the task
# holds (minirl's name, and TRL's: GRPOConfig's max_completion_length, its earlier PPOConfig's response_length)
TASK_SETTINGS = {"max_new_tokens": _ON_THE_TASK, "max_completion_length": _ON_THE_TASK,
                 "response_length": _ON_THE_TASK}


def unknown_option(config: str, name: str, options: list[str], elsewhere: dict[str, str] | None = None) -> str:
    """The message for option `name` that config class `config` lacks: where the setting lives
    when `elsewhere` ({name: where}) knows it; else the option TRL's name stands for, or the
    nearest of `options` by spelling (case aside), then all of them."""
    if elsewhere and name in elsewhere:
        return f"{config} has no option {name!r}: {elsewhere[name]}"
    if TRL_NAMES.get(name) in options:
        hint = f"; did you mean {TRL_NAMES[name]!r}? (TRL's {name!r} is minirl's {TRL_NAMES[name]!r})."
    else:
        lowered = {o.lower(): o for o in options}
        near = difflib.get_close_matches(name.lower(), list(lowered), n=1)
        hint = f"; did you mean {lowered[near[0]]!r}?" if near else "."
    return f"{config} has no option {name!r}{hint} Its options: {', '.join(options)}"


def known_options(cls: type | None = None, *, elsewhere: dict[str, str] | None = None):
    """Class decorator, above @dataclass: the class refuses a keyword it has no field for with a
    TypeError naming the nearest option (`unknown_option`). Positional arguments,
    `dataclasses.replace`, frozen or not, and the signature `help` shows stay the dataclass's own.
    elsewhere: {name: where that setting lives} for names that belong to another object, used as
    @known_options(elsewhere=TASK_SETTINGS) by the configs of trainers that take a Task."""
    if cls is None:
        return functools.partial(known_options, elsewhere=elsewhere)
    init = cls.__init__
    options = [f.name for f in dataclasses.fields(cls) if f.init]

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        for name in kwargs:
            if name not in options:
                raise TypeError(unknown_option(cls.__name__, name, options, elsewhere))
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def integer(name: str, value, minimum: int = 1) -> int:
    """`value` as an int (Python and NumPy integers accepted), after checking it is >= minimum."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def number(name: str, value, low: float = -math.inf, high: float = math.inf, *, open_low: bool = False,
           finite: bool = True) -> float:
    """`value` as a float in [low, high] (or (low, high] with open_low), finite unless finite=False."""
    try:
        if isinstance(value, (bool, str)):
            raise TypeError
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})") from None
    inside = (low < v if open_low else low <= v) and v <= high
    if not inside or (finite and not math.isfinite(v)):
        if math.isinf(high):
            where = f"{'>' if open_low else '>='} {low:g}"
        else:
            where = f"in {'(' if open_low else '['}{low:g}, {high:g}]"
        raise ValueError(f"{name} must be a{' finite' if finite else ''} number {where}, got {value!r}")
    return v


def choice(name: str, value, options) -> None:
    """Check `value` is one of `options` (a name, such as an estimator or an aggregation); a typo
    gets the nearest option by spelling."""
    if value not in options:
        near = difflib.get_close_matches(str(value), [str(o) for o in options], n=1)
        hint = f" did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"unknown {name} {value!r};{hint} choose one of {', '.join(map(repr, options))}")


def token_ids(name: str, ids, vocab_size: int) -> None:
    """Check token ids (an integer tensor, or a list of ints) lie inside a vocabulary of
    `vocab_size`; a tensor is read back once (its min and max together)."""
    if isinstance(ids, torch.Tensor):
        if ids.is_floating_point():
            raise TypeError(f"{name} must be integer token ids, got {ids.dtype}")
        lo, hi = torch.stack(torch.aminmax(ids)).tolist() if ids.numel() else (0, 0)
    else:
        lo, hi = (min(ids), max(ids)) if len(ids) else (0, 0)
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name} must lie in [0, {vocab_size}), the vocabulary; got ids from {lo} to {hi} (encoded "
                         "with another tokenizer? minirl marks tokens to ignore with a 0/1 mask, not with -100)")


def resolve_device(device) -> torch.device:
    """`device` ('cpu', 'cuda', 'cuda:1', 'mps' or a torch.device) after checking this machine has it."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; use 'cpu', 'cuda' (or 'cuda:N') or 'mps'") from None
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available on this machine (this torch "
                             f"{torch.__version__} is {'built with' if torch.backends.cuda.is_built() else 'a CPU-only build, without'} "
                             "CUDA); use device='cpu'")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                             f"numbered from 0")
    elif d.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r}: MPS (Apple GPUs) is not available on this machine; use device='cpu'")
    elif d.type != "cpu":
        raise ValueError(f"device {device!r}: minirl runs on 'cpu', 'cuda' and 'mps'")
    return d


def generator_type(gen) -> None:
    """Check `gen` is None or a torch.Generator (not a seed, nor NumPy's or Python's RNG)."""
    if gen is not None and not isinstance(gen, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, e.g. torch.Generator().manual_seed(0); "
                        f"got {type(gen).__name__}")


def generator_for(gen, device: torch.device) -> None:
    """Check a sampling generator: a torch.Generator on the CPU (it then serves any device: its
    numbers are drawn on the CPU and moved) or on `device` itself."""
    generator_type(gen)
    same = gen is not None and gen.device.type == device.type and (gen.device.index or 0) == (device.index or 0)
    if gen is not None and gen.device.type != "cpu" and not same:
        raise ValueError(f"the generator lives on {gen.device} but the model on {device}; pass a CPU "
                         "generator (torch.Generator(), which serves every device) or one on the model's device")
