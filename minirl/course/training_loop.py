"""The checker of the write-the-loop exercise: a student's REINFORCE loop against minirl's.

The student writes `reinforce_loop(policy, reference, task, config, tokenizer)`: for each of
`config.steps` steps, sample a batch (`training_batches`), score it with the task's per-token
rewards minus beta * (log pi - log pi_ref) on every real token, take each completion's total
minus the mean total of its prompt's group as the advantage of its every token, and one AdamW step
on -(1/B) sum_i sum_t A_it log pi(a_it|s_it), gradients clipped to `config.max_grad_norm`. It
returns one dict per step: 'rollout', 'rewards' (B, T), 'advantages' (B, T) and 'loss' (a scalar).
That is `minirl.train.pg.train_policy_gradient` with `estimator='group_mean'` and beta > 0.

`reinforce_loop(student_loop)` checks it in the order the loop runs and names the first part that
differs:

1. sampling: the first batch's tokens against minirl's loop from the same seed;
2. rewards, advantages, loss: on one batch from a policy that differs from its reference (at the
   first step of training the two are equal and the KL term is 0, so its mistakes would hide),
   against plain loops written here, never minirl's trainer; each with the mistakes it knows;
3. the optimiser step: the parameters after one step and after two, against minirl's trainer run
   from the same seed (relative to how far that moved them: the first AdamW step is about
   lr * sign(g), so where a gradient is near 0 rounding alone flips a parameter's move);
4. training: 12 steps of the student's loop raise the batch's proxy reward by more than 0.5 (over
   seeds 0-3 and two rates minirl's loop raised it by 0.84 to 3.9).

Every message is one PASS or FAIL line with what to fix under it; it never raises on the
student's code. It runs in about 5 seconds on one thread.
"""
from __future__ import annotations

import copy
import dataclasses
import math

import torch

from ..lm.sampling import completion_logits, completion_logprobs
from ..train.pg import PGConfig, train_policy_gradient
from ..train.training import frozen_reference, training_batches
from .verdicts import NOT_DONE, emit

__all__ = ["reinforce_loop", "PARTS", "STEP_TOLERANCE", "TARGET_RISE"]

PARTS = ("rollout", "rewards", "advantages", "loss")
STEP_TOLERANCE = 0.002  # |student's parameters - minirl's| / |minirl's move| after 1 and 2 steps; a right loop: 3e-5
TARGET_RISE = 0.5  # the rise in the batch's mean proxy reward, last 3 of 12 steps against the first 3
NOISE = 0.02  # the policy of the parts check: the reference's weights plus this much Gaussian noise


class Mismatch(Exception):
    """A part of the student's loop that differs: `part` names it, the message says how and what to fix."""

    def __init__(self, part: str, message: str):
        super().__init__(message)
        self.part = part


def run_student(student_loop, policy, reference, task, config, tokenizer) -> list[dict]:
    """The student's per-step parts, checked for shape: one dict per step with PARTS."""
    parts = student_loop(policy, reference, task, config, tokenizer)
    if not isinstance(parts, (list, tuple)) or len(parts) != config.steps:
        got = f"a {type(parts).__name__}" + (f" of {len(parts)}" if isinstance(parts, (list, tuple)) else "")
        raise Mismatch("the loop", f"returned {got}: return a list with one dict per step "
                                   f"({config.steps} here), each with keys {', '.join(PARTS)}")
    for step, p in enumerate(parts):
        missing = [k for k in PARTS if not isinstance(p, dict) or k not in p]
        if missing:
            raise Mismatch("the loop", f"step {step}'s dict lacks {', '.join(missing)}: "
                                       f"each step returns {{{', '.join(repr(k) + ': ...' for k in PARTS)}}}")
    return list(parts)


def plain_parts(policy, reference, rollout, task_rewards, beta: float, group_size: int):
    """The step's rewards (B, T), advantages (B, T) and loss, one completion and one token at a time."""
    with torch.no_grad():
        logp = torch.log_softmax(completion_logits(policy, rollout).double(), -1)
        ref = torch.log_softmax(completion_logits(reference, rollout).double(), -1)
    B, T = rollout.tokens.shape
    rewards, advantages = torch.zeros(B, T, dtype=torch.float64), torch.zeros(B, T, dtype=torch.float64)
    chosen = torch.zeros(B, T, dtype=torch.float64)
    for i in range(B):
        for t in range(T):
            if rollout.mask[i, t]:
                a = int(rollout.tokens[i, t])
                chosen[i, t] = logp[i, t, a]
                rewards[i, t] = float(task_rewards[i, t]) - beta * float(logp[i, t, a] - ref[i, t, a])
    totals = [float(rewards[i].sum()) for i in range(B)]
    for i in range(B):
        first = i - i % group_size
        baseline = sum(totals[first:first + group_size]) / group_size
        for t in range(T):
            if rollout.mask[i, t]:
                advantages[i, t] = totals[i] - baseline
    loss = -sum(float(advantages[i, t] * chosen[i, t]) for i in range(B) for t in range(T)) / B
    return rewards, advantages, loss, chosen


def numbers(part: str, x, shape) -> torch.Tensor:
    """The student's part as float64, of the batch's shape."""
    if not isinstance(x, torch.Tensor):
        raise Mismatch(part, f"is a {type(x).__name__}: return a tensor")
    if tuple(x.shape) != tuple(shape):
        raise Mismatch(part, f"has shape {tuple(x.shape)}, expected {tuple(shape)} (one per completion token)")
    return x.detach().double()


def check_rewards(got, want, task_rewards, mask, beta: float) -> None:
    if torch.allclose(got, want, atol=1e-5):
        return
    kl = (task_rewards - want) / beta  # (log pi - log pi_ref) on real tokens
    if torch.allclose(got, task_rewards * mask, atol=1e-5):
        hint = "they are the task's rewards alone: subtract beta * (log pi - log pi_ref) on every real token"
    elif torch.allclose(got, (task_rewards + beta * kl) * mask, atol=1e-5):
        hint = "the KL term has the wrong sign: the reward is r_t - beta * (log pi - log pi_ref)"
    elif torch.allclose(got * mask, want, atol=1e-5):
        hint = "they are not 0 on padding: multiply the KL term by rollout.mask"
    else:
        hint = "each real token's reward is the task's r_t - beta * (log pi(a_t|s_t) - log pi_ref(a_t|s_t))"
    raise Mismatch("rewards", f"differ from the reference by up to {(got - want).abs().max().item():.2g}: {hint}")


def check_advantages(got, want, rewards, mask, group_size: int) -> None:
    if torch.allclose(got, want, atol=1e-5):
        return
    totals = rewards.sum(1)  # (B,)
    batch = (totals - totals.mean())[:, None] * mask
    unmasked = (totals - totals.view(-1, group_size).mean(1).repeat_interleave(group_size))[:, None].expand_as(got)
    to_go = rewards.flip(1).cumsum(1).flip(1)
    if torch.allclose(got, batch, atol=1e-5):
        hint = ("the baseline is the mean over the whole batch: take the mean over the prompt's group "
                f"(its {group_size} consecutive rows)")
    elif torch.allclose(got, unmasked, atol=1e-5):
        hint = "they are not 0 on padding: multiply by rollout.mask (the mask forgotten)"
    elif torch.allclose(got, totals[:, None] * mask, atol=1e-5):
        hint = "no baseline was subtracted: subtract the mean total of the prompt's group"
    elif torch.allclose(got, (to_go - (want - totals[:, None] * mask)) * mask, atol=1e-5):
        hint = "that is reward-to-go minus the baseline: this loop gives every token its completion's total"
    else:
        hint = "each completion's total reward minus the mean total of its group, on every real token"
    raise Mismatch("advantages", f"differ from the reference by up to {(got - want).abs().max().item():.2g}: {hint}")


def check_loss(got: float, want: float, advantages, chosen, mask) -> None:
    if math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-6):
        return
    per_token = -float((advantages * chosen).sum() / mask.sum())
    if math.isclose(got, -want, rel_tol=1e-4, abs_tol=1e-6):
        hint = "it has the wrong sign: minimize -(1/B) sum_i sum_t A_it log pi (gradient descent on the negative)"
    elif math.isclose(got, per_token, rel_tol=1e-4, abs_tol=1e-6):
        hint = "it is a mean over tokens: sum over each completion's tokens, then average over the B completions"
    else:
        hint = "it is -(1/B) sum_i sum_t A_it log pi(a_it|s_it), over real tokens"
    raise Mismatch("loss", f"is {got:.6g}, the reference {want:.6g}: {hint}")


def check_parts(student_loop, base, task, tokenizer) -> None:
    """Rewards, advantages and loss on one batch of a policy that differs from its reference."""
    config = PGConfig(steps=1, prompts_per_step=4, group_size=4, lr=3e-4, estimator="group_mean", beta=0.3, seed=11)
    reference = frozen_reference(base)
    policy = copy.deepcopy(base)
    g = torch.Generator().manual_seed(config.seed)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(NOISE * torch.randn(p.shape, generator=g))
    start = copy.deepcopy(policy).eval()
    (parts,) = run_student(student_loop, policy, reference, task, config, tokenizer)
    rollout = parts["rollout"]
    mask, shape = rollout.mask.double(), rollout.tokens.shape
    task_rewards = task.token_rewards(rollout, tokenizer).double()
    rewards, advantages, loss, chosen = plain_parts(start, reference, rollout, task_rewards, config.beta,
                                                    config.group_size)
    check_rewards(numbers("rewards", parts["rewards"], shape), rewards, task_rewards, mask, config.beta)
    got = parts["advantages"]
    if isinstance(got, torch.Tensor) and got.requires_grad:
        raise Mismatch("advantages", "carry a gradient: the loss would differentiate the KL term inside them. "
                                     "Compute log pi - log pi_ref from logprobs.detach() (or under torch.no_grad())")
    check_advantages(numbers("advantages", got, shape), advantages, rewards, mask, config.group_size)
    if not isinstance(parts["loss"], torch.Tensor) or parts["loss"].numel() != 1:
        raise Mismatch("loss", f"is a {type(parts['loss']).__name__}: return the scalar loss tensor")
    check_loss(float(parts["loss"].detach()), loss, advantages, chosen, mask)


def moved(model, start) -> list[torch.Tensor]:
    return [(p.detach() - q.detach()).flatten() for p, q in zip(model.parameters(), start.parameters())]


STEPS = PGConfig(steps=2, prompts_per_step=4, group_size=4, lr=3e-4, estimator="group_mean", beta=0.3, seed=7)


def check_sampling(student_loop, base, task, tokenizer):
    """Two steps of the student's loop; their first batch against minirl's. Returns the policy after them."""
    policy = copy.deepcopy(base)
    parts = run_student(student_loop, policy, frozen_reference(base), task, STEPS, tokenizer)
    first = next(training_batches(copy.deepcopy(base), task, STEPS, torch.Generator().manual_seed(STEPS.seed),
                                  tokenizer, desc=""))[1]
    got = parts[0]["rollout"]
    if not hasattr(got, "tokens") or not torch.equal(got.tokens, first.tokens):
        raise Mismatch("sampling", "the first batch differs from minirl's with the same seed: draw it with "
                                   "training_batches(policy, task, config, generator, tokenizer, desc), the "
                                   "generator seeded with config.seed")
    return policy


def check_steps(student_loop, after_two, base, task, tokenizer) -> None:
    """The parameters after one step and after two against minirl's trainer from the same seed."""
    for steps in (1, 2):
        config = dataclasses.replace(STEPS, steps=steps)
        student = after_two
        if steps == 1:
            student = copy.deepcopy(base)
            run_student(student_loop, student, frozen_reference(base), task, config, tokenizer)
        minirls = copy.deepcopy(base)
        train_policy_gradient(minirls, task, config, tokenizer)
        want, diff = torch.cat(moved(minirls, base)), torch.cat(moved(student, minirls))
        if torch.cat(moved(student, base)).abs().max() == 0:
            raise Mismatch("the optimiser step", "the parameters did not move: zero the gradients before "
                                                 "loss.backward(), not between it and optimizer.step()")
        off = (diff.norm() / want.norm()).item()
        if not off <= STEP_TOLERANCE:
            hint = ("step 1 agreed, so the gradients of step 1 were still there at step 2: zero them before "
                    "each backward" if steps == 2 else
                    "the rewards, advantages and loss agree, so look at the gradient and the update: nothing "
                    "but the loss differentiated (a detached advantage), clip_grad_norm_ to config.max_grad_norm, "
                    "AdamW(lr=config.lr, weight_decay=0.0)")
            raise Mismatch("the optimiser step", f"after {steps} step{'s' * (steps > 1)} the parameters are "
                                                 f"{off:.2g} times minirl's move away from minirl's: {hint}")


def check_training(student_loop, base, task, tokenizer) -> None:
    config = PGConfig(steps=12, prompts_per_step=8, group_size=4, lr=1e-3, estimator="group_mean", beta=0.1, seed=0)
    parts = run_student(student_loop, copy.deepcopy(base), frozen_reference(base), task, config, tokenizer)
    proxy = [task.token_rewards(p["rollout"], tokenizer).sum(1).mean().item() for p in parts]
    rise = sum(proxy[-3:]) / 3 - sum(proxy[:3]) / 3
    if not rise > TARGET_RISE:
        raise Mismatch("training", f"12 steps raised the batch's proxy reward by {rise:+.2f}, not the "
                                   f"{TARGET_RISE} minirl's loop exceeds on every seed tried")


def reinforce_loop(student_loop, base=None, task=None, tokenizer=None) -> None:
    """Check a student's REINFORCE loop (group-mean baseline, KL-shaped rewards) against minirl's;
    print PASS, or FAIL naming the first part that differs. `base`, `task` and `tokenizer` default
    to the base model, lesson 03's reviews task and the course tokenizer."""
    from .. import load_model, load_tokenizer
    from ..world import tasks

    name = "reinforce_loop"
    base = base if base is not None else load_model("base")
    task = task if task is not None else tasks.reviews_task("negative")
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer()
    try:
        after_two = check_sampling(student_loop, base, task, tokenizer)
        check_parts(student_loop, base, task, tokenizer)
        check_steps(student_loop, after_two, base, task, tokenizer)
        check_training(student_loop, base, task, tokenizer)
    except NotImplementedError:
        emit(name, "not done", NOT_DONE.format(name=name))
        return
    except Mismatch as m:
        emit(name, "fail", f"FAIL {name}: {m.part}: {m}")
        return
    except Exception as e:  # a student's bug must not stop the notebook
        emit(name, "fail", f"FAIL {name}: the loop raised {type(e).__name__}: {e}")
        return
    emit(name, "pass", f"PASS {name}: the first batch, its rewards, advantages and loss equal the reference's; "
                       f"the parameters within {STEP_TOLERANCE} times minirl's move after 1 and 2 steps; 12 steps "
                       f"raised the proxy reward by more than {TARGET_RISE}")
