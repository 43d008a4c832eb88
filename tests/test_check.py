"""The exercise checkers: PASS on a right answer, FAIL (never an exception) on a wrong one."""
import math

import torch

from minirl import best_of_n, check, ops
from minirl.evaluate import pass_at_k


def not_done(*args):
    raise NotImplementedError("exercise: write your solution here")


def verdict(capsys, checker, fn) -> str:
    checker(fn)
    return capsys.readouterr().out


def test_pass_at_k_checker(capsys):
    assert verdict(capsys, check.pass_at_k, pass_at_k).startswith("PASS pass_at_k: 8 cases")
    biased = verdict(capsys, check.pass_at_k, lambda n, c, k: 1 - (1 - c / n) ** k)
    assert biased.startswith("FAIL pass_at_k") and "largest difference" in biased
    assert "not implemented yet" in verdict(capsys, check.pass_at_k, not_done)


def test_a_pass_prints_the_tolerance_not_the_rounding_noise(capsys):
    """A right answer off by rounding alone prints the same PASS line on every CPU: the tolerance met,
    not the difference (1e-16 here, 2e-16 on another processor)."""
    lines = {verdict(capsys, check.pass_at_k, lambda n, c, k, eps=eps: pass_at_k(n, c, k) + eps) for eps in (0.0, 1e-16, 3e-9)}
    assert lines == {"PASS pass_at_k: 8 cases, each within 1e-06 of the reference\n"}
    assert verdict(capsys, check.select_best, best_of_n.select_best).endswith("each equal to the reference\n")


def test_masked_mean_checker(capsys):
    assert verdict(capsys, check.masked_mean, ops.masked_mean).startswith("PASS masked_mean")
    unmasked = lambda x, m, dim=None: (x * m).mean() if dim is None else (x * m).mean(dim)  # noqa: E731
    hides_empty_rows = lambda x, m, dim=None: torch.nan_to_num(ops.masked_mean(x, m, dim))  # noqa: E731
    assert verdict(capsys, check.masked_mean, unmasked).startswith("FAIL masked_mean")
    assert verdict(capsys, check.masked_mean, hides_empty_rows).startswith("FAIL masked_mean: 2 of 4")


def test_a_crashing_student_function_prints_fail(capsys):
    assert "raised ZeroDivisionError" in verdict(capsys, check.pass_at_k, lambda n, c, k: 1 / 0)


def test_max_difference_treats_matching_nans_as_equal():
    assert check.max_difference([1.0, math.nan], [1.0, math.nan]) == 0.0
    assert check.max_difference([1.0, 0.0], [1.0, math.nan]) == math.inf


def test_lesson_05_06_checkers(capsys):
    from minirl import advantages, kl, losses
    assert verdict(capsys, check.clipped_objective, losses.clipped_objective).startswith("PASS clipped_objective: 7 cases")
    clip_on_advantage = lambda r, a, eps: torch.minimum(r * a, r * a.clamp(1 - eps, 1 + eps))  # noqa: E731
    assert verdict(capsys, check.clipped_objective, clip_on_advantage).startswith("FAIL clipped_objective")
    assert verdict(capsys, check.group_advantages,
                   lambda r, g, eps: advantages.group_normalize(r, g, eps)).startswith("PASS group_advantages: 6 cases")
    population_std = lambda r, g, eps: ((r.view(-1, g) - r.view(-1, g).mean(1, keepdim=True))  # noqa: E731
                                        / (r.view(-1, g).std(1, unbiased=False, keepdim=True) + eps)).reshape(-1)
    assert verdict(capsys, check.group_advantages, population_std).startswith("FAIL group_advantages")
    assert verdict(capsys, check.kl_k3, kl.kl_k3).startswith("PASS kl_k3: 5 cases")
    assert verdict(capsys, check.kl_k3, lambda p, q: kl.kl_k3(q, p)).startswith("FAIL kl_k3")  # sign of log ratio flipped


def test_lesson_08_checkers(capsys):
    from minirl import losses
    assert verdict(capsys, check.sft_loss, losses.sft_loss).startswith("PASS sft_loss: 5 cases")
    counts_the_prompt = lambda logits, tokens, mask: losses.sft_loss(logits, tokens, torch.ones_like(mask))  # noqa: E731
    assert verdict(capsys, check.sft_loss, counts_the_prompt).startswith("FAIL sft_loss")
    per_row_mean = lambda logits, tokens, mask: ops.masked_mean(  # noqa: E731
        ops.masked_mean(ops.token_logprobs(logits, tokens), mask, dim=1), torch.ones(tokens.size(0))) * -1
    assert verdict(capsys, check.sft_loss, per_row_mean).startswith("FAIL sft_loss")
    assert verdict(capsys, check.select_best, best_of_n.select_best).startswith("PASS select_best: 6 cases")
    last_of_ties = lambda s, n: torch.arange(len(s) // n) * n + (n - 1 - s.view(-1, n).flip(1).argmax(1))  # noqa: E731
    assert verdict(capsys, check.select_best, last_of_ties).startswith("FAIL select_best")
    within_group = lambda s, n: s.view(-1, n).argmax(1)  # noqa: E731  the position in the group, not in scores
    assert verdict(capsys, check.select_best, within_group).startswith("FAIL select_best")
    assert verdict(capsys, check.best_of_n_kl_bound, best_of_n.kl_bound).startswith("PASS best_of_n_kl_bound: 6 cases")
    assert verdict(capsys, check.best_of_n_kl_bound, lambda n: math.log(n)).startswith("FAIL best_of_n_kl_bound")
    assert "not implemented yet" in verdict(capsys, check.select_best, not_done)


def test_lesson_09_checkers(capsys):
    from minirl import losses
    dpo = lambda *args: losses.dpo_loss(*args)  # noqa: E731
    assert verdict(capsys, check.dpo_loss, dpo).startswith("PASS dpo_loss: 5 cases")
    swapped_ref = lambda pc, pr, rc, rr, beta: losses.dpo_loss(pc, pr, rr, rc, beta)  # noqa: E731
    assert verdict(capsys, check.dpo_loss, swapped_ref).startswith("FAIL dpo_loss")
    naive = lambda pc, pr, rc, rr, beta: (-torch.log(torch.sigmoid(beta * (pc - rc - pr + rr))).mean(),  # noqa: E731
                                          beta * (pc - rc), beta * (pr - rr))
    assert verdict(capsys, check.dpo_loss, naive).startswith("FAIL dpo_loss: 1 of 5")
    loss_only = lambda *args: losses.dpo_loss(*args)[0]  # noqa: E731
    assert "return three things" in verdict(capsys, check.dpo_loss, loss_only)
    assert verdict(capsys, check.sequence_logprob, ops.sequence_logprob).startswith("PASS sequence_logprob: 4 cases")
    times_mask = lambda x, m: (x * m).sum(1)  # noqa: E731  -inf * 0 = NaN
    assert verdict(capsys, check.sequence_logprob, times_mask).startswith("FAIL sequence_logprob: 1 of 4")
    assert verdict(capsys, check.sequence_logprob, lambda x, m: x.sum(1)).startswith("FAIL sequence_logprob")
    assert "not implemented yet" in verdict(capsys, check.dpo_loss, not_done)


def test_lesson_10_checkers(capsys):
    from minirl import losses
    svi = lambda mdp, r: mdp.soft_value_iteration(r)[0]  # noqa: E731
    assert verdict(capsys, check.soft_value_iteration, svi).startswith("PASS soft_value_iteration: 4 cases")
    hard_max = lambda mdp, r: mdp.backward_q(lambda s, q: q.max(), r.dtype, rewards=r)  # noqa: E731  plain value iteration
    assert verdict(capsys, check.soft_value_iteration, hard_max).startswith("FAIL soft_value_iteration")
    naive_lse = lambda mdp, r: mdp.backward_q(lambda s, q: q.exp().sum().log(), r.dtype, rewards=r)  # noqa: E731
    assert verdict(capsys, check.soft_value_iteration, naive_lse).startswith("FAIL soft_value_iteration: 1 of 4")
    assert verdict(capsys, check.gail_discriminator_loss, losses.gail_discriminator_loss).startswith(
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


def test_lesson_11_checkers(capsys):
    from minirl import memory
    mask_positions = lambda m: (m.long().cumsum(-1) - 1).clamp(min=0)  # noqa: E731
    assert verdict(capsys, check.positions_from_mask, mask_positions).startswith("PASS positions_from_mask: 5 cases")
    counting_padding = lambda m: torch.arange(m.size(1)).expand(m.shape)  # noqa: E731  HF's default: padding counted
    assert "left padding of 0, 2 and 4 tokens" in verdict(capsys, check.positions_from_mask, counting_padding)
    unclamped = lambda m: m.long().cumsum(-1) - 1  # noqa: E731
    assert verdict(capsys, check.positions_from_mask, unclamped).startswith("FAIL positions_from_mask")
    assert verdict(capsys, check.zero_model_states, memory.zero_model_states).startswith("PASS zero_model_states: 7 cases")
    weights_kept = lambda n, r, s: memory.zero_model_states(n, r, min(s, 2))  # noqa: E731  stage 3 as stage 2
    assert "stage 3 (the ZeRO paper's Figure 1)" in verdict(capsys, check.zero_model_states, weights_kept)
    all_sharded = lambda n, r, s: 16 * n / r / 1e9 if s else 16 * n / 1e9  # noqa: E731  every stage as stage 3
    assert verdict(capsys, check.zero_model_states, all_sharded).startswith("FAIL zero_model_states")
