"""Exercise checkers: `minirl.check.<name>(student_fn)`.

Each checker runs the student's function on a fixed set of cases, edge cases included, compares
with a reference written independently of the student's path (exact arithmetic where possible),
and prints one clear line: PASS with the tolerance every case met (not the difference itself,
whose last digits change from one CPU to another), or FAIL with how many cases failed, then the
first SHOWN of them (the FAIL line says when it shows fewer). It never raises, so a notebook with
an unfinished exercise still runs to the end. It returns None on purpose: a returned value would
be displayed after the PASS/FAIL line.

Every failing case goes through one diagnosis step, `diagnose`: the checker's own traps (each a
known wrong answer, with what it is and what to change), then two every checker shares, a flipped
sign and a NaN or inf where the answer is a number. The first trap whose answer the student's
matches on the case is named above it, in plain words. Handed minirl's own function (the lessons
name it next to each exercise), a checker runs nothing and prints FAIL saying so: the exercise
is the student's own code, and the package's function would pass it without teaching anything;
so does a function of the student's that calls minirl's function of the exercise's name.

The verdict line goes out through `verdicts.emit`, which also signs a record of it when `course
grade` asks (minirl.course.verdicts says how, and what that cannot stop).
"""
from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import itertools
import math
import sys
from fractions import Fraction
from typing import Callable, NamedTuple

import torch

from ..world import steps as _steps
from .predictions import prediction
from .training_loop import reinforce_loop
from .verdicts import NOT_DONE, emit

__all__ = [
    "TOLERANCE", "SHOWN", "NOT_DONE", "PACKAGE_FUNCTION", "PACKAGE_WRAPPER", "Trap", "SIGN_FLIP", "NOT_FINITE", "as_numbers",
    "max_difference", "diagnose", "run_cases", "PASS_AT_K_CASES", "DISCOUNTED_RETURN_CASES",
    "pass_at_k", "masked_mean", "discounted_return", "trajectory_log_prob", "exact_objective", "score_function",
    "surrogate_loss", "reward_to_go", "reinforce_loss", "gae", "bias_and_variance", "clipped_objective",
    "group_advantages", "kl_k3", "bradley_terry_loss", "elo_update", "accuracy_ceiling", "sft_loss", "select_best",
    "best_of_n_kl_bound", "kl_regularized_optimum", "dpo_loss", "sequence_logprob", "soft_value_iteration", "gail_discriminator_loss",
    "importance_weights", "positions_from_mask", "zero_model_states", "truncated_is_weights", "sequence_ratio",
    "first_order_entropy_change", "normalize_then_sum", "action_mask", "turn_returns", "prediction", "reinforce_loop",
    "rlhf_rewards", "clipped_value_loss", "monte_carlo_label", "completion_score",
]

TOLERANCE = 1e-6
SHOWN = 3  # failing cases printed; the FAIL line says how many there were in all
PACKAGE_FUNCTION = ("FAIL {name}: this is the package's own {package}, not yours\n"
                    "  The exercise asks for your code: pass the function you wrote in the cell.")
PACKAGE_WRAPPER = ("FAIL {name}: your function calls the package's own {package}, which is the answer\n"
                   "  The exercise asks for your code: write it without calling {package}.")


def _leaves(x):
    """What nested lists and tuples hold, depth first (x itself if it is neither)."""
    if isinstance(x, (list, tuple)):
        for item in x:
            yield from _leaves(item)
    else:
        yield x


def _detached(x):
    """x with every tensor in it detached, lists and tuples kept nested (as lists)."""
    if isinstance(x, (list, tuple)):
        return [_detached(item) for item in x]
    return x.detach() if isinstance(x, torch.Tensor) else x


def as_numbers(x) -> torch.Tensor:
    """What a student function returned, as a float64 tensor: a number, a tensor, or lists and tuples
    of numbers and 0-d tensors nested as torch.as_tensor reads them (rows of floats: a (B, T)
    answer); anything else is a TypeError saying what it was and what to return."""
    if x is None:
        raise TypeError("returned None: did you forget to `return` the result?")
    nested = isinstance(x, (list, tuple))
    if nested and any(isinstance(t, torch.Tensor) and t.dim() > 0 for t in _leaves(x)):
        raise TypeError(f"returned a {type(x).__name__} of tensors: return one tensor (torch.stack the rows)")
    try:
        return torch.as_tensor(_detached(x), dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        if nested:
            raise TypeError(f"returned a {type(x).__name__} that is not one block of numbers (rows of different "
                            "lengths, or something not a number): return one tensor") from None
        raise TypeError(f"returned a {type(x).__name__}, not a number or a tensor of numbers") from None


def max_difference(got, want) -> float:
    """Largest difference, absolute where |want| <= 1 and relative above (a float32 answer to a
    value near 1e6 is off by about 0.1); NaN in the same places counts as equal, elsewhere as inf."""
    got, want = as_numbers(got), as_numbers(want)
    if got.shape != want.shape:
        raise ValueError(f"shape {tuple(got.shape)} but expected {tuple(want.shape)}")
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return math.inf
    both = ~torch.isnan(want)
    if not both.any():
        return 0.0
    return float(((got[both] - want[both]).abs() / want[both].abs().clamp(min=1.0)).max())


# ---------------------------------------------------------------- naming the trap
class Trap(NamedTuple):
    """A known mistake: `mistake` says what it is, `fix` what to change (a short line each), and
    `spots(got, want, args)` whether the student's answer `got` on a case (its arguments `args`,
    `want` the reference's answer, both float64 tensors) is this mistake's answer."""
    mistake: str
    fix: str
    spots: Callable[[torch.Tensor, torch.Tensor, tuple], bool]


def _same(got: torch.Tensor, wrong) -> bool:
    """got equals `wrong` within TOLERANCE (False where the shapes differ)."""
    try:
        return max_difference(got, wrong) <= TOLERANCE
    except (TypeError, ValueError):
        return False


def _gives(*wrong_fns) -> Callable:
    """A trap's test: the answer is what one of wrong_fns (the reference with the mistake made)
    returns on the case's arguments."""
    return lambda got, want, args: any(_same(got, wrong(*copy.deepcopy(args))) for wrong in wrong_fns)


def _not_finite(got: torch.Tensor, want: torch.Tensor, args) -> bool:
    return bool((~torch.isfinite(got) & torch.isfinite(want)).any())


def _forgot_mask(reference_fn, index: int) -> Trap:
    """The trap of code that ignores the mask, argument `index`: its answer is the reference's with
    the mask all ones, or, where the answer has the mask's shape, that times the mask (the padding
    zeroed at the end but summed in on the way)."""
    def unmasked(*args):
        return reference_fn(*args[:index], torch.ones_like(args[index]), *args[index + 1:])

    def zeroed_at_the_end(*args):
        out, mask = as_numbers(unmasked(*args)), as_numbers(args[index])
        return out * mask if out.shape == mask.shape else out
    return Trap("The mask is ignored: positions where it is 0 (prompt or padding) count as real ones.",
                "Leave them out, e.g. torch.where(mask.bool(), x, 0), and count only the mask's ones.",
                _gives(unmasked, zeroed_at_the_end))


SIGN_FLIP = Trap("A sign is flipped: every value is minus the reference's.",
                 "Check each minus sign (a loss is minus the objective it maximises).",
                 lambda got, want, args: _same(got, -want))
NOT_FINITE = Trap("NaN or inf where the answer is a number.",
                  "Look for a division by 0, a log of 0, an exp that overflows, or inf times a mask's 0 (NaN).",
                  _not_finite)


def diagnose(got, want, args: tuple, traps: tuple[Trap, ...] = ()) -> Trap | None:
    """The first trap the student's answer `got` falls into on a case (arguments `args`, `want` the
    reference's answer): the checker's own `traps` first, then SIGN_FLIP and NOT_FINITE; None if none."""
    got, want = as_numbers(got), as_numbers(want)
    return next((trap for trap in (*traps, SIGN_FLIP, NOT_FINITE) if trap.spots(got, want, args)), None)


def _how_far(got, want, tolerance: float) -> str:
    """A failing case's miss in numbers: where NaN or inf should not be, else the largest difference."""
    got, want = as_numbers(got), as_numbers(want)
    stray = int((~torch.isfinite(got) & torch.isfinite(want)).sum())
    if stray:
        return f"NaN or inf at {stray} of {want.numel()} values"
    numbers = int((~torch.isnan(got) & torch.isnan(want)).sum())
    if numbers:
        return f"a number at {numbers} of {want.numel()} values where the answer is NaN"
    return f"largest difference {max_difference(got, want):.1e} (tolerance {tolerance:.0e})"


_HOMEWORK_NAMES = {f"minirl.core.{m}": f"minirl.{m}" for m in ("ops", "kl", "advantages", "losses")}  # as students import them


def _package_function(fn) -> str | None:
    """'minirl.<module>.<name>' where fn, under the checkers' own wrappers (functools.wraps) and any
    functools.partial, is one of minirl's functions; None for anything else (a student's function)."""
    fn = inspect.unwrap(fn)
    while isinstance(fn, functools.partial):
        fn = inspect.unwrap(fn.func)
    module = getattr(fn, "__module__", None) or ""
    if module != "minirl" and not module.startswith("minirl."):
        return None
    module = _HOMEWORK_NAMES.get(module, module)
    return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', type(fn).__name__))}"


@contextlib.contextmanager
def _calls_to_package(name: str):
    """Yield a list that fills with 'minirl.<module>.<name>' if, inside the block, a function of
    minirl (outside the course's own checkers) named `name` is called: a student's function that
    hands the exercise to minirl's own. sys.setprofile sees every Python call, aliases included."""
    called: list[str] = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code.co_name == name:
            module = frame.f_globals.get("__name__", "")
            if module.startswith("minirl.") and not module.startswith("minirl.course."):
                called.append(f"{_HOMEWORK_NAMES.get(module, module)}.{name}")
    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        yield called
    finally:
        sys.setprofile(previous)


def _returning(student_fn, convert):
    """student_fn with `convert` applied to what it returns; functools.wraps keeps student_fn
    reachable (inspect.unwrap), so run_cases still sees whose function it is."""
    @functools.wraps(student_fn)
    def run(*args):
        return convert(student_fn(*args))
    return run


def _report(name: str, failures: list[tuple[str, str, Trap | None]], n_cases: int) -> None:
    """The FAIL line, then the first SHOWN failing cases, grouped under the trap each falls into."""
    shown = failures[:SHOWN]
    showing = f", showing {len(shown)}" if len(shown) < len(failures) else ""
    emit(name, "fail", f"FAIL {name}: {len(failures)} of {n_cases} cases wrong{showing}")
    by_trap: dict[Trap | None, list[str]] = {}  # in order of first appearance
    for label, how_far, trap in shown:
        by_trap.setdefault(trap, []).append(f"{label}: {how_far}")
    for trap, lines in by_trap.items():
        if trap is None:
            print("\n".join(f"  - {line}" for line in lines))
        else:
            print(f"  - {trap.mistake}\n    {trap.fix}")
            print("\n".join(f"    case {line}" for line in lines))


def run_cases(name: str, student_fn, reference_fn, cases: list[tuple[str, tuple]], tolerance: float = TOLERANCE,
              traps: tuple[Trap, ...] = ()) -> None:
    """Compare student_fn(*args) with reference_fn(*args) on each (label, args); print PASS/FAIL,
    each failing case with the trap it falls into (`diagnose`, the checker's `traps` first).

    Each function gets its own deep copy of the arguments, so a student function that changes its
    inputs in place can neither corrupt the reference's inputs nor pass by zeroing them. minirl's
    own function prints PACKAGE_FUNCTION's FAIL and runs no case; a function that calls minirl's
    function of the exercise's name (a wrapper, a lambda) prints PACKAGE_WRAPPER's.
    """
    package = _package_function(student_fn)
    if package:
        emit(name, "package", PACKAGE_FUNCTION.format(name=name, package=package))
        return
    failures = []  # (label, how far off, the trap it falls into or None)
    for label, args in cases:
        try:
            with _calls_to_package(name) as called:
                got = student_fn(*copy.deepcopy(args))
        except NotImplementedError:
            emit(name, "not done", NOT_DONE.format(name=name))
            return
        except Exception as e:  # a student's bug must not stop the notebook
            failures.append((label, f"raised {type(e).__name__}: {e}", None))
            continue
        if called:
            emit(name, "package", PACKAGE_WRAPPER.format(name=name, package=called[0]))
            return
        try:
            want = reference_fn(*copy.deepcopy(args))
            diff = max_difference(got, want)
        except (ValueError, TypeError) as e:
            failures.append((label, str(e), None))
            continue
        if not diff <= tolerance:
            failures.append((label, _how_far(got, want, tolerance), diagnose(got, want, args, traps)))
    if failures:
        _report(name, failures, len(cases))
        return
    within = "equal to the reference" if tolerance == 0 else f"within {tolerance:.0e} of the reference"
    emit(name, "pass", f"PASS {name}: {len(cases)} cases, each {within}")


# ---------------------------------------------------------------- lesson 00
def _exact_pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k) in exact rational arithmetic."""
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


PASS_AT_K_CASES = [
    ("n=16, c=4, k=1", (16, 4, 1)),
    ("n=16, c=4, k=8", (16, 4, 8)),
    ("no correct sample (c=0)", (16, 0, 8)),
    ("all correct (c=n)", (16, 16, 1)),
    ("fewer wrong than k (n-c < k)", (16, 10, 8)),
    ("k = n", (16, 1, 16)),
    ("large n", (200, 3, 100)),
    ("n=1", (1, 1, 1)),
]


def pass_at_k(student_fn) -> None:
    """Check pass_at_k(n, c, k): the unbiased estimate of pass@k from n samples with c correct."""
    plug_in = Trap("The plug-in 1 - (1 - c/n)^k: it underestimates pass@k.",
                   "Use 1 - C(n-c, k) / C(n, k) (math.comb): the chance that k of the n include a correct one.",
                   _gives(lambda n, c, k: 1 - (1 - c / n) ** k))
    run_cases("pass_at_k", student_fn, _exact_pass_at_k, PASS_AT_K_CASES, traps=(plug_in,))


def _loop_masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None):
    """A plain float64 loop: the reference for masked_mean."""
    x, mask = x.double(), mask.double()
    if dim is None:
        total = sum(float(a) * float(m) for a, m in zip(x.flatten(), mask.flatten()))
        count = float(mask.sum())
        return torch.tensor(total / count if count else math.nan, dtype=torch.float64)
    out = []
    for row_x, row_m in zip(x, mask):  # dim=1 on a 2-D tensor
        count = float(row_m.sum())
        out.append(sum(float(a) * float(m) for a, m in zip(row_x, row_m)) / count if count else math.nan)
    return torch.tensor(out, dtype=torch.float64)


def _masked_mean_cases() -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]).float()
    big = x * 1e6
    return [
        ("all ones, dim=None", (x, torch.ones_like(x))),
        ("padded rows, dim=None", (x, mask)),
        ("padded rows, dim=1 (an all-padding row gives NaN)", (x, mask, 1)),
        ("large values, dim=1", (big, mask, 1)),
    ]


def _mean_over_all_positions(x, mask, dim=None):
    """sum(x * mask) divided by the number of positions, padding included: masked_mean's trap."""
    x, mask = x.double(), mask.double()
    return (x * mask).mean() if dim is None else (x * mask).mean(dim)


def masked_mean(student_fn) -> None:
    """Check masked_mean(x, mask, dim=None) = sum(x*mask)/sum(mask), NaN for an all-masked slice."""
    traps = (_forgot_mask(_loop_masked_mean, 1),
             Trap("The padding is zeroed but still counted: you divided by the number of positions.",
                  "Divide by mask.sum() (along dim), the number of real positions.", _gives(_mean_over_all_positions)),
             Trap("A number where the answer is NaN: a slice with no real position has no mean.",
                  "Leave 0 / 0 = NaN there; do not replace it.",
                  lambda got, want, args: bool((~torch.isnan(got) & torch.isnan(want)).any())))
    run_cases("masked_mean", student_fn, _loop_masked_mean, _masked_mean_cases(), traps=traps)


# ---------------------------------------------------------------- lesson 01
def _loop_discounted_return(rewards: list[float], gamma: float) -> float:
    total, discount = 0.0, 1.0
    for r in rewards:
        total += discount * r
        discount *= gamma
    return total


DISCOUNTED_RETURN_CASES = [
    ("one reward", ([1.0], 0.9)),
    ("undiscounted", ([0.3, -0.2, 1.0], 1.0)),
    ("discounted", ([0.3, -0.2, 1.0], 0.5)),
    ("gamma = 0 keeps only the first reward", ([2.0, 5.0, 7.0], 0.0)),
    ("a long sparse episode", ([0.0] * 30 + [1.0], 0.95)),
]


def discounted_return(student_fn) -> None:
    """Check discounted_return(rewards, gamma) = sum_t gamma^t r_t."""
    off_by_one = Trap("Off by one: the first reward is discounted too (gamma^(t+1) instead of gamma^t).",
                      "Start the discount at gamma^0 = 1 for r_0.",
                      _gives(lambda rewards, gamma: gamma * _loop_discounted_return(rewards, gamma)))
    run_cases("discounted_return", student_fn, _loop_discounted_return, DISCOUNTED_RETURN_CASES, traps=(off_by_one,))


def _micro_cases(with_completion: bool) -> list[tuple[str, tuple]]:
    from ..exact.mdp import MicroMDP

    mdp, discounted = MicroMDP(), MicroMDP(gamma=0.8)
    g = torch.Generator().manual_seed(0)
    random = torch.randn(mdp.shape, generator=g, dtype=torch.float64)
    peaked = 6 * torch.randn(mdp.shape, generator=g, dtype=torch.float64)
    uniform = torch.zeros(mdp.shape, dtype=torch.float64)
    if not with_completion:
        return [("uniform policy", (mdp, uniform)), ("random policy", (mdp, random)),
                ("peaked policy", (mdp, peaked)), ("discounted, gamma 0.8", (discounted, random))]
    eos = mdp.actions[-1]
    return [("EOS at once", (mdp, random, "x", (eos,))), ("ends by EOS", (mdp, random, "y", ("a", "c", eos))),
            ("truncated at K", (mdp, random, "x", ("b", "b", "a"))), ("peaked policy", (mdp, peaked, "y", ("c", eos)))]


def trajectory_log_prob(student_fn) -> None:
    """Check trajectory_log_prob(mdp, logits, prompt, completion) = sum_t log pi(a_t | s_t)."""
    run_cases("trajectory_log_prob", student_fn, lambda mdp, logits, p, c: mdp.log_prob(logits, p, c).detach(),
              _micro_cases(with_completion=True))


def exact_objective(student_fn) -> None:
    """Check exact_objective(mdp, logits) = J = mean over prompts of sum_tau pi(tau) R(tau)."""
    run_cases("exact_objective", student_fn, lambda mdp, logits: mdp.objective(logits).detach(),
              _micro_cases(with_completion=False))


# ---------------------------------------------------------------- lesson 02
def _autograd_score(mdp, logits, prompt, completion):
    theta = logits.detach().clone().requires_grad_(True)
    mdp.log_prob(theta, prompt, completion).backward()
    return theta.grad


_AUTOGRAD = ("used autograd (.backward() or torch.autograd.grad): write the gradient by hand, "
             "onehot(a_t) - pi(.|s_t) on each visited state's row")


def _by_hand(student_fn):
    """student_fn run with autograd off (torch.no_grad). If it fails so but runs with autograd on, it
    took its gradient from autograd, which the exercise rules out: a ValueError (_AUTOGRAD) says so."""
    @functools.wraps(student_fn)
    def run(*args):
        spare = copy.deepcopy(args)
        try:
            with torch.no_grad():
                return student_fn(*args)
        except NotImplementedError:
            raise
        except RuntimeError as without:
            try:
                student_fn(*spare)
            except Exception:
                raise without from None
            raise ValueError(_AUTOGRAD) from None
    return run


def score_function(student_fn) -> None:
    """Check score_function(mdp, logits, prompt, completion) = grad_theta log pi(tau), by hand: the
    student's function runs under torch.no_grad, and one that needs autograd fails with _AUTOGRAD
    (the reference is autograd's gradient, so calling it would copy the checker)."""
    run_cases("score_function", _by_hand(student_fn), _autograd_score,
              _micro_cases(with_completion=True))


def _surrogate_cases() -> list[tuple[str, tuple]]:
    from ..exact.mdp import MicroMDP

    mdp = MicroMDP()
    logits = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    small = mdp.sample(logits, 8, torch.Generator().manual_seed(2))
    large = mdp.sample(logits, 200, torch.Generator().manual_seed(3))
    return [("8 episodes", (mdp, logits, small)), ("200 episodes", (mdp, logits, large)),
            ("one episode", (mdp, logits, small[:1]))]


def _surrogate_gradient(loss_fn):
    """grad_theta of loss_fn(trajectory log-probs, returns) on the given episodes, negated (an ascent direction)."""
    @functools.wraps(loss_fn)
    def grad(mdp, logits, episodes):
        theta = logits.detach().clone().requires_grad_(True)
        logps = torch.stack([mdp.log_prob(theta, p, c) for p, c in episodes])
        returns = torch.tensor([mdp.discounted_return(p, c) for p, c in episodes], dtype=logits.dtype)
        loss_fn(logps, returns).backward()
        return -theta.grad
    return grad


def surrogate_loss(student_fn) -> None:
    """Check surrogate_loss(logps, returns): its gradient must be the REINFORCE estimate
    (1/N) sum_i R_i grad log pi(tau_i) (negated: it is a loss to minimise)."""
    def estimator(mdp, logits, episodes):
        return torch.stack([mdp.discounted_return(p, c) * mdp.score(logits, p, c) for p, c in episodes]).mean(0)
    run_cases("surrogate_loss", _surrogate_gradient(student_fn), estimator, _surrogate_cases())


# ---------------------------------------------------------------- lesson 03
def _loop_reward_to_go(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    for i in range(rewards.size(0)):
        running = 0.0
        for t in reversed(range(rewards.size(1))):
            if mask[i, t]:
                running = float(rewards[i, t]) + gamma * running
                out[i, t] = running
    return out


def _loop_running_sum(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """sum_{t'<=t} gamma^(t-t') r_t', from the row's start (a cumulative sum): reward-to-go's trap,
    which is reward-to-go on the reversed rows."""
    return _loop_reward_to_go(rewards.flip(1), mask.flip(1), gamma).flip(1)


def _loop_total_return(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """The whole row's return G_0 on each of its tokens, 0 on padding."""
    return _loop_reward_to_go(rewards, mask, gamma)[:, :1] * mask


def _loop_discounted_from_start(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """gamma^t G_t = sum_{t'>=t} gamma^t' r_t': the discounted policy gradient's weight folded into
    reward-to-go, discounting from the row's start instead of from t."""
    return _loop_reward_to_go(rewards, mask, gamma) * gamma ** torch.arange(rewards.size(1), dtype=torch.float64)


def _loop_reward_to_go_from_next(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_{t+1} stored at t: reward-to-go off by one."""
    g = _loop_reward_to_go(rewards, mask, gamma)
    return torch.cat([g[:, 1:], torch.zeros_like(g[:, :1])], dim=1) * mask


_RUNNING_SUM = Trap("A running sum from the row's start (a cumsum): reward-to-go sums from t to the row's end.",
                    "Sum backwards: loop t from the end (or flip, cumsum, flip back).",
                    _gives(_loop_running_sum,
                           lambda rewards, mask, gamma: _loop_running_sum(rewards, torch.ones_like(mask), gamma)))


def _rtg_inputs():
    """Rewards (3, 5); an all-ones mask; a mask of a full, an EOS-ended and a one-token row; the
    rewards with junk (100) on that mask's padding."""
    r = torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    full = torch.ones(3, 5, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    poisoned = r.clone()
    poisoned[ragged == 0] = 100.0  # rewards on padding must be ignored
    return r, full, ragged, poisoned


def reward_to_go(student_fn) -> None:
    """Check reward_to_go(rewards, mask, gamma): G_t = sum_{t'>=t} gamma^(t'-t) r_t' within each row, 0 on padding."""
    r, full, ragged, poisoned = _rtg_inputs()
    cases = [("no padding, gamma 1", (r, full, 1.0)), ("truncated and EOS rows, gamma 1", (r, ragged, 1.0)),
             ("discounted, gamma 0.9", (r, ragged, 0.9)), ("junk on the padding", (poisoned, ragged, 1.0))]
    off_by_one = Trap("Off by one: position t holds G_(t+1), the sum after r_t.",
                      "Add r_t to the running sum before storing it at t.", _gives(_loop_reward_to_go_from_next))
    gamma_t = Trap("An extra gamma^t on G_t: that weight belongs to the discounted policy gradient, not to G_t.",
                   "Discount from t, as if t were the start: G_t = r_t + gamma * G_(t+1).",
                   _gives(_loop_discounted_from_start))
    run_cases("reward_to_go", student_fn, _loop_reward_to_go, cases,
              traps=(_RUNNING_SUM, _forgot_mask(_loop_reward_to_go, 1), off_by_one, gamma_t))


def _reinforce_loss_with(returns_fn):
    """-(1/B) sum_i sum_t w_it log pi_it over the mask's tokens, w = returns_fn(rewards, mask, 1)."""
    def loss(logprobs, rewards, mask):
        return -(returns_fn(rewards, mask, 1.0) * logprobs * mask).sum(dim=1).mean()
    return loss


def _token_mean_losses() -> tuple[Callable, ...]:
    """The reward-to-go surrogate averaged over tokens, reinforce_loss's trap: over the batch's real
    tokens, over every position (torch.mean), or within each row and then over the rows."""
    def weighted(logprobs, rewards, mask):
        return _loop_reward_to_go(rewards, mask, 1.0) * logprobs * mask
    return (lambda lp, r, m: -weighted(lp, r, m).sum() / m.sum(),
            lambda lp, r, m: -weighted(lp, r, m).mean(),
            lambda lp, r, m: -(weighted(lp, r, m).sum(dim=1) / m.sum(dim=1)).mean())


def _value_and_grad(loss_fn):
    """loss_fn(logprobs, rewards, mask)'s value, then its gradient in logprobs, as one vector (1 + B*T,)."""
    @functools.wraps(loss_fn)
    def run(logprobs, rewards, mask):
        lp = logprobs.detach().clone().requires_grad_(True)
        loss = loss_fn(lp, rewards, mask)
        loss.backward()
        return torch.cat([loss.detach().reshape(1), lp.grad.flatten()])
    return run


def reinforce_loss(student_fn) -> None:
    """Check reinforce_loss(logprobs, rewards, mask): value and gradient of the reward-to-go
    surrogate -(1/B) sum_i sum_t G_it log pi(a_it | s_it)."""
    r, full, ragged, poisoned = _rtg_inputs()
    at_the_end = torch.zeros_like(r)
    at_the_end[torch.arange(3), ragged.sum(1).long() - 1] = r[:, 0]  # one reward, on each row's last real token
    lp = -torch.rand(3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    cases = [("no padding (each token weighted by its reward-to-go)", (lp, r, full)),
             ("EOS and padding (only the mask's tokens count)", (lp, r, ragged)),
             ("one reward, on each row's last token (an outcome reward)", (lp, at_the_end, ragged)),
             ("junk rewards on the padding", (lp, poisoned, ragged))]
    reference = _value_and_grad(_reinforce_loss_with(_loop_reward_to_go))
    whole_return = Trap("Every token weighted by the whole episode's return: token t's weight is the reward-to-go G_t.",
                        "Sum the rewards from t to the row's end, not over the whole row.",
                        _gives(_value_and_grad(_reinforce_loss_with(_loop_total_return))))
    running_sum = _RUNNING_SUM._replace(spots=_gives(_value_and_grad(_reinforce_loss_with(_loop_running_sum))))
    token_mean = Trap("A mean over tokens: the loss sums each sequence's tokens, then averages over the B sequences.",
                      "Sum over t within each row (.sum(dim=1)), then take .mean() over the rows.",
                      _gives(*map(_value_and_grad, _token_mean_losses())))
    run_cases("reinforce_loss", _value_and_grad(student_fn), reference, cases,
              traps=(_forgot_mask(reference, 2), whole_return, running_sum, token_mean))


# ---------------------------------------------------------------- lesson 04
def _loop_gae(rewards, values, mask, gamma, lam):
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    for i in range(rewards.size(0)):
        n = int(mask[i].sum())
        r, v = [float(x) for x in rewards[i, :n]], [float(x) for x in values[i, :n]]
        deltas = [r[t] + gamma * (v[t + 1] if t + 1 < n else 0.0) - v[t] for t in range(n)]
        for t in range(n):
            out[i, t] = sum((gamma * lam) ** (j - t) * deltas[j] for j in range(t, n))
    return out


def _gae_cases() -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(0)
    r = torch.randn(3, 5, generator=g, dtype=torch.float64)
    v = torch.randn(3, 5, generator=g, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    junk_v = v.clone()
    junk_v[ragged == 0] = 50.0  # values on padding must never be bootstrapped from
    return [("lambda 1 (Monte Carlo advantage)", (r, v, ragged, 1.0, 1.0)), ("lambda 0 (one-step TD error)", (r, v, ragged, 1.0, 0.0)),
            ("gamma 0.9, lambda 0.95", (r, v, ragged, 0.9, 0.95)), ("junk values on the padding", (r, junk_v, ragged, 1.0, 0.5))]


def _loop_gae_values_shifted(rewards, values, mask, gamma, lam):
    """GAE with each value read one token late (V(s_(t+1)) as V(s_t)): lesson 04's bug to hunt."""
    masked = values * mask
    return _loop_gae(rewards, torch.cat([masked[:, 1:], torch.zeros_like(masked[:, :1])], dim=1), mask, gamma, lam)


def _advantages(out):
    """gae's answer: the first of a pair of tensors (advantages, returns), as minirl's gae returns
    it, else out itself (a tensor, or rows of numbers in a list)."""
    pair = isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(x, torch.Tensor) for x in out)
    return out[0] if pair else out


def gae(student_fn) -> None:
    """Check gae(rewards, values, mask, gamma, lam) -> advantages (B, T), 0 on padding, no bootstrap past a row's end."""
    shifted = Trap("Off by one: each value is read one token late (V(s_(t+1)) used as V(s_t)).",
                   "values[:, t] is V before token t: delta_t = r_t + gamma * values[:, t+1] - values[:, t].",
                   _gives(_loop_gae_values_shifted))
    run_cases("gae", _returning(student_fn, _advantages), _loop_gae, _gae_cases(), traps=(_forgot_mask(_loop_gae, 2), shifted))


def _loop_bias_variance(terms, probs, exact):
    mean = sum(float(p) * t.double() for p, t in zip(probs, terms))
    bias = float((mean - exact).norm())
    variance = sum(float(p) * float((t.double() - mean).pow(2).sum()) for p, t in zip(probs, terms))
    return torch.tensor([bias, variance])


def bias_and_variance(student_fn) -> None:
    """Check bias_and_variance(terms, probs, exact) -> (|E g - exact|, E |g - E g|^2) for an estimator
    taking the value terms[i] with probability probs[i]."""
    g = torch.Generator().manual_seed(0)
    terms = torch.randn(6, 4, 3, generator=g, dtype=torch.float64)
    probs = torch.softmax(torch.randn(6, generator=g, dtype=torch.float64), 0)
    exact = (probs[:, None, None] * terms).sum(0)
    cases = [("unbiased estimator", (terms, probs, exact)), ("biased estimator", (terms + 0.3, probs, exact)),
             ("a sure thing (one outcome)", (terms[:1], torch.ones(1, dtype=torch.float64), terms[0]))]
    def pair(out):
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"returned {type(out).__name__}: return the pair (bias, variance)")
        return torch.tensor([float(x) for x in out])
    run_cases("bias_and_variance", _returning(student_fn, pair), _loop_bias_variance, cases)


# ---------------------------------------------------------------- lesson 05
def _loop_clipped_objective(ratio, advantages, eps):
    out = torch.zeros(ratio.shape, dtype=torch.float64)
    for idx in itertools.product(*(range(n) for n in ratio.shape)):
        r, a = float(ratio[idx]), float(advantages[idx])
        clipped = min(max(r, 1 - eps), 1 + eps)
        out[idx] = min(r * a, clipped * a)
    return out


def clipped_objective(student_fn) -> None:
    """Check clipped_objective(ratio, advantages, eps) -> min(ratio A, clip(ratio, 1-eps, 1+eps) A), per token."""
    g = torch.Generator().manual_seed(0)
    ratio = torch.exp(0.5 * torch.randn(4, 6, generator=g, dtype=torch.float64))  # on both sides of the clip
    adv = torch.randn(4, 6, generator=g, dtype=torch.float64)
    edges = torch.tensor([[0.8, 1.2, 1.0, 0.5, 3.0, 0.0]], dtype=torch.float64)  # the clip's edges, far outside
    cases = [("random ratios and advantages", (ratio, adv, 0.2)),
             ("positive advantages only", (ratio, adv.abs(), 0.2)),
             ("negative advantages only", (ratio, -adv.abs(), 0.2)),
             ("ratios on the edges, A = +1", (edges, torch.ones_like(edges), 0.2)),
             ("ratios on the edges, A = -1", (edges, -torch.ones_like(edges), 0.2)),
             ("zero advantages", (ratio, torch.zeros_like(ratio), 0.2)),
             ("eps = 0.1", (ratio, adv, 0.1))]
    run_cases("clipped_objective", student_fn, _loop_clipped_objective, cases)


# ---------------------------------------------------------------- lesson 06
def _loop_group_advantages(rewards, group_size, eps, ddof=1):
    """ddof 1: the sample std (dividing by N - 1), the exercise's; 0: the population std (N), its trap."""
    out = []
    values = [float(r) for r in rewards]
    for start in range(0, len(values), group_size):
        group = values[start : start + group_size]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - ddof))
        out += [(r - mean) / (std + eps) for r in group]
    return torch.tensor(out, dtype=torch.float64)


def _no_eps_group_advantages(rewards, group_size, eps):
    """(r - group mean) / sample std, eps left out: NaN for a group of equal rewards."""
    g = rewards.double().view(-1, group_size)
    return ((g - g.mean(dim=1, keepdim=True)) / g.std(dim=1, keepdim=True)).reshape(-1)


def group_advantages(student_fn) -> None:
    """Check group_advantages(rewards, group_size, eps) -> (r - group mean) / (sample std + eps), groups consecutive."""
    g = torch.Generator().manual_seed(0)
    cases = [("one group of 8", (torch.randn(8, generator=g, dtype=torch.float64), 8, 1e-4)),
             ("three groups of 4", (torch.randn(12, generator=g, dtype=torch.float64), 4, 1e-4)),
             ("0/1 rewards, one group all correct", (torch.tensor([1.0, 0, 1, 0, 1, 1, 1, 1], dtype=torch.float64), 4, 1e-4)),
             ("a group of all-equal rewards (zero, not NaN)", (torch.full((4,), 3.0, dtype=torch.float64), 4, 1e-4)),
             ("groups of 2", (torch.tensor([0.0, 1.0, 5.0, -5.0], dtype=torch.float64), 2, 1e-4)),
             ("large rewards", (1e3 * torch.randn(8, generator=g, dtype=torch.float64), 4, 1e-4))]
    # The population std is the sample std times sqrt((G-1)/G), so advantages divided by it come out
    # sqrt(G/(G-1)) times the right ones (1.07 for G = 8, 1.15 for 4, 1.41 for 2), eps aside.
    traps = (Trap("NaN or inf where the advantage is 0: a group of equal rewards has std 0.",
                  "Add eps to the std before dividing: 0 / eps = 0.", _not_finite),
             Trap("The population std (divides by G), not the sample std (G - 1): advantages sqrt(G/(G-1)) too large.",
                  "Use .std() (unbiased, torch's default), not .std(unbiased=False) or correction=0.",
                  _gives(lambda rewards, group_size, eps: _loop_group_advantages(rewards, group_size, eps, ddof=0))),
             Trap("eps is missing: you divided by the std alone.", "Divide by (std + eps).", _gives(_no_eps_group_advantages)),
             Trap("Normalized over the whole batch: each group's own mean and std are its baseline and scale.",
                  "Reshape to (-1, group_size) and take the mean and std along dim=1.",
                  _gives(lambda rewards, group_size, eps: _loop_group_advantages(rewards, len(rewards), eps))))
    run_cases("group_advantages", student_fn, _loop_group_advantages, cases, traps=traps)


def _loop_k3(logp, ref_logp):
    out = torch.zeros(logp.shape, dtype=torch.float64)
    for idx in itertools.product(*(range(n) for n in logp.shape)):
        q_over_p = math.exp(float(ref_logp[idx]) - float(logp[idx]))
        out[idx] = q_over_p - 1 - math.log(q_over_p)
    return out


def _k3_mixed_up(logp, ref_logp):
    """k3 with log-probs and probabilities mixed up, kl_k3's trap, three ways: the log-probs divided
    as if they were p and q, the log-ratio used as the ratio (exp forgotten), and q - p where log(q/p) goes."""
    logp, ref_logp = logp.double(), ref_logp.double()
    as_probs, no_exp = ref_logp / logp, ref_logp - logp
    return (as_probs - 1 - torch.log(as_probs), no_exp - 1 - torch.log(no_exp),
            torch.exp(ref_logp - logp) - 1 - (ref_logp.exp() - logp.exp()))


def kl_k3(student_fn) -> None:
    """Check kl_k3(logp, ref_logp) -> q/p - 1 - log(q/p) per token, p = pi_theta, q = pi_ref."""
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    ref = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    cases = [("random log-probs", (logp, ref)), ("the same policy (0)", (logp, logp.clone())),
             ("reference far less likely", (logp, logp - 5.0)), ("reference far more likely", (logp - 5.0, logp)),
             ("one token", (logp[:1, :1], ref[:1, :1]))]
    upside_down = Trap("The ratio upside down: p/q, where k3 uses q/p = exp(ref_logp - logp).",
                       "k3 = q/p - 1 - log(q/p), p = pi_theta, q = pi_ref.", _gives(lambda logp, ref: _loop_k3(ref, logp)))
    k1 = Trap("k1, the log-ratio log p - log q (or log q - log p): k3 adds q/p - 1, which makes every value >= 0.",
              "With r = ref_logp - logp: k3 = torch.exp(r) - 1 - r.",
              _gives(lambda logp, ref: logp.double() - ref.double(), lambda logp, ref: ref.double() - logp.double()))
    mixed_up = Trap("Log-probs and probabilities mixed up: q/p is exp(ref_logp - logp), and log(q/p) is ref_logp - logp.",
                    "With r = ref_logp - logp: k3 = torch.exp(r) - 1 - r (no division, no torch.log).",
                    lambda got, want, args: any(_same(got, wrong) for wrong in _k3_mixed_up(*args)))
    run_cases("kl_k3", student_fn, _loop_k3, cases, traps=(upside_down, k1, mixed_up))


# ---------------------------------------------------------------- lesson 08
def _loop_bt_loss(chosen, rejected, labels):
    total = 0.0
    for c, r, y in zip(chosen.tolist(), rejected.tolist(), labels.tolist()):
        d = c - r
        log_p = -math.log1p(math.exp(-d)) if d > -30 else d  # log sigmoid(d)
        log_q = -math.log1p(math.exp(d)) if d < 30 else -d  # log sigmoid(-d)
        total -= y * log_p + (1 - y) * log_q
    return total / len(chosen)


def bradley_terry_loss(student_fn) -> None:
    """Check bradley_terry_loss(chosen, rejected, labels) -> mean of -[y log sigmoid(r_c - r_r) + (1 - y) log sigmoid(r_r - r_c)]."""
    g = torch.Generator().manual_seed(0)
    c, r = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    ones = torch.ones(8, dtype=torch.float64)
    cases = [("hard labels (y = 1)", (c, r, ones)),
             ("ties (y = 1/2)", (c, r, ones / 2)),
             ("a mix of wins, ties and losses", (c, r, torch.tensor([1, 0.5, 0, 1, 1, 0.5, 0, 1], dtype=torch.float64))),
             ("equal rewards: log 2", (c, c.clone(), ones)),
             ("large reward gaps (no overflow)", (50 * c, -50 * c, ones / 2)),
             ("one pair", (c[:1], r[:1], ones[:1]))]
    run_cases("bradley_terry_loss", student_fn, _loop_bt_loss, cases)


def _loop_elo_update(rating_a, rating_b, score_a, k):
    expected = 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / 400.0))
    return torch.tensor([rating_a + k * (score_a - expected), rating_b - k * (score_a - expected)], dtype=torch.float64)


def elo_update(student_fn) -> None:
    """Check elo_update(rating_a, rating_b, score_a, k) -> (new_a, new_b) on the 400-point scale."""
    cases = [("equal players, a wins", (1500.0, 1500.0, 1.0, 32.0)),
             ("favourite wins", (1800.0, 1400.0, 1.0, 32.0)),
             ("upset", (1400.0, 1800.0, 1.0, 32.0)),
             ("a draw", (1600.0, 1500.0, 0.5, 16.0)),
             ("a loses", (1500.0, 1500.0, 0.0, 24.0))]
    run_cases("elo_update", _returning(student_fn, lambda out: torch.as_tensor(out, dtype=torch.float64)),
              _loop_elo_update, cases)


def _loop_ceiling(utilities, probs):
    num = norm = 0.0
    for i, (ui, pi) in enumerate(zip(utilities.tolist(), probs.tolist())):
        for j, (uj, pj) in enumerate(zip(utilities.tolist(), probs.tolist())):
            if i != j:
                num += pi * pj / (1 + math.exp(-abs(ui - uj)))
                norm += pi * pj
    return num / norm


def accuracy_ceiling(student_fn) -> None:
    """Check accuracy_ceiling(utilities, probs) -> E[sigmoid(|u_i - u_j|)] over pairs of two different
    items drawn independently with probabilities probs."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(6, generator=g, dtype=torch.float64)
    p = torch.rand(6, generator=g, dtype=torch.float64)
    p /= p.sum()
    cases = [("six items", (u, p)), ("uniform probabilities", (u, torch.full((6,), 1 / 6, dtype=torch.float64))),
             ("two items", (u[:2], torch.tensor([0.3, 0.7], dtype=torch.float64))),
             ("equal utilities: 1/2", (torch.zeros(4, dtype=torch.float64), torch.full((4,), 0.25, dtype=torch.float64))),
             ("one item far better", (torch.tensor([5.0, 0.0, 0.0], dtype=torch.float64), torch.tensor([0.1, 0.45, 0.45], dtype=torch.float64)))]
    run_cases("accuracy_ceiling", student_fn, _loop_ceiling, cases)


# ---------------------------------------------------------------- lesson 09
def _loop_sft_loss(logits, tokens, mask):
    total = count = 0.0
    for b in range(tokens.size(0)):
        for t in range(tokens.size(1)):
            if mask[b, t]:
                row = [float(x) for x in logits[b, t]]
                top = max(row)
                log_z = top + math.log(sum(math.exp(x - top) for x in row))
                total -= row[int(tokens[b, t])] - log_z
                count += 1
    return total / count


def _loop_sft_loss_per_row(logits, tokens, mask):
    """Each row's mean negative log-likelihood, then their mean: sft_loss's trap."""
    rows = range(tokens.size(0))
    return sum(_loop_sft_loss(logits[b:b + 1], tokens[b:b + 1], mask[b:b + 1]) for b in rows) / len(rows)


def sft_loss(student_fn) -> None:
    """Check sft_loss(logits, tokens, mask) -> mean negative log-likelihood of the tokens where mask
    is 1 (the response), over all of them; the prompt and the padding (mask 0) are never targets."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, 7, (3, 5), generator=g)
    response = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0], [0, 0, 0, 1, 1]], dtype=torch.float64)
    loud_prompt = logits.clone()
    loud_prompt[:, :2] *= 40  # confident, wrong predictions where the prompt is: counting them moves the loss a lot
    cases = [("prompt masked out", (logits, tokens, response)),
             ("a confident prompt that must not count", (loud_prompt, tokens, response)),
             ("an all-padding tail", (logits, tokens, torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]],
                                                                   dtype=torch.float64))),
             ("every token a target", (logits, tokens, torch.ones(3, 5, dtype=torch.float64))),
             ("one response token", (logits[:1], tokens[:1], torch.tensor([[0, 0, 0, 0, 1]], dtype=torch.float64)))]
    per_row = Trap("A mean per row, then over rows: a row with few response tokens weighs as much as a long one.",
                   "Average over all response tokens at once: the masked sum divided by mask.sum().",
                   _gives(_loop_sft_loss_per_row))
    run_cases("sft_loss", student_fn, _loop_sft_loss, cases, traps=(_forgot_mask(_loop_sft_loss, 2), per_row))


def _loop_select_best(scores, n):
    picks = []
    for start in range(0, len(scores), n):
        group = [float(s) for s in scores[start:start + n]]
        picks.append(start + group.index(max(group)))
    return torch.tensor(picks, dtype=torch.float64)


def select_best(student_fn) -> None:
    """Check select_best(scores, n) -> the index into scores of each group's best, groups being
    consecutive blocks of n; a tie goes to the first of the tied draws."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(12, generator=g, dtype=torch.float64)
    cases = [("three groups of four", (s, 4)), ("two groups of six", (s, 6)),
             ("n = 1: every draw is its own best", (s, 1)),
             ("ties go to the first", (torch.tensor([1.0, 3.0, 3.0, 0.0, 2.0, 2.0], dtype=torch.float64), 3)),
             ("all scores negative", (-s.abs(), 3)),
             ("all equal", (torch.zeros(8, dtype=torch.float64), 4))]
    within_group = Trap("The index within each group, not the index into scores.",
                        "Add each group's start (group number times n) to its argmax.",
                        _gives(lambda s, n: _loop_select_best(s, n) - torch.arange(0, len(s), n)))
    run_cases("select_best", _returning(student_fn, as_numbers), _loop_select_best, cases, tolerance=0.0,
              traps=(within_group,))


def best_of_n_kl_bound(student_fn) -> None:
    """Check best_of_n_kl_bound(n) -> log N - (N - 1)/N, the KL of best-of-N with continuous rewards."""
    cases = [(f"N = {n}", (n,)) for n in (1, 2, 4, 16, 100, 10_000)]
    log_n = Trap("log N alone: the often quoted bound, above the KL of best-of-N.", "Subtract (N - 1)/N.",
                 _gives(lambda n: math.log(n)))
    run_cases("best_of_n_kl_bound", student_fn, lambda n: math.log(n) - (n - 1) / n, cases, traps=(log_n,))


# ---------------------------------------------------------------- lesson 10
def _loop_optimum(ref, reward, beta):
    """pi_ref(y) e^{r(y)/beta} / Z by a plain loop, each weight scaled by e^{-max r / beta} (Z cancels
    it), over the support where pi_ref > 0."""
    pairs = list(zip(ref.tolist(), reward.tolist()))
    top = max(r for p, r in pairs if p > 0)
    w = [p * math.exp((r - top) / beta) if p > 0 else 0.0 for p, r in pairs]
    return torch.tensor([x / sum(w) for x in w], dtype=torch.float64)


def kl_regularized_optimum(student_fn) -> None:
    """Check kl_regularized_optimum(ref_probs, reward, beta) -> pi_ref e^{r/beta} / Z, shape (n,)."""
    f64 = dict(dtype=torch.float64)
    ref4, r4 = torch.tensor([0.4, 0.3, 0.2, 0.1], **f64), torch.tensor([0.0, 1.0, -0.5, 2.0], **f64)
    cases = [("a uniform reference, beta = 1", (torch.full((3,), 1 / 3, **f64), torch.tensor([1.0, 0.0, -1.0], **f64), 1.0)),
             ("beta = 0.1", (ref4, r4, 0.1)),
             ("beta = 10, close to the reference", (ref4, r4, 10.0)),
             ("beta = 0.001, r / beta up to 2,000", (ref4, r4, 1e-3)),
             ("a completion the reference never writes", (torch.tensor([0.5, 0.0, 0.5], **f64), torch.tensor([0.0, 5.0, 1.0], **f64), 0.5)),
             ("float32 inputs", (ref4.float(), r4.float(), 0.2))]
    traps = (Trap("e^(r beta): beta multiplies the reward, where it divides it.", "Use reward / beta.",
                  _gives(lambda ref, r, b: _loop_optimum(ref, r, 1 / b))),
             Trap("pi_ref is missing: softmax(r / beta) is the optimum against a uniform reference only.",
                  "Weigh each completion by its reference probability: log pi_ref + r / beta.",
                  _gives(lambda ref, r, b: _loop_optimum(torch.ones_like(ref), r, b))),
             Trap("Z is missing: the weights do not add up to 1.", "Divide by their sum (or use softmax).",
                  _gives(lambda ref, r, b: ref.double() * torch.exp(r.double() / b))),
             Trap("e^(r / beta) overflows at a small beta (e^2000 is inf even in float64), and inf / inf is NaN.",
                  "Work in log space: torch.softmax(torch.log(ref_probs) + reward / beta, dim=0).",
                  lambda got, want, args: args[2] < 0.01 and not bool(torch.isfinite(got).all())))
    run_cases("kl_regularized_optimum", student_fn, _loop_optimum, cases, traps=traps)


# ---------------------------------------------------------------- lesson 11
def _loop_dpo(pc, pr, rc, rr, beta):
    """loss, then the chosen and the rejected implicit rewards, as one vector (1 + 2B,)."""
    total, chosen, rejected = 0.0, [], []
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist()):
        h = beta * ((a - c) - (b - d))
        total += math.log1p(math.exp(-h)) if h > -30 else -h  # -log sigmoid(h)
        chosen.append(beta * (a - c))
        rejected.append(beta * (b - d))
    return torch.tensor([total / len(chosen)] + chosen + rejected, dtype=torch.float64)


def _flat_dpo(out):
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError("return three things: (loss, chosen_rewards, rejected_rewards)")
    loss, chosen, rejected = (as_numbers(x) for x in out)
    return torch.cat([loss.reshape(1), chosen.reshape(-1), rejected.reshape(-1)])


def dpo_loss(student_fn) -> None:
    """Check dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) -> (loss,
    chosen_rewards, rejected_rewards): the mean over pairs of -log sigmoid(beta * h), h the
    log-ratio margin, and the implicit rewards beta * (log pi - log pi_ref) of each side."""
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (-4 * torch.rand(6, generator=g, dtype=torch.float64) for _ in range(4))
    cases = [("six pairs, beta = 0.1", (pc, pr, rc, rr, 0.1)),
             ("beta = 2", (pc, pr, rc, rr, 2.0)),
             ("the policy is the reference: log 2, rewards 0", (pc, pr, pc.clone(), pr.clone(), 0.5)),
             ("a margin of -1000 (log sigmoid, not log of sigmoid)", (pc - 1000, pr, rc, rr, 1.0)),
             ("one pair", (pc[:1], pr[:1], rc[:1], rr[:1], 0.3))]
    log_of_sigmoid = Trap("NaN or inf: log(sigmoid(h)) is log 0 for a margin far below 0.",
                          "Use F.logsigmoid(h) (or -F.softplus(-h)).", _not_finite)
    run_cases("dpo_loss", _returning(student_fn, _flat_dpo), _loop_dpo, cases, traps=(log_of_sigmoid,))


def _loop_sequence_logprob(logprobs, mask):
    return torch.tensor([sum(float(x) for x, m in zip(row, mrow) if m) for row, mrow in zip(logprobs, mask)],
                        dtype=torch.float64)


def sequence_logprob(student_fn) -> None:
    """Check sequence_logprob(logprobs, mask) -> (B,) the sum of each row's log-probs where mask is 1."""
    g = torch.Generator().manual_seed(0)
    x = -3 * torch.rand(3, 5, generator=g, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float64)
    junk = x.clone()
    junk[ragged == 0] = -math.inf  # a padded position can hold -inf (log 0): it must not reach the sum
    cases = [("ragged rows", (x, ragged)),
             ("-inf on the padding", (junk, ragged)),
             ("no padding", (x, torch.ones(3, 5, dtype=torch.float64))),
             ("an all-padding tail after one token", (x[2:], ragged[2:]))]
    times_mask = Trap("NaN where the sum is a number: -inf times the mask's 0 is NaN.",
                      "Select with torch.where(mask.bool(), logprobs, 0) instead of multiplying by the mask.", _not_finite)
    run_cases("sequence_logprob", student_fn, _loop_sequence_logprob, cases,
              traps=(_forgot_mask(_loop_sequence_logprob, 1), times_mask))


def _log_sum_exp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _enumerated_soft_q(mdp, rewards, pool=_log_sum_exp):
    """Q(s, a) = r(s, a) + log of the sum, over every way to finish the episode after a, of
    exp(the rewards still to come): each completion through (s, a) listed and summed, no recursion.
    pool=max gives the hard Q of plain value iteration instead, the trap."""
    r = rewards.tolist()
    q = torch.zeros(tuple(rewards.shape), dtype=torch.float64)
    for s, (prompt, prefix) in enumerate(mdp.states):
        t0 = len(prefix)
        for a, action in enumerate(mdp.actions):
            through = [c for c in mdp.completions if len(c) > t0 and c[:t0] == prefix and c[t0] == action]
            to_go = [sum(r[mdp.state_index[(prompt, c[:t])]][mdp.actions.index(c[t])] for t in range(t0, len(c)))
                     for c in through]
            q[s, a] = pool(to_go)
    return q


def soft_value_iteration(student_fn) -> None:
    """Check soft_value_iteration(mdp, rewards) -> Q (n_states, n_actions): Q(s, a) = r(s, a) + V(s'),
    V(s) = log sum_a exp Q(s, a), 0 after the episode ends."""
    from ..exact.imitation import reward_table
    from ..exact.mdp import MicroMDP
    g = torch.Generator().manual_seed(0)
    world, long = MicroMDP(), MicroMDP(horizon=4)
    cases = [("the world's rewards, horizon 3", (world, reward_table(world))),
             ("random rewards, horizon 4", (long, torch.randn(long.shape, generator=g, dtype=torch.float64))),
             ("rewards of +-300 (log-sum-exp, not the log of a sum of exp)",
              (world, 300 * torch.randn(world.shape, generator=g, dtype=torch.float64))),
             ("horizon 1: one action ends the episode", (MicroMDP(horizon=1), torch.randn(MicroMDP(horizon=1).shape,
                                                                                          generator=g, dtype=torch.float64)))]
    hard_max = Trap("A hard max: V(s) = max_a Q(s, a) is plain value iteration.",
                    "Soft: V(s) = log sum_a exp Q(s, a) (torch.logsumexp).",
                    _gives(lambda mdp, rewards: _enumerated_soft_q(mdp, rewards, pool=max)))
    run_cases("soft_value_iteration", student_fn, _enumerated_soft_q, cases, traps=(hard_max,))


def _loop_gail_loss(expert_logits, policy_logits):
    def neg_log_sigmoid(x):  # -log(1 / (1 + e^-x)), written to stay finite for large |x|
        return math.log1p(math.exp(-x)) if x > 0 else -x + math.log1p(math.exp(x))
    e = [neg_log_sigmoid(x) for x in expert_logits.tolist()]
    p = [neg_log_sigmoid(-x) for x in policy_logits.tolist()]
    return 0.5 * (sum(e) / len(e) + sum(p) / len(p))


def gail_discriminator_loss(student_fn) -> None:
    """Check gail_discriminator_loss(expert_logits, policy_logits) -> the scalar
    1/2 [mean of -log D on the expert's + mean of -log(1 - D) on the policy's], D = sigmoid(logit)."""
    g = torch.Generator().manual_seed(0)
    e, p = torch.randn(7, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    cases = [("7 expert against 3 policy samples (each class's own mean)", (e, p)),
             ("D = 1/2 everywhere: log 2", (torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64))),
             ("confident and right: logits +-1000", (e.abs() + 1000, -p.abs() - 1000)),
             ("confident and wrong: logits -+1000 (logsigmoid, not log of sigmoid)", (-e.abs() - 1000, p.abs() + 1000)),
             ("one sample each", (e[:1], p[:1]))]
    traps = (Trap("The classes swapped: D here is P(expert), so the expert's samples get -log D.",
                  "Put -log sigmoid(x) on the expert's logits and -log(1 - sigmoid(x)) on the policy's.",
                  _gives(lambda e, p: _loop_gail_loss(-e, -p))),
             Trap("NaN or inf: log(sigmoid(x)) is log 0 for a logit of -1000.",
                  "Use F.logsigmoid(x) for log D and F.logsigmoid(-x) for log(1 - D).", _not_finite))
    run_cases("gail_discriminator_loss", student_fn, _loop_gail_loss, cases, traps=traps)


def _loop_importance_weights(rewards, log_q):
    log_w = [r - lq for r, lq in zip(rewards.tolist(), log_q.tolist())]
    top = max(log_w)
    w = [math.exp(x - top) for x in log_w]
    return torch.tensor([x / sum(w) for x in w], dtype=torch.float64)


def importance_weights(student_fn) -> None:
    """Check importance_weights(rewards, log_q) -> (m,) self-normalized weights w_j proportional to
    exp(R(tau_j)) / q(tau_j), summing to 1."""
    g = torch.Generator().manual_seed(0)
    r, lq = torch.randn(6, generator=g, dtype=torch.float64), -3 * torch.rand(6, generator=g, dtype=torch.float64)
    cases = [("six samples", (r, lq)),
             ("samples from the uniform q: weights proportional to exp(R)", (r, torch.full((6,), -math.log(6), dtype=torch.float64))),
             ("rewards near 1000 (subtract the largest log-weight before exp)", (r + 1000, lq)),
             ("a sample q made far more often than exp(R) says: weight near 0", (r, torch.cat([lq[:5], torch.tensor([50.0], dtype=torch.float64)]))),
             ("one sample: weight 1", (r[:1], lq[:1]))]
    traps = (Trap("Multiplied by q instead of divided: the weight is exp(R) / q.", "Take the log-weights rewards - log_q.",
                  _gives(lambda r, lq: _loop_importance_weights(r, -lq))),
             Trap("NaN or inf: exp of a log-weight near 1000 overflows.",
                  "Subtract the largest log-weight before exp (or use torch.softmax).", _not_finite))
    run_cases("importance_weights", student_fn, _loop_importance_weights, cases, traps=traps)


def _loop_positions(mask):
    rows = []
    for row in mask.tolist():
        seen, out = 0, []
        for m in row:
            out.append(max(seen + m - 1, 0))
            seen += m
        rows.append(out)
    return torch.tensor(rows, dtype=torch.float64)


def positions_from_mask(student_fn) -> None:
    """Check positions_from_mask(mask) -> (B, L) position ids for left-padded rows: 0 at the first
    real token, counting up over real tokens; padding gets 0 (it is never attended to)."""
    cases = [("no padding", (torch.ones(2, 5, dtype=torch.long),)),
             ("left padding of 0, 2 and 4 tokens", (torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]),)),
             ("a row of padding only", (torch.tensor([[0, 0, 0], [0, 1, 1]]),)),
             ("one column", (torch.tensor([[1], [0]]),)),
             ("a boolean mask", (torch.tensor([[False, True, True, True]]),))]
    traps = (Trap("Off by one: the first real token has position 1.", "Subtract 1 from the cumsum of the mask.",
                  _gives(lambda mask: as_numbers(mask).cumsum(-1))),
             Trap("The padding is counted: positions run 0, 1, 2, ... over the whole row.",
                  "Count real tokens only: the cumsum of the mask, minus 1.",
                  _gives(lambda mask: torch.arange(mask.size(-1)).expand(mask.shape))),
             Trap("The padding gets -1.", "Clamp the positions to 0 or more (padding is never attended to).",
                  _gives(lambda mask: as_numbers(mask).cumsum(-1) - 1)))
    run_cases("positions_from_mask", student_fn, _loop_positions, cases, traps=traps)


def _zero_per_rank(n_params, ranks, stage):
    weights, grads, optimizer = 2 * n_params, 2 * n_params, 12 * n_params  # bytes: bf16, bf16, fp32 master + Adam
    if stage >= 1:
        optimizer /= ranks
    if stage >= 2:
        grads /= ranks
    if stage >= 3:
        weights /= ranks
    return (weights + grads + optimizer) / 1e9


def zero_model_states(student_fn) -> None:
    """Check zero_model_states(n_params, ranks, stage) -> GB of model states per rank under ZeRO
    (mixed-precision Adam: 2 + 2 + 12 bytes per parameter; stage 1 shards the 12, stage 2 also the
    gradients, stage 3 also the weights)."""
    cases = [(f"7.5B on 64 GPUs, stage {s} (the ZeRO paper's Figure 1)", (7.5e9, 64, s)) for s in range(4)]
    cases += [("one rank: nothing to shard", (7e9, 1, 3)), ("7B on 8 GPUs, stage 2", (7e9, 8, 2)),
              ("a 0.3M-parameter model on 2 ranks, stage 3", (3e5, 2, 3))]
    run_cases("zero_model_states", student_fn, _zero_per_rank, cases)


# ---------------------------------------------------------------- lesson 07
def _off_policy_cases() -> list[tuple[str, tuple]]:
    """(logp, behaviour_logp, mask) cases: log pi and log mu of sampled tokens, padding after EOS."""
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 2
    mu = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 2
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    nan_pad = logp.masked_fill(mask == 0, float("nan"))
    return [("random log-probs", (logp, mu, mask)), ("on-policy: mu = pi", (logp, logp.clone(), mask)),
            ("pi far above mu on some tokens", (logp, mu - 3.0, mask)), ("pi far below mu", (logp - 3.0, mu, mask)),
            ("NaN on the padding", (nan_pad, mu, mask)), ("one token", (logp[:1, :1], mu[:1, :1], mask[:1, :1]))]


def _loop_truncated_is(logp, behaviour_logp, mask, cap):
    return torch.tensor([[min(math.exp(float(a) - float(b)), cap) if m else 0.0 for a, b, m in zip(*rows)]
                         for rows in zip(logp, behaviour_logp, mask.tolist())], dtype=torch.float64)


def truncated_is_weights(student_fn) -> None:
    """Check truncated_is_weights(logp, behaviour_logp, mask, cap) -> (B, T) min(pi/mu, cap) per
    token, 0 on padding: the weight of a token mu sampled, in a loss for pi."""
    cases = [(f"{label}, cap {cap:g}", (*args, cap)) for label, args in _off_policy_cases() for cap in (2.0, 1.0)]
    cases.append(("no cap (inf): the plain ratio", (*_off_policy_cases()[0][1], math.inf)))
    traps = (Trap("Clipped on both sides: ratios below 1/cap were raised to 1/cap. The cap bounds the weight from above only.",
                  "Use ratio.clamp(max=cap); a token mu sampled more often than pi would keeps its small weight.",
                  _gives(lambda lp, mu, m, cap: _loop_truncated_is(lp, mu, m, cap).clamp(min=1 / cap) * as_numbers(m))),
             Trap("The ratio upside down: mu/pi, where the weight is pi/mu = exp(logp - behaviour_logp).",
                  "The sampled tokens come from mu; the loss is for pi: weight = pi/mu.",
                  _gives(lambda lp, mu, m, cap: _loop_truncated_is(mu, lp, m, cap))),
             Trap("Masked instead of truncated: weights above the cap became 0 (that is masked IS).",
                  "Truncate: min(ratio, cap) keeps the token at weight cap.",
                  _gives(lambda lp, mu, m, cap: torch.where(_loop_truncated_is(lp, mu, m, math.inf) > cap, 0.0,
                                                            _loop_truncated_is(lp, mu, m, math.inf)))),
             _forgot_mask(_loop_truncated_is, 2))
    run_cases("truncated_is_weights", student_fn, _loop_truncated_is, cases, traps=traps)


def _loop_sequence_ratio(logp, behaviour_logp, mask, mean=False):
    out = []
    for a_row, b_row, m_row in zip(logp, behaviour_logp, mask.tolist()):
        diffs = [float(a) - float(b) for a, b, m in zip(a_row, b_row, m_row) if m]
        out.append(math.exp(sum(diffs) / (len(diffs) if mean else 1)))
    return torch.tensor(out, dtype=torch.float64)


def sequence_ratio(student_fn) -> None:
    """Check sequence_ratio(logp, behaviour_logp, mask) -> (B,) pi(y|x) / mu(y|x) = exp(sum over the
    row's tokens of logp - behaviour_logp): the importance weight of a whole completion."""
    cases = _off_policy_cases()
    traps = (Trap("The geometric mean exp(mean log ratio): that is GSPO's length-normalized ratio, not pi(y)/mu(y).",
                  "Sum the per-token log-ratios over the row, then exp.",
                  _gives(lambda lp, mu, m: _loop_sequence_ratio(lp, mu, m, mean=True))),
             Trap("The ratio upside down: mu(y)/pi(y).", "Sum logp - behaviour_logp, not the reverse.",
                  _gives(lambda lp, mu, m: _loop_sequence_ratio(mu, lp, m))),
             _forgot_mask(_loop_sequence_ratio, 2))
    run_cases("sequence_ratio", student_fn, _loop_sequence_ratio, cases, traps=traps)


def _loop_entropy_change(logits, delta, centred=True, weighted=True):
    out = []
    for z_row, d_row in zip(logits.tolist(), delta.tolist()):
        top = max(z_row)
        log_z = top + math.log(sum(math.exp(z - top) for z in z_row))
        logp = [z - log_z for z in z_row]
        p = [math.exp(lp) if weighted else 1 / len(z_row) for lp in logp]
        mean_logp = sum(pi * lp for pi, lp in zip(p, logp)) if centred else 0.0
        mean_d = sum(pi * d for pi, d in zip(p, d_row)) if centred else 0.0
        out.append(-sum(pi * (lp - mean_logp) * (d - mean_d) for pi, lp, d in zip(p, logp, d_row)))
    return torch.tensor(out, dtype=torch.float64)


def first_order_entropy_change(student_fn) -> None:
    """Check first_order_entropy_change(logits, delta) -> (S,) -Cov_{a~pi(.|s)}(log pi(a|s), delta(s, a)):
    each row's entropy change when its logits move by delta, to first order."""
    g = torch.Generator().manual_seed(0)
    cases = [("random logits and step, 5 states x 4 actions",
              (torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64))),
             ("a peaked row and a flat row", (torch.tensor([[4.0, 0, 0], [0, 0, 0]], dtype=torch.float64),
                                             torch.tensor([[1.0, 0, 0], [1.0, 0, 0]], dtype=torch.float64))),
             ("a step along the logits themselves (sharpening: entropy falls)",
              (torch.tensor([[1.0, 0.5, -1.0]], dtype=torch.float64), torch.tensor([[1.0, 0.5, -1.0]], dtype=torch.float64))),
             ("a constant step (softmax ignores it: no change)",
              (torch.randn(3, 4, generator=g, dtype=torch.float64), torch.full((3, 4), 2.0, dtype=torch.float64)))]
    traps = (Trap("The sign: you returned +Cov(log pi, delta). Raising the logit of a likely action lowers the entropy.",
                  "dH = -Cov_pi(log pi, delta).", _gives(lambda z, d: -_loop_entropy_change(z, d))),
             Trap("Not a covariance: -E_pi[log pi * delta], with neither side centred (a constant step would change H).",
                  "Centre one side at least: -E_pi[(log pi - E_pi log pi)(delta - E_pi delta)].",
                  _gives(lambda z, d: _loop_entropy_change(z, d, centred=False))),
             Trap("Averaged over actions uniformly: the covariance is under pi(.|s), not over the vocabulary.",
                  "Weight each action by pi(a|s).", _gives(lambda z, d: _loop_entropy_change(z, d, weighted=False))))
    run_cases("first_order_entropy_change", student_fn, _loop_entropy_change, cases, traps=traps)


def _loop_normalize_then_sum(rewards, weights, ddof=1, first=False):
    rows = rewards.tolist()
    w = [float(x) for x in weights]
    if first:
        columns = [[sum(wk * r for wk, r in zip(w, row)) for row in rows]]
        w = [1.0]
    else:
        columns = [[row[k] for row in rows] for k in range(len(w))]
    out = [0.0] * len(rows)
    for wk, col in zip(w, columns):
        mean = sum(col) / len(col)
        std = math.sqrt(sum((c - mean) ** 2 for c in col) / (len(col) - ddof))
        for i, c in enumerate(col):
            out[i] += wk * (c - mean) / (std + 1e-4)
    return torch.tensor(out, dtype=torch.float64)


def normalize_then_sum(student_fn) -> None:
    """Check normalize_then_sum(rewards, weights) -> (G,): each of the K reward columns of one group
    (G, K) normalized in the group, (r - mean) / (sample std + 1e-4), then summed with the weights (K,)."""
    g = torch.Generator().manual_seed(0)
    cases = [("correct and formatted, 4 answers", (torch.tensor([[1.0, 0], [1, 1], [0, 1], [0, 1]], dtype=torch.float64),
                                                   torch.tensor([1.0, 1.0], dtype=torch.float64))),
             ("unequal weights", (torch.tensor([[1.0, 0], [1, 1], [0, 1], [0, 0]], dtype=torch.float64),
                                  torch.tensor([1.0, 0.3], dtype=torch.float64))),
             ("a column equal across the group (its part is 0)", (torch.tensor([[1.0, 1], [0, 1], [0, 1]], dtype=torch.float64),
                                                                   torch.tensor([1.0, 1.0], dtype=torch.float64))),
             ("three real-valued rewards, 8 answers", (torch.randn(8, 3, generator=g, dtype=torch.float64),
                                                       torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)))]
    traps = (Trap("Summed first, then normalized: that is the other recipe (sum then normalize).",
                  "Normalize each column in the group, then take the weighted sum.",
                  _gives(lambda r, w: _loop_normalize_then_sum(r, w, first=True))),
             Trap("The population std (divides by G), not the sample std (G - 1).",
                  "Use .std() (unbiased, torch's default).", _gives(lambda r, w: _loop_normalize_then_sum(r, w, ddof=0))),
             Trap("NaN or inf: a column equal across the group has std 0.", "Add 1e-4 to the std before dividing.", _not_finite))
    run_cases("normalize_then_sum", student_fn, _loop_normalize_then_sum, cases, traps=traps)


# ---------------------------------------------------------------- lesson 15
def _loop_action_mask(tokens: list[int], call_end: int, reply_lengths: list[int], after_end: bool = True,
                      replies_count: bool = False) -> list[int]:
    """1 where the policy wrote the token, 0 where the environment did: after each call_end the
    policy writes (while answers remain), the next reply_lengths[k] tokens are the k-th answer."""
    out, pending, answered = [], 0, 0
    for tok in tokens:
        if pending:
            out.append(0)
            pending -= 1
            if replies_count and tok == call_end and answered < len(reply_lengths):  # the trap: an answer's token calls
                pending, answered = reply_lengths[answered], answered + 1
            continue
        out.append(1 if after_end else 0 if tok == call_end and answered < len(reply_lengths) else 1)
        if tok == call_end and answered < len(reply_lengths):
            pending, answered = reply_lengths[answered], answered + 1
    return out


def _action_mask_cases() -> list[tuple[str, tuple]]:
    # ids: 7 is the call end; 3 and 4 are ordinary tokens; 9 stands for EOS
    return [("no call", ([3, 4, 3, 9], 7, [])),
            ("one call, a two-token answer", ([3, 7, 4, 4, 3, 9], 7, [2])),
            ("two calls", ([7, 4, 3, 7, 4, 4, 4, 3, 9], 7, [1, 3])),
            ("the answer contains the call end", ([3, 7, 7, 4, 3, 7, 4, 9], 7, [2, 1])),
            ("a call end after the last answered call", ([7, 4, 3, 7, 3, 9], 7, [1])),
            ("cut off inside the answer", ([3, 7, 4], 7, [3]))]


def action_mask(student_fn) -> None:
    """Check action_mask(tokens, call_end, reply_lengths) -> a list of 0/1, one per token of one
    episode's completion: 1 where the policy wrote it (the call end too), 0 on the k-th answer's
    reply_lengths[k] tokens after the k-th call end; a call end inside an answer, or after the
    last answered call, is not a call."""
    def cut(fn):
        return lambda tokens, call_end, lengths: fn(tokens, call_end, lengths)[:len(tokens)]
    traps = (Trap("The call end itself is marked as the environment's: the policy wrote it, ending its turn.",
                  "Mark the call end 1; the environment's tokens start after it.",
                  _gives(cut(lambda t, c, n: _loop_action_mask(t, c, n, after_end=False)))),
             Trap("A call end inside the environment's answer started another call.",
                  "Only a token the policy wrote can end a call: count down the answer first.",
                  _gives(cut(lambda t, c, n: _loop_action_mask(t, c, n, replies_count=True)))),
             Trap("Every token is marked as the policy's.", "Mark the answers' tokens 0.",
                  lambda got, want, args: bool((got == 1).all())))
    run_cases("action_mask", student_fn, _loop_action_mask, _action_mask_cases(), tolerance=0, traps=traps)


def _loop_turn_returns(rewards: list[float], turns: list[int], gamma: float, per_token: bool = False) -> list[float]:
    """One row: the summed reward of each turn, then G_k = sum_{j>=k} gamma^(j-k) R_j (per turn);
    with per_token, the discount counts tokens instead (the trap)."""
    n = max(turns) + 1
    if per_token:
        g, out = 0.0, {}
        for r, t in reversed([(r, t) for r, t in zip(rewards, turns) if t >= 0]):
            g = r + gamma * g
            out[t] = g
        return [out[k] for k in range(n)]
    R = [sum(r for r, t in zip(rewards, turns) if t == k) for k in range(n)]
    return [sum(gamma ** (j - k) * R[j] for j in range(k, n)) for k in range(n)]


def turn_returns(student_fn) -> None:
    """Check turn_returns(rewards, turns, gamma) -> one return per turn of one episode: rewards and
    turns (0, 1, ...; -1 after EOS) per token; a turn's reward is the sum over its tokens, and
    G_k = sum_{j >= k} gamma^(j-k) R_j, discounted per turn."""
    cases = [("one turn, the outcome at the end", ([0.0, 0.0, 1.0], [0, 0, 0], 1.0)),
             ("a call's cost, then the outcome", ([0.0, -0.3, 0.0, 0.0, 1.0], [0, 0, 0, 1, 1], 1.0)),
             ("discounted per turn", ([0.0, -0.3, 0.0, 0.0, 1.0], [0, 0, 0, 1, 1], 0.5)),
             ("three turns and padding with junk", ([0.5, -0.1, 0.2, 0.0, 2.0, 9.0, 9.0], [0, 0, 1, 1, 2, -1, -1], 0.9))]
    traps = (Trap("Discounted per token: gamma counts tokens, but here it counts turns.",
                  "Sum each turn's rewards first, then discount from turn to turn.",
                  _gives(lambda r, t, gm: _loop_turn_returns(r, t, gm, per_token=True))),
             Trap("The padding (turn -1) is counted.", "Leave out the tokens whose turn is -1.",
                  _gives(lambda r, t, gm: _loop_turn_returns(r, [max(x, 0) for x in t], gm))))
    run_cases("turn_returns", student_fn, _loop_turn_returns, cases, traps=traps)


# ---------------------------------------------------------------- lesson 05: PPO's reward and its critic's loss
def _loop_rlhf_rewards(score, logprobs, ref_logprobs, mask, beta, sign=-1.0, on_padding=False, kl_at_end=False,
                       score_weight=1.0, score_at="last"):
    """One row at a time: sign * beta * (log pi - log pi_ref) on each real token (with `on_padding`,
    on every position; with `kl_at_end`, summed onto the row's last real token), and score_weight *
    score added at the row's last real token (score_at 'end': at the tensor's last position; 'every':
    on each real token). The defaults are the exercise's answer; the rest are its traps."""
    rows, width = logprobs.shape
    out = torch.zeros(rows, width, dtype=torch.float64)
    for i in range(rows):
        real = [t for t in range(width) if float(mask[i, t])]
        last = real[-1]
        penalties = [sign * beta * (float(logprobs[i, t]) - float(ref_logprobs[i, t])) for t in range(width)]
        for t in range(width):
            if on_padding or t in real:
                out[i, t] += penalties[t] if not kl_at_end else 0.0
        if kl_at_end:
            out[i, last] += sum(penalties[t] for t in real)
        s = score_weight * float(score[i])
        for t in {"last": [last], "end": [width - 1], "every": real}[score_at]:
            out[i, t] += s
    return out


def _rlhf_rewards_cases() -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    ref = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 3
    score = torch.randn(3, generator=g, dtype=torch.float64)
    full = torch.ones(3, 5, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    junk = logp.masked_fill(ragged == 0, -9.0)  # log-probs on the padding must be ignored
    return [("no padding, beta 0.1", (score, logp, ref, full, 0.1)),
            ("EOS and padding, junk log-probs on the padding, beta 0.1", (score, junk, ref, ragged, 0.1)),
            ("beta 0: the score alone, on each row's last token", (score, junk, ref, ragged, 0.0)),
            ("the policy is the reference: no penalty", (score, logp, logp.clone(), ragged, 0.3)),
            ("beta 1, a negative score", (-score.abs(), junk, ref, ragged, 1.0)),
            ("one token per row", (score, logp[:, :1], ref[:, :1], full[:, :1], 0.2))]


def rlhf_rewards(student_fn) -> None:
    """Check rlhf_rewards(score, logprobs, ref_logprobs, mask, beta) -> (B, T) per-token rewards of
    RLHF's PPO: -beta * (log pi - log pi_ref) on every real token, 0 on padding, and each row's
    score (B,) added at its last real token (the mask's last 1)."""
    loop = _loop_rlhf_rewards
    traps = (Trap("The penalty's sign: you added beta * (log pi - log pi_ref); drifting from the reference costs.",
                  "Each token's reward is -beta * (log pi - log pi_ref): minus the KL estimate.",
                  _gives(lambda s, lp, ref, m, b: loop(s, lp, ref, m, b, sign=1.0))),
             Trap("The penalty is on the padding too: positions after the completion are not actions.",
                  "Multiply the penalty by the mask (or torch.where(mask.bool(), ..., 0)).",
                  _gives(lambda s, lp, ref, m, b: loop(s, lp, ref, m, b, on_padding=True))),
             Trap("The whole KL penalty sits on the last token: every token carries its own -beta * KL_t.",
                  "Put -beta * (log pi - log pi_ref) on each real token; only the score goes on the last one.",
                  _gives(lambda s, lp, ref, m, b: loop(s, lp, ref, m, b, kl_at_end=True))),
             Trap("beta scales the score too: beta weighs only the KL, the task's score enters as it is.",
                  "Add the score itself at the last token: r_T = score - beta * KL_T.",
                  _gives(lambda s, lp, ref, m, b: loop(s, lp, ref, m, b, score_weight=b))),
             Trap("The score is on every token: it belongs once, on the row's last real token.",
                  "Add it at one position per row, the mask's last 1.",
                  _gives(lambda s, lp, ref, m, b: loop(s, lp, ref, m, b, score_at="every"))),
             Trap("The score is at the tensor's last position (T - 1): in a padded row that is padding.",
                  "Add it at each row's last real token, mask.sum(1) - 1 when padding comes after the completion.",
                  _gives(lambda s, lp, ref, m, b: loop(s, lp, ref, m, b, score_at="end"))),
             _forgot_mask(loop, 3))
    run_cases("rlhf_rewards", student_fn, loop, _rlhf_rewards_cases(), traps=traps)


def _loop_value_loss(values, returns, mask, old_values, clip_range, worse=max, add_old=True, count_all=False,
                     per_row=False):
    """0.5 * worse((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2), one mean over the mask's
    tokens (count_all: the sum divided by every position; per_row: each row's mean, then the mean of
    the rows). The defaults are the exercise's answer; the rest are its traps."""
    rows = []
    for v_row, r_row, m_row, o_row in zip(values.tolist(), returns.tolist(), mask.tolist(), old_values.tolist()):
        errors = []
        for v, r, m, o in zip(v_row, r_row, m_row, o_row):
            if m:
                clipped = (o if add_old else 0.0) + min(max(v - o, -clip_range), clip_range)
                errors.append(0.5 * worse((v - r) ** 2, (clipped - r) ** 2))
        rows.append(errors)
    if per_row:
        return sum(sum(e) / len(e) for e in rows) / len(rows)
    total = sum(sum(e) for e in rows)
    return total / (values.numel() if count_all else sum(len(e) for e in rows))


def _value_loss_cases() -> list[tuple[str, tuple]]:
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=g, dtype=torch.float64)
    new = old + 0.5 * torch.randn(3, 5, generator=g, dtype=torch.float64)  # inside and outside the clip
    ret = torch.randn(3, 5, generator=g, dtype=torch.float64)
    full = torch.ones(3, 5, dtype=torch.float64)
    ragged = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.float64)
    junk = [x.masked_fill(ragged == 0, j) for x, j in ((new, 50.0), (ret, -50.0), (old, 50.0))]  # not counted
    lesson = (torch.tensor([[0.5, 0.1, -0.5]], dtype=torch.float64), torch.tensor([[1.0, 1.0, -1.0]], dtype=torch.float64),
              torch.ones(1, 3, dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64), 0.2)
    return [("no padding, clip 0.2", (new, ret, full, old, 0.2)),
            ("EOS and padding, junk on the padding, clip 0.2", (junk[0], junk[1], ragged, junk[2], 0.2)),
            ("every value moved less than the clip (the plain loss)", (old + 0.05 * (new - old), ret, ragged, old, 0.2)),
            ("values moved far past their returns (the clip binds)", (ret + 3 * (ret - old), ret, ragged, old, 0.2)),
            ("clip 0: each value held at its old value", (new, ret, ragged, old, 0.0)),
            ("no clip (inf): the plain loss", (new, ret, ragged, old, math.inf)),
            ("the lesson's three tokens, clip 0.2", lesson)]


def clipped_value_loss(student_fn) -> None:
    """Check clipped_value_loss(values, returns, mask, old_values, clip_range) -> the scalar
    0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2), one mean over the mask's tokens
    (PPO's value clipping, minirl.losses.value_loss with old_values and clip_range)."""
    loop = _loop_value_loss
    traps = (Trap("The smaller of the two errors (min): PPO's value loss takes the larger (max), as its policy loss "
                  "takes the pessimistic side.", "Use torch.maximum of the two squared errors.",
                  _gives(lambda v, r, m, o, c: loop(v, r, m, o, c, worse=min))),
             Trap("The clip changes nothing: this is the plain 0.5 (V - R)^2 (clipping around the return R, not "
                  "the old value, gives it too).", "Clip the new value around its old value: "
                  "V_old + clip(V - V_old, -c, c), then take the larger squared error.",
                  _gives(lambda v, r, m, o, c: loop(v, r, m, o, math.inf))),
             Trap("The old value is not added back: clip(V - V_old, -c, c) is a change, not a value.",
                  "The clipped value is V_old + clip(V - V_old, -c, c).",
                  _gives(lambda v, r, m, o, c: loop(v, r, m, o, c, add_old=False))),
             Trap("The padding is counted in the mean: the real tokens' errors divided by every position (B x T).",
                  "Divide by mask.sum(), the number of real tokens.",
                  _gives(lambda v, r, m, o, c: loop(v, r, m, o, c, count_all=True))),
             Trap("Each row averaged first, then the rows: the loss is one mean over all the batch's real tokens.",
                  "Sum the masked errors over the whole batch and divide by mask.sum().",
                  _gives(lambda v, r, m, o, c: loop(v, r, m, o, c, per_row=True))),
             Trap("Twice the answer: the 1/2 is missing.", "Multiply the mean squared error by 0.5.",
                  _gives(lambda v, r, m, o, c: 2 * loop(v, r, m, o, c))),
             _forgot_mask(loop, 2))
    run_cases("clipped_value_loss", student_fn, loop, _value_loss_cases(), traps=traps)


# ---------------------------------------------------------------- process rewards
def _loop_monte_carlo_label(prompt: str, prefix: str, continuations: list[str]) -> float:
    """One continuation at a time: it counts when it starts a new step (a space) or ends at once, and
    the prefix followed by it is a well-formed completion with the right sum last."""
    reached = 0
    for text in continuations:
        new_step = text == "" or text.startswith(" ")
        if new_step and _steps.final_correct(prompt, prefix + text):
            reached += 1
    return reached / len(continuations)


def _monte_carlo_label_cases() -> list[tuple[str, tuple]]:
    three, four = "q: 12+34+5= a:", "q: 1+2+3+4= a:"
    return [
        ("a right first step, three of four rollouts right", (three, " 46", [" 51", " 51", " 52", " 51"])),
        ("the last step: a rollout that ends at once is the completion itself", (three, " 46 51", ["", "", " 7", ""])),
        ("a wrong step that a rollout's slip brings back to the right sum", (three, " 47", [" 51", " 52", " 52", " 52"])),
        ("rollouts that rewrite the step's number ('1 51' makes it 461)", (three, " 46", ["1 51", " 51", " 51", "2"])),
        ("no rollout right", (three, " 40", [" 45", " 45", " 46"])),
        ("four numbers, from the second step", (four, " 3 6", [" 10", " 11", " 10"])),
    ]


def monte_carlo_label(student_fn) -> None:
    """Check monte_carlo_label(prompt, prefix, continuations) -> the share of the continuations after
    which prefix + continuation ends on the right final answer (Math-Shepherd's soft label), a
    continuation that goes on writing the step's number not counting."""
    def rewrites_count(prompt, prefix, continuations):
        return sum(_steps.final_correct(prompt, prefix + c) for c in continuations) / len(continuations)

    def alone(prompt, prefix, continuations):
        return sum(_steps.final_correct(prompt, c) for c in continuations) / len(continuations)

    def hard(prompt, prefix, continuations):
        return float(_loop_monte_carlo_label(prompt, prefix, continuations) > 0)

    def over_new_steps(prompt, prefix, continuations):
        kept = [c for c in continuations if c == "" or c.startswith(" ")]
        return _loop_monte_carlo_label(prompt, prefix, kept) if kept else 0.0

    traps = (Trap("A rollout that goes on writing the step's number counted: it rewrote the step (after ' 46', '1 51' makes it 461).",
                  "Count a rollout only when its text starts with a space (a new step) or is empty (it ended).",
                  _gives(rewrites_count)),
             Trap("Each continuation checked alone: the answer is the prefix and the continuation together.",
                  "Call final_correct(prompt, prefix + continuation).", _gives(alone)),
             Trap("The hard label (1 if any rollout is right): the exercise asks for the share.",
                  "Divide the number right by the number of continuations.", _gives(hard)),
             Trap("Divided by the rollouts that start a new step only: a rollout that rewrites the step is a miss.",
                  "Divide by all the continuations.", _gives(over_new_steps)))
    run_cases("monte_carlo_label", student_fn, _loop_monte_carlo_label, _monte_carlo_label_cases(), traps=traps)


def _exact_completion_score(step_probs: list[float], how: str) -> float:
    if not step_probs:
        return 0.0
    if how == "min":
        return min(step_probs)
    if how == "product":
        return float(math.prod(Fraction(p) for p in step_probs))
    return step_probs[-1]


def completion_score(student_fn) -> None:
    """Check completion_score(step_probs, how) -> the weakest step ('min'), the product ('product') or
    the last step ('last') of a completion's step probabilities, and 0.0 for a completion with no step."""
    steps_ = [0.9, 0.5, 0.8]
    cases = [(f"{how} of three steps", (steps_, how)) for how in ("min", "product", "last")]
    cases += [("one step, product", ([0.7], "product")), ("the last step is the best one", ([0.2, 0.99], "last")),
              ("no step, product (the empty product is 1: an empty completion must score 0)", ([], "product")), ("no step, min", ([], "min")), ("no step, last", ([], "last"))]
    traps = (Trap("The mean of the steps, not their product.", "Multiply the probabilities (math.prod).",
                  _gives(lambda p, how: sum(p) / len(p) if p else 0.0)),
             Trap("The first step, not the last.", "Take step_probs[-1].",
                  _gives(lambda p, how: p[0] if p else 0.0)))
    run_cases("completion_score", student_fn, _exact_completion_score, cases, traps=traps)
