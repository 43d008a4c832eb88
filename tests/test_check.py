"""The exercise checkers: PASS on a right answer, FAIL (never an exception) on a wrong one."""
import copy
import functools
import inspect
import itertools
import math
import re
import types

import torch

from minirl import check, ops
from minirl.train import best_of_n
from minirl.world.evaluate import pass_at_k


def not_done(*args):
    raise NotImplementedError("exercise: write your solution here")


def own(fn):
    """minirl's fn as a student would write it: the same code, defined in the student's namespace.
    (minirl's own fn handed in, or a function that calls it, prints FAIL: see
    test_the_package_function_handed_in_is_not_a_pass.)"""
    return types.FunctionType(fn.__code__, {**fn.__globals__, "__name__": "__main__"}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def verdict(capsys, checker, fn) -> str:
    checker(fn)
    return capsys.readouterr().out


def test_pass_at_k_checker(capsys):
    assert verdict(capsys, check.pass_at_k, own(pass_at_k)).startswith("PASS pass_at_k: 8 cases")
    biased = verdict(capsys, check.pass_at_k, lambda n, c, k: 1 - (1 - c / n) ** k)
    assert biased.startswith("FAIL pass_at_k") and "largest difference" in biased
    assert "not implemented yet" in verdict(capsys, check.pass_at_k, not_done)


def test_a_pass_prints_the_tolerance_not_the_rounding_noise(capsys):
    """A right answer off by rounding alone prints the same PASS line on every CPU: the tolerance met,
    not the difference (1e-16 here, 2e-16 on another processor)."""
    lines = {verdict(capsys, check.pass_at_k, lambda n, c, k, eps=eps: own(pass_at_k)(n, c, k) + eps) for eps in (0.0, 1e-16, 3e-9)}
    assert lines == {"PASS pass_at_k: 8 cases, each within 1e-06 of the reference\n"}
    assert verdict(capsys, check.select_best, own(best_of_n.select_best)).endswith("each equal to the reference\n")


def test_masked_mean_checker(capsys):
    assert verdict(capsys, check.masked_mean, own(ops.masked_mean)).startswith("PASS masked_mean")
    unmasked = lambda x, m, dim=None: (x * m).mean() if dim is None else (x * m).mean(dim)  # noqa: E731
    hides_empty_rows = lambda x, m, dim=None: torch.nan_to_num(own(ops.masked_mean)(x, m, dim))  # noqa: E731
    assert verdict(capsys, check.masked_mean, unmasked).startswith("FAIL masked_mean")
    assert verdict(capsys, check.masked_mean, hides_empty_rows).startswith("FAIL masked_mean: 2 of 4")


def test_a_crashing_student_function_prints_fail(capsys):
    assert "raised ZeroDivisionError" in verdict(capsys, check.pass_at_k, lambda n, c, k: 1 / 0)


def test_max_difference_treats_matching_nans_as_equal():
    assert check.max_difference([1.0, math.nan], [1.0, math.nan]) == 0.0
    assert check.max_difference([1.0, 0.0], [1.0, math.nan]) == math.inf


def test_lesson_05_06_checkers(capsys):
    from minirl import advantages, kl, losses
    assert verdict(capsys, check.clipped_objective, own(losses.clipped_objective)).startswith("PASS clipped_objective: 7 cases")
    clip_on_advantage = lambda r, a, eps: torch.minimum(r * a, r * a.clamp(1 - eps, 1 + eps))  # noqa: E731
    assert verdict(capsys, check.clipped_objective, clip_on_advantage).startswith("FAIL clipped_objective")
    assert verdict(capsys, check.group_advantages,
                   lambda r, g, eps: advantages.group_normalize(r, g, eps)).startswith("PASS group_advantages: 6 cases")
    population_std = lambda r, g, eps: ((r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True))  # noqa: E731
                                        / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + eps)).reshape(-1)
    assert verdict(capsys, check.group_advantages, population_std).startswith("FAIL group_advantages")
    assert verdict(capsys, check.kl_k3, own(kl.kl_k3)).startswith("PASS kl_k3: 5 cases")
    assert verdict(capsys, check.kl_k3, lambda p, q: kl.kl_k3(q, p)).startswith("FAIL kl_k3")  # sign of log ratio flipped


def test_lesson_09_checkers(capsys):
    from minirl import losses
    assert verdict(capsys, check.sft_loss, own(losses.sft_loss)).startswith("PASS sft_loss: 5 cases")
    counts_the_prompt = lambda logits, tokens, mask: losses.sft_loss(logits, tokens, torch.ones_like(mask))  # noqa: E731
    assert verdict(capsys, check.sft_loss, counts_the_prompt).startswith("FAIL sft_loss")
    per_row_mean = lambda logits, tokens, mask: ops.masked_mean(  # noqa: E731
        ops.masked_mean(ops.token_logprobs(logits, tokens), mask, dim=1), torch.ones(tokens.size(0))) * -1
    assert verdict(capsys, check.sft_loss, per_row_mean).startswith("FAIL sft_loss")
    assert verdict(capsys, check.select_best, own(best_of_n.select_best)).startswith("PASS select_best: 6 cases")
    last_of_ties = lambda s, n: torch.arange(len(s) // n) * n + (n - 1 - s.view(-1, n).flip(1).argmax(1))  # noqa: E731
    assert verdict(capsys, check.select_best, last_of_ties).startswith("FAIL select_best")
    within_group = lambda s, n: s.view(-1, n).argmax(1)  # noqa: E731  the position in the group, not in scores
    assert verdict(capsys, check.select_best, within_group).startswith("FAIL select_best")
    assert verdict(capsys, check.best_of_n_kl_bound, own(best_of_n.kl_bound)).startswith("PASS best_of_n_kl_bound: 6 cases")
    assert verdict(capsys, check.best_of_n_kl_bound, lambda n: math.log(n)).startswith("FAIL best_of_n_kl_bound")
    assert "not implemented yet" in verdict(capsys, check.select_best, not_done)


def test_lesson_10_checker_passes_log_space_and_names_each_mistake(capsys):
    from minirl.train import overoptimization as oo
    assert verdict(capsys, check.kl_regularized_optimum, own(oo.tilted)).startswith("PASS kl_regularized_optimum: 6 cases")
    naive = lambda ref, r, b: ref * torch.exp(r / b) / (ref * torch.exp(r / b)).sum()  # noqa: E731  right, but overflows
    assert "overflows at a small beta" in verdict(capsys, check.kl_regularized_optimum, naive)
    times_beta = lambda ref, r, b: torch.softmax(torch.log(ref) + r * b, dim=0)  # noqa: E731
    assert "beta multiplies the reward" in verdict(capsys, check.kl_regularized_optimum, times_beta)
    no_ref = lambda ref, r, b: torch.softmax(r / b, dim=0)  # noqa: E731
    assert "pi_ref is missing" in verdict(capsys, check.kl_regularized_optimum, no_ref)
    no_z = lambda ref, r, b: ref * torch.exp(r / b)  # noqa: E731
    assert "Z is missing" in verdict(capsys, check.kl_regularized_optimum, no_z)
    assert "not implemented yet" in verdict(capsys, check.kl_regularized_optimum, not_done)


def test_lesson_11_checkers(capsys):
    from minirl import losses
    dpo = own(losses.dpo_loss)
    assert verdict(capsys, check.dpo_loss, dpo).startswith("PASS dpo_loss: 5 cases")
    swapped_ref = lambda pc, pr, rc, rr, beta: losses.dpo_loss(pc, pr, rr, rc, beta)  # noqa: E731
    assert verdict(capsys, check.dpo_loss, swapped_ref).startswith("FAIL dpo_loss")
    naive = lambda pc, pr, rc, rr, beta: (-torch.log(torch.sigmoid(beta * (pc - rc - pr + rr))).mean(),  # noqa: E731
                                          beta * (pc - rc), beta * (pr - rr))
    assert verdict(capsys, check.dpo_loss, naive).startswith("FAIL dpo_loss: 1 of 5")
    loss_only = lambda *args: own(losses.dpo_loss)(*args)[0]  # noqa: E731
    assert "return three things" in verdict(capsys, check.dpo_loss, loss_only)
    assert verdict(capsys, check.sequence_logprob, own(ops.sequence_logprob)).startswith("PASS sequence_logprob: 4 cases")
    times_mask = lambda x, m: (x * m).sum(1)  # noqa: E731  -inf * 0 = NaN
    assert verdict(capsys, check.sequence_logprob, times_mask).startswith("FAIL sequence_logprob: 1 of 4")
    assert verdict(capsys, check.sequence_logprob, lambda x, m: x.sum(1)).startswith("FAIL sequence_logprob")
    assert "not implemented yet" in verdict(capsys, check.dpo_loss, not_done)


def test_lesson_12_checkers(capsys):
    from minirl import losses
    svi = lambda mdp, r: own(type(mdp).soft_value_iteration)(mdp, r)[0]  # noqa: E731
    assert verdict(capsys, check.soft_value_iteration, svi).startswith("PASS soft_value_iteration: 4 cases")
    hard_max = lambda mdp, r: mdp.backward_q(lambda s, q: q.max(), r.dtype, rewards=r)  # noqa: E731  plain value iteration
    assert verdict(capsys, check.soft_value_iteration, hard_max).startswith("FAIL soft_value_iteration")
    naive_lse = lambda mdp, r: mdp.backward_q(lambda s, q: q.exp().sum().log(), r.dtype, rewards=r)  # noqa: E731
    assert verdict(capsys, check.soft_value_iteration, naive_lse).startswith("FAIL soft_value_iteration: 1 of 4")
    assert verdict(capsys, check.gail_discriminator_loss, own(losses.gail_discriminator_loss)).startswith(
        "PASS gail_discriminator_loss: 5 cases")
    pooled = lambda e, p: torch.nn.functional.binary_cross_entropy_with_logits(  # noqa: E731  one mean over both classes
        torch.cat([e, p]), torch.cat([torch.ones_like(e), torch.zeros_like(p)]))
    assert "each class's own mean" in verdict(capsys, check.gail_discriminator_loss, pooled)
    swapped = lambda e, p: losses.gail_discriminator_loss(p, e)  # noqa: E731  D = P(policy), Ho & Ermon's sign
    assert verdict(capsys, check.gail_discriminator_loss, swapped).startswith("FAIL gail_discriminator_loss")
    naive_log = lambda e, p: 0.5 * (-torch.sigmoid(e).log().mean() - (1 - torch.sigmoid(p)).log().mean())  # noqa: E731
    assert verdict(capsys, check.gail_discriminator_loss, naive_log).startswith("FAIL gail_discriminator_loss: 1 of 5")
    weights = lambda r, lq: torch.softmax(r - lq, 0)  # noqa: E731
    assert verdict(capsys, check.importance_weights, weights).startswith("PASS importance_weights: 5 cases")
    times_q = lambda r, lq: torch.softmax(r + lq, 0)  # noqa: E731  multiplied by q instead of divided
    assert verdict(capsys, check.importance_weights, times_q).startswith("FAIL importance_weights")
    unshifted = lambda r, lq: (r - lq).exp() / (r - lq).exp().sum()  # noqa: E731  overflows near 1000
    assert verdict(capsys, check.importance_weights, unshifted).startswith("FAIL importance_weights: 1 of 5")
    assert "not implemented yet" in verdict(capsys, check.importance_weights, not_done)


def test_lesson_16_checkers(capsys):
    from minirl.lm import memory
    mask_positions = lambda m: (m.long().cumsum(-1) - 1).clamp(min=0)  # noqa: E731
    assert verdict(capsys, check.positions_from_mask, mask_positions).startswith("PASS positions_from_mask: 5 cases")
    counting_padding = lambda m: torch.arange(m.size(1)).expand(m.shape)  # noqa: E731  HF's default: padding counted
    assert "left padding of 0, 2 and 4 tokens" in verdict(capsys, check.positions_from_mask, counting_padding)
    unclamped = lambda m: m.long().cumsum(-1) - 1  # noqa: E731
    assert verdict(capsys, check.positions_from_mask, unclamped).startswith("FAIL positions_from_mask")
    assert verdict(capsys, check.zero_model_states, own(memory.zero_model_states)).startswith("PASS zero_model_states: 7 cases")
    weights_kept = lambda n, r, s: own(memory.zero_model_states)(n, r, min(s, 2))  # noqa: E731  stage 3 as stage 2
    assert "stage 3 (the ZeRO paper's Figure 1)" in verdict(capsys, check.zero_model_states, weights_kept)
    all_sharded = lambda n, r, s: 16 * n / r / 1e9 if s else 16 * n / 1e9  # noqa: E731  every stage as stage 3
    assert verdict(capsys, check.zero_model_states, all_sharded).startswith("FAIL zero_model_states")


# ---------------------------------------------------------------- naming the trap
def trap_lines(out: str) -> str:
    """The lines under the FAIL line (the traps named and the cases)."""
    return out.split("\n", 1)[1]


def reward_to_go_loop(rewards, mask, gamma):
    """A plain second reward-to-go, for building wrong answers from."""
    r = torch.where(mask.bool(), rewards, torch.zeros_like(rewards))
    out, running = torch.zeros_like(r), torch.zeros_like(r[:, 0])
    for t in reversed(range(r.size(1))):
        running = r[:, t] + gamma * running
        out[:, t] = running
    return out * mask


def test_a_sign_flip_is_named(capsys):
    out = verdict(capsys, check.reward_to_go, lambda r, m, g: -reward_to_go_loop(r, m, g))
    assert out.startswith("FAIL reward_to_go: 4 of 4 cases wrong") and "A sign is flipped" in out
    no_minus = verdict(capsys, check.surrogate_loss, lambda logps, returns: (returns * logps).mean())  # the objective
    assert "A sign is flipped" in no_minus and "case 8 episodes: largest difference" in no_minus


def test_the_population_std_is_named(capsys):
    """By math: the population std is the sample std times sqrt((G-1)/G), so advantages divided by
    it are sqrt(G/(G-1)) times too large (exactly so without eps)."""
    def normalized(rewards, group_size, eps, correction):
        g = rewards.view(-1, group_size)
        return ((g - g.mean(1, keepdim=True)) / (g.std(1, correction=correction, keepdim=True) + eps)).reshape(-1)
    r = torch.tensor([0.0, 1.0, 1.0, 3.0], dtype=torch.float64)
    assert torch.allclose(normalized(r, 4, 0.0, 0), normalized(r, 4, 0.0, 1) * math.sqrt(4 / 3), atol=1e-12)
    out = verdict(capsys, check.group_advantages, lambda r, g, eps: normalized(r, g, eps, 0))
    assert out.startswith("FAIL group_advantages: 5 of 6 cases wrong, showing 3")  # the all-equal group is 0 either way
    assert "The population std (divides by G), not the sample std (G - 1)" in out and "sqrt(G/(G-1))" in out


def test_a_cumulative_sum_for_reward_to_go_is_named(capsys):
    out = verdict(capsys, check.reward_to_go, lambda r, m, g: r.cumsum(dim=1))  # lesson 03's classmate
    assert "A running sum from the row's start (a cumsum)" in out
    assert "\n    case truncated and EOS rows, gamma 1:" in out  # padding left in too: still named
    masked_cumsum = lambda r, m, g: (r * m).cumsum(dim=1) * m  # noqa: E731
    masked = verdict(capsys, check.reward_to_go, masked_cumsum)
    assert "(a cumsum)" in masked and "\n    case truncated and EOS rows, gamma 1:" in masked  # named on that case too
    assert "(a cumsum)" in verdict(capsys, check.reinforce_loss,
                                   lambda lp, r, m: -(masked_cumsum(r, m, 1.0) * lp * m).sum(1).mean())


def test_nan_where_zero_is_expected_is_named(capsys):
    def nan_for_equal_groups(rewards, group_size, eps):  # right, except 0 / 0 left as NaN for an all-equal group
        g = rewards.view(-1, group_size)
        std = g.std(1, keepdim=True)
        return torch.where(std == 0, math.nan, (g - g.mean(1, keepdim=True)) / (std + eps)).reshape(-1)
    out = verdict(capsys, check.group_advantages, nan_for_equal_groups)
    assert out.startswith("FAIL group_advantages: 2 of 6 cases wrong\n")  # 0/1 rewards hold an all-correct group
    assert "NaN or inf where the advantage is 0" in out
    assert "case a group of all-equal rewards (zero, not NaN): NaN or inf at 4 of 4 values" in out
    zero_over_zero = lambda n, c, k: own(pass_at_k)(n, c, k) if c else torch.tensor(0.0) / 0  # noqa: E731
    assert "NaN or inf where the answer is a number" in verdict(capsys, check.pass_at_k, zero_over_zero)  # every checker's


def test_a_forgotten_mask_is_named(capsys):
    unmasked = verdict(capsys, check.reward_to_go, lambda r, m, g: reward_to_go_loop(r, torch.ones_like(m), g))
    assert unmasked.startswith("FAIL reward_to_go: 3 of 4 cases wrong\n") and "The mask is ignored" in unmasked
    zeroed_late = verdict(capsys, check.reward_to_go, lambda r, m, g: reward_to_go_loop(r, torch.ones_like(m), g) * m)
    assert "The mask is ignored" in zeroed_late  # padding rewards summed in, the padding itself zeroed
    assert "The mask is ignored" in verdict(capsys, check.sequence_logprob, lambda x, m: x.sum(1))
    assert "The mask is ignored" in verdict(capsys, check.masked_mean,
                                            lambda x, m, dim=None: x.mean() if dim is None else x.mean(dim))
    counts_the_prompt = lambda logits, tokens, mask: losses_sft(logits, tokens, torch.ones_like(mask))  # noqa: E731
    assert "The mask is ignored" in verdict(capsys, check.sft_loss, counts_the_prompt)


def losses_sft(logits, tokens, mask):
    """Mean NLL over the mask's tokens, written with torch's cross entropy (a second implementation)."""
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="none")
    return (nll * mask.flatten()).sum() / mask.sum()


def test_off_by_one_is_named(capsys):
    def from_next(rewards, mask, gamma):  # stores the running sum before adding r_t
        r = rewards * mask
        out, running = torch.zeros_like(r), torch.zeros_like(r[:, 0])
        for t in reversed(range(r.size(1))):
            out[:, t] = running
            running = r[:, t] + gamma * running
        return out * mask
    assert "Off by one: position t holds G_(t+1)" in verdict(capsys, check.reward_to_go, from_next)
    late = verdict(capsys, check.discounted_return, lambda rewards, gamma: sum(gamma ** (t + 1) * r for t, r in enumerate(rewards)))
    assert "Off by one: the first reward is discounted too" in late
    assert "Off by one: the first real token has position 1" in verdict(capsys, check.positions_from_mask,
                                                                          lambda m: m.long().cumsum(-1))


def test_a_wrong_answer_no_trap_explains_lists_its_differences(capsys):
    out = verdict(capsys, check.reward_to_go, lambda r, m, g: reward_to_go_loop(r, m, g) + 0.5)
    assert trap_lines(out).splitlines() == [
        "  - no padding, gamma 1: largest difference 5.0e-01 (tolerance 1e-06)",
        "  - truncated and EOS rows, gamma 1: largest difference 5.0e-01 (tolerance 1e-06)",
        "  - discounted, gamma 0.9: largest difference 5.0e-01 (tolerance 1e-06)"]


def test_the_fail_line_says_how_many_cases_it_shows(capsys):
    out = verdict(capsys, check.pass_at_k, lambda n, c, k: 0.5)  # wrong on all 8
    assert out.startswith(f"FAIL pass_at_k: 8 of 8 cases wrong, showing {check.SHOWN}\n")
    assert len(trap_lines(out).splitlines()) == check.SHOWN == 3
    every_one = verdict(capsys, check.sequence_logprob, lambda x, m: (x * m).sum(1))  # 1 wrong: all shown, no "showing"
    assert every_one.startswith("FAIL sequence_logprob: 1 of 4 cases wrong\n")


def test_reinforce_loss_has_its_own_cases(capsys, monkeypatch):
    """Its own labels, describing its own (distinct) cases; reward-to-go's spoke of gamma, which
    reinforce_loss does not take, and two of them were the same case."""
    out = verdict(capsys, check.reinforce_loss, lambda lp, r, m: (lp * 0).sum())  # loss 0, gradient 0: all 4 wrong
    assert out.startswith("FAIL reinforce_loss: 4 of 4 cases wrong, showing 3")
    assert "no padding (each token weighted by its reward-to-go)" in out and "gamma" not in out
    cases = captured(monkeypatch, check.reinforce_loss)["cases"]
    rtg_labels = {label for label, _ in captured(monkeypatch, check.reward_to_go)["cases"]}
    assert [label for label, _ in cases] == ["no padding (each token weighted by its reward-to-go)",
                                             "EOS and padding (only the mask's tokens count)",
                                             "one reward, on each row's last token (an outcome reward)",
                                             "junk rewards on the padding"]
    assert not rtg_labels & {label for label, _ in cases}
    for (_, a), (_, b) in itertools.combinations(cases, 2):
        assert not all(torch.equal(x, y) for x, y in zip(a, b))
    last = torch.tensor([[0, 0, 0, 0, 1], [0, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    rewards = cases[2][1][1]
    assert torch.equal(rewards != 0, last)  # one reward per row, at its last real token


def test_the_package_function_handed_in_is_not_a_pass(capsys):
    """minirl's own function prints a FAIL line (what course.grade counts as a fail), never PASS."""
    from minirl import advantages
    out = verdict(capsys, check.reward_to_go, advantages.reward_to_go)
    assert out == ("FAIL reward_to_go: this is the package's own minirl.advantages.reward_to_go, not yours\n"
                   "  The exercise asks for your code: pass the function you wrote in the cell.\n")
    assert not re.search(r"^PASS ", out, re.M)
    partial = verdict(capsys, check.reward_to_go, functools.partial(advantages.reward_to_go, gamma=1.0))
    assert partial.startswith("FAIL reward_to_go: this is the package's own minirl.advantages.reward_to_go")
    assert verdict(capsys, check.reward_to_go, own(advantages.reward_to_go)).startswith("PASS reward_to_go: 4 cases")


CHECKERS = [name for name in check.__all__ if inspect.isfunction(getattr(check, name))
            and list(inspect.signature(getattr(check, name)).parameters) == ["student_fn"]]


def test_every_checker_spots_the_package_function(capsys):
    """Through each checker's own wrappers (they keep the student's function reachable)."""
    def packaged(*args):
        raise AssertionError("a checker ran minirl's own function")
    packaged.__module__, packaged.__qualname__ = "minirl.losses", "packaged"
    assert {"reward_to_go", "reinforce_loss", "gae", "dpo_loss", "select_best"} <= set(CHECKERS)
    for name in CHECKERS:
        out = verdict(capsys, getattr(check, name), packaged)
        assert out.startswith(f"FAIL {name}: this is the package's own minirl.losses.packaged, not yours\n"), out


def captured(monkeypatch, checker) -> dict:
    """What checker hands run_cases, without running it."""
    calls = []
    monkeypatch.setattr(check, "run_cases", lambda name, student_fn, reference_fn, cases, tolerance=check.TOLERANCE,
                        traps=(): calls.append(dict(name=name, reference=reference_fn, cases=cases, traps=traps)))
    checker(not_done)
    monkeypatch.undo()
    return calls[0]


def test_every_trap_runs_on_every_case(monkeypatch):
    """The diagnosis runs only on a wrong answer: try each checker's traps on each of its cases with
    an answer off by 1 everywhere (which none of them should claim), so none can raise in a notebook."""
    for name in CHECKERS:
        run = captured(monkeypatch, getattr(check, name))
        for label, args in run["cases"]:
            want = check.as_numbers(run["reference"](*copy.deepcopy(args)))
            assert check.diagnose(want + 1 + want.abs(), want, args, run["traps"]) is None, (name, label)


def test_all_names_the_public_api():
    assert set(check.__all__) == {n for n in vars(check) if not n.startswith("_") and n not in
                                  {"annotations", "contextlib", "copy", "functools", "inspect", "itertools", "math", "sys", "torch", "emit",
                                   "Fraction", "Callable", "NamedTuple"}}


def test_off_policy_checkers_pass_the_package_and_name_each_mistake(capsys):
    """Lesson 07's two checkers: minirl.core.corrections' functions pass (through a student's wrapper),
    and each planted mistake is named."""
    from minirl.core import corrections, ops

    def tis(lp, mu, m, cap):
        return corrections.importance_weights(lp, mu, m, "token_truncate", cap)

    def seq(lp, mu, m):
        return corrections.importance_weights(lp, mu, m, "sequence_truncate", math.inf)[:, 0]

    assert verdict(capsys, check.truncated_is_weights, tis).startswith("PASS truncated_is_weights: 13 cases")
    assert verdict(capsys, check.sequence_ratio, seq).startswith("PASS sequence_ratio: 6 cases")
    wrong = {
        "Clipped on both sides": lambda lp, mu, m, cap: tis(lp, mu, m, cap).clamp(min=1 / cap) * m,
        "upside down": lambda lp, mu, m, cap: tis(mu, lp, m, cap),
        "Masked instead of truncated": lambda lp, mu, m, cap: corrections.importance_weights(lp, mu, m, "token_mask", cap),
        "The mask is ignored": lambda lp, mu, m, cap: (lp - mu).exp().clamp(max=cap),
    }
    for mistake, fn in wrong.items():
        assert mistake in verdict(capsys, check.truncated_is_weights, fn), mistake
    geometric = verdict(capsys, check.sequence_ratio, lambda lp, mu, m: corrections.geometric_sequence_ratio(lp, mu, m))
    assert "GSPO's length-normalized ratio" in geometric
    assert "upside down" in verdict(capsys, check.sequence_ratio, lambda lp, mu, m: seq(mu, lp, m))
    assert "mask is ignored" in verdict(capsys, check.sequence_ratio, lambda lp, mu, m: ops.masked_sum(lp - mu, torch.ones_like(m), 1).exp())


def test_lesson_13_checkers_pass_the_package_and_name_each_mistake(capsys):
    """The package's first_order_entropy_change and reward_design.normalize_then_sum pass (through a
    student's wrapper); each planted mistake, written independently of the checker's loops, is named."""
    from minirl.exact import entropy, reward_design

    def dh(z, d):
        return own(entropy.first_order_entropy_change)(z, d)

    def nts(r, w):
        return own(reward_design.normalize_then_sum)(r, w)

    assert verdict(capsys, check.first_order_entropy_change, dh).startswith("PASS first_order_entropy_change: 4 cases")
    assert verdict(capsys, check.normalize_then_sum, nts).startswith("PASS normalize_then_sum: 4 cases")

    def uncentred(z, d):
        p = torch.softmax(z, -1)
        return -(p * torch.log_softmax(z, -1) * d).sum(-1)

    def uniform(z, d):
        lp = torch.log_softmax(z, -1)
        return -((lp - lp.mean(-1, keepdim=True)) * (d - d.mean(-1, keepdim=True))).mean(-1)

    for mistake, fn in {"The sign": lambda z, d: -dh(z, d), "Not a covariance": uncentred,
                        "uniformly": uniform}.items():
        assert mistake in verdict(capsys, check.first_order_entropy_change, fn), mistake

    def population(r, w):
        return (((r - r.mean(0)) / (r.std(0, unbiased=False) + 1e-4)) * w).sum(-1)

    for mistake, fn in {"Summed first": lambda r, w: reward_design.sum_then_normalize(r, w),
                        "population std": population,
                        "NaN or inf": lambda r, w: (((r - r.mean(0)) / r.std(0)) * w).sum(-1)}.items():
        assert mistake in verdict(capsys, check.normalize_then_sum, fn), mistake


def test_lesson_15_checkers_pass_the_package_and_name_each_mistake(capsys):
    """turn_returns: minirl.advantages.turn_returns passes through a student's wrapper; action_mask: a
    loop written here passes, and so do the masks the multi-turn sampler returns for the same tokens;
    each planted mistake is named."""
    from minirl import advantages

    def turns_by_package(rewards, turns, gamma):
        return own(advantages.turn_returns)(torch.tensor([rewards], dtype=torch.float64), torch.tensor([turns]), gamma)[0]

    assert verdict(capsys, check.turn_returns, turns_by_package).startswith("PASS turn_returns: 4 cases")

    def per_token(rewards, turns, gamma):
        g, out = 0.0, {}
        for r, t in reversed([(r, t) for r, t in zip(rewards, turns) if t >= 0]):
            g = r + gamma * g
            out[t] = g
        return [out[k] for k in sorted(out)]

    def with_padding(rewards, turns, gamma):
        return turns_by_package(rewards, [max(t, 0) for t in turns], gamma)

    for mistake, fn in {"Discounted per token": per_token, "padding (turn -1) is counted": with_padding}.items():
        assert mistake in verdict(capsys, check.turn_returns, fn), mistake

    def mask(tokens, call_end, lengths, end_is_env=False, answers_call=False):
        out, pending, k = [], 0, 0
        for t in tokens:
            calls = t == call_end and k < len(lengths)
            if pending:
                out.append(0)
                pending -= 1
                if not (answers_call and calls):
                    continue
            else:
                out.append(0 if end_is_env and calls else 1)
            if calls:
                pending, k = lengths[k], k + 1
        return out

    assert verdict(capsys, check.action_mask, mask).startswith("PASS action_mask: 6 cases")
    for mistake, fn in {"The call end itself": lambda t, c, n: mask(t, c, n, end_is_env=True),
                        "inside the environment's answer": lambda t, c, n: mask(t, c, n, answers_call=True),
                        "Every token is marked": lambda t, c, n: [1] * len(t)}.items():
        assert mistake in verdict(capsys, check.action_mask, fn), mistake


# ---------------------------------------------------------------- issue 48: the remaining traps
def test_a_mean_over_tokens_in_reinforce_loss_is_named(capsys):
    """The loss sums each sequence's tokens and averages over the B sequences; three ways to average
    over tokens instead are named, and the right answer, written here, passes."""
    def weighted(lp, r, m):
        return reward_to_go_loop(r, m, 1.0) * lp * m
    right = verdict(capsys, check.reinforce_loss, lambda lp, r, m: -weighted(lp, r, m).sum(1).mean())
    assert right.startswith("PASS reinforce_loss: 4 cases")
    token_means = {"over the batch's real tokens": lambda lp, r, m: -weighted(lp, r, m).sum() / m.sum(),
                   "torch.mean over every position": lambda lp, r, m: -torch.mean(weighted(lp, r, m)),
                   "within each row, then over rows": lambda lp, r, m: -(weighted(lp, r, m).sum(1) / m.sum(1)).mean()}
    for how, fn in token_means.items():
        out = verdict(capsys, check.reinforce_loss, fn)
        assert out.startswith("FAIL reinforce_loss: 4 of 4") and "A mean over tokens" in out, how


def test_an_extra_gamma_t_in_reward_to_go_is_named(capsys):
    """The discounted policy gradient's gamma^t folded into G_t: wrong only where gamma < 1."""
    with_gamma_t = lambda r, m, g: reward_to_go_loop(r, m, g) * g ** torch.arange(r.size(1))  # noqa: E731
    out = verdict(capsys, check.reward_to_go, with_gamma_t)
    assert out.startswith("FAIL reward_to_go: 1 of 4 cases wrong\n")
    assert "An extra gamma^t on G_t" in out and "case discounted, gamma 0.9:" in out
    assert verdict(capsys, check.reward_to_go, reward_to_go_loop).startswith("PASS reward_to_go: 4 cases")


def test_whole_batch_normalisation_is_named(capsys):
    def per_group(r, g, eps):
        x = r.view(-1, g)
        return ((x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + eps)).reshape(-1)
    assert verdict(capsys, check.group_advantages, per_group).startswith("PASS group_advantages: 6 cases")
    out = verdict(capsys, check.group_advantages, lambda r, g, eps: (r - r.mean()) / (r.std() + eps))
    assert out.startswith("FAIL group_advantages: 4 of 6")  # a single group (2 cases) is its own batch
    assert "Normalized over the whole batch" in out


def test_k1_and_log_probs_used_as_probabilities_are_named_in_kl_k3(capsys):
    """k1 handed in as k3, and three ways of mixing up log-probs and probabilities; k3 computed
    right through the probabilities passes (exp does not underflow at these log-probs)."""
    def k3(p, q):
        return torch.exp(q - p) - 1 - (q - p)
    assert verdict(capsys, check.kl_k3, k3).startswith("PASS kl_k3: 5 cases")
    ratio = lambda p, q: q.exp() / p.exp()  # noqa: E731
    assert verdict(capsys, check.kl_k3, lambda p, q: ratio(p, q) - 1 - ratio(p, q).log()).startswith("PASS kl_k3")
    for fn in (lambda p, q: p - q, lambda p, q: q - p):
        assert "k1, the log-ratio" in verdict(capsys, check.kl_k3, fn)
    mixed_up = {"divides the log-probs": lambda p, q: q / p - 1 - torch.log(q / p),
                "forgets the exp": lambda p, q: (q - p) - 1 - torch.log(q - p),  # NaN where q < p: still named
                "q - p for log(q/p)": lambda p, q: torch.exp(q - p) - 1 - (q.exp() - p.exp())}
    for how, fn in mixed_up.items():
        assert "Log-probs and probabilities mixed up" in verdict(capsys, check.kl_k3, fn), how


def by_hand_score(mdp, logits, prompt, completion):
    """Lesson 02's exercise 1, written here: onehot(a_t) - pi(.|s_t) on each visited state's row."""
    pi = torch.softmax(logits, dim=-1)
    grad = torch.zeros_like(logits)
    for t, action in enumerate(completion):
        s = mdp.state_index[(prompt, completion[:t])]
        grad[s] = grad[s] - pi[s]
        grad[s, mdp.actions.index(action)] += 1.0
    return grad


def test_autograd_in_score_function_is_named(capsys):
    """The exercise asks for the gradient by hand and the checker's reference is autograd's: an
    answer from autograd fails with the reason named; a bug of another kind keeps its own error."""
    assert verdict(capsys, check.score_function, by_hand_score).startswith("PASS score_function: 4 cases")

    def by_backward(mdp, logits, prompt, completion):
        logits.requires_grad_(True)
        mdp.log_prob(logits, prompt, completion).backward()
        return logits.grad

    def by_autograd_grad(mdp, logits, prompt, completion):
        theta = logits.clone().requires_grad_(True)
        return torch.autograd.grad(mdp.log_prob(theta, prompt, completion), theta)[0]

    for fn in (by_backward, by_autograd_grad):
        out = verdict(capsys, check.score_function, fn)
        assert out.startswith("FAIL score_function: 4 of 4") and "raised ValueError: used autograd" in out
    wrong_row = lambda mdp, logits, p, c: by_hand_score(mdp, logits, p, c) - torch.softmax(logits, -1)[:2]  # noqa: E731
    broadcast = verdict(capsys, check.score_function, wrong_row)  # a RuntimeError with or without autograd
    assert "raised RuntimeError: The size of tensor a" in broadcast and "autograd" not in broadcast
    assert "not implemented yet" in verdict(capsys, check.score_function, not_done)


def gae_here(rewards, values, mask, gamma, lam):
    """A plain GAE, written here: the TD errors within each row, summed backwards."""
    next_values = torch.zeros_like(values)
    next_values[:, :-1] = values[:, 1:] * mask[:, 1:]
    deltas = torch.where(mask.bool(), rewards + gamma * next_values - values, torch.zeros_like(values))
    out, running = torch.zeros_like(deltas), torch.zeros_like(deltas[:, 0])
    for t in reversed(range(deltas.size(1))):
        running = deltas[:, t] + gamma * lam * running
        out[:, t] = running
    return out * mask


def test_nested_lists_of_numbers_are_read_as_one_tensor(capsys, recwarn):
    """Rows of floats or of 0-d tensors are a (B, T) answer, read as torch.as_tensor reads them;
    a nested list that is not one block of numbers is named."""
    rows = [[torch.tensor(1.0, requires_grad=True) * 2, torch.tensor(3.0)], [torch.tensor(4.0), torch.tensor(5.0)]]
    assert torch.equal(check.as_numbers(rows), torch.tensor([[2.0, 3.0], [4.0, 5.0]], dtype=torch.float64))
    assert not [w for w in recwarn if "requires_grad" in str(w.message)]  # detached first: no warning printed
    assert check.as_numbers(((1, 2), (3, 4))).shape == (2, 2)
    for nested, says in [([[1.0], [2.0, 3.0]], "not one block of numbers"),
                         ([[torch.ones(2)], [torch.ones(2)]], "list of tensors: return one tensor")]:
        try:
            check.as_numbers(nested)
            raise AssertionError(f"{nested} read as numbers")
        except TypeError as e:
            assert says in str(e)
    assert verdict(capsys, check.gae, gae_here).startswith("PASS gae: 4 cases")
    as_rows = verdict(capsys, check.gae, lambda *args: gae_here(*args).tolist())  # not read as (advantages, returns)
    assert as_rows.startswith("PASS gae: 4 cases"), as_rows
    of_scalars = verdict(capsys, check.gae, lambda *args: [list(row) for row in gae_here(*args)])
    assert of_scalars.startswith("PASS gae: 4 cases"), of_scalars
    with_returns = verdict(capsys, check.gae, lambda r, v, m, g, lam: (gae_here(r, v, m, g, lam), v))  # minirl's form
    assert with_returns.startswith("PASS gae: 4 cases")

    def dpo_here(pc, pr, rc, rr, beta):
        h = beta * ((pc - rc) - (pr - rr))
        return [-torch.nn.functional.logsigmoid(h).mean(), beta * (pc - rc), beta * (pr - rr)]
    assert verdict(capsys, check.dpo_loss, dpo_here).startswith("PASS dpo_loss: 5 cases")  # a list of three


def test_a_function_that_only_calls_minirls_own_is_named(capsys):
    """A lambda around minirl's function, or a def that imports and calls it under another name, is
    not the student's code: FAIL naming the package's function. The same code as the student's own
    (own(...): minirl's code defined in the student's namespace) passes."""
    wrapper = lambda n, c, k: pass_at_k(n, c, k)  # noqa: E731
    out = verdict(capsys, check.pass_at_k, wrapper)
    assert out.startswith("FAIL pass_at_k: your function calls the package's own minirl.world.evaluate.pass_at_k")

    def renamed(logp, ref_logp):
        from minirl.kl import kl_k3 as theirs
        return theirs(logp, ref_logp)
    assert "calls the package's own minirl.kl.kl_k3" in verdict(capsys, check.kl_k3, renamed)
    assert verdict(capsys, check.pass_at_k, own(pass_at_k)).startswith("PASS pass_at_k")


def test_process_reward_checkers_name_each_mistake(capsys):
    from minirl.train import prm
    from minirl.world import steps
    label, score = own(prm.monte_carlo_label), own(prm.completion_score)
    assert verdict(capsys, check.monte_carlo_label, label).startswith("PASS monte_carlo_label: 6 cases")
    assert verdict(capsys, check.completion_score, score).startswith("PASS completion_score: 8 cases")
    wrong_labels = {
        "rewrote the step": lambda q, pre, cs: sum(steps.final_correct(q, pre + c) for c in cs) / len(cs),
        "checked alone": lambda q, pre, cs: sum(steps.final_correct(q, c) for c in cs) / len(cs),
        "hard label": lambda q, pre, cs: float(label(q, pre, cs) > 0),
    }
    for words, fn in wrong_labels.items():
        out = verdict(capsys, check.monte_carlo_label, fn)
        assert out.startswith("FAIL monte_carlo_label") and words in out, out
    wrong_scores = {
        "The mean of the steps": lambda p, how: sum(p) / len(p) if p and how == "product" else score(p, how),
        "the empty product is 1": lambda p, how: 1.0 if not p else score(p, how),
        "The first step": lambda p, how: p[0] if p and how == "last" else score(p, how),
    }
    for words, fn in wrong_scores.items():
        out = verdict(capsys, check.completion_score, fn)
        assert out.startswith("FAIL completion_score") and words in out, out
    calls_minirl = lambda p, how: prm.completion_score(p, how)  # noqa: E731
    assert "calls the package's own minirl.train.prm.completion_score" in verdict(capsys, check.completion_score,
                                                                                 calls_minirl)
    assert "not implemented yet" in verdict(capsys, check.monte_carlo_label, not_done)
