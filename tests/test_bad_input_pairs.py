"""Bad input to the preference losses, preference fitting, DPO and the RLHF report: each gets an
error from minirl itself, of a stated type, whose message names what was wrong. And legal
degenerate input (ties everywhere, one pair, identical chosen and rejected, label 1 everywhere)
keeps working, with the numbers it gave before.

Each case is (id, call, exception type, a regex the message must match), as in test_bad_input.py.
No trainer runs more than a step or two; the shipped models load in well under a second.
"""
from __future__ import annotations

import copy
import functools
import math

import pytest
import torch

from bad_input import assert_refused_by_minirl

import minirl
from minirl import losses
from minirl.core import preferences
from minirl.exact import micro_dpo
from minirl.train import dpo, rlhf
from minirl.train.dpo import DPOConfig, train_dpo

NAN, INF = math.nan, math.inf


@functools.cache
def sft():
    return minirl.load_model("sft")


@functools.cache
def meta_copy():
    """The SFT model on another device than the CPU ('meta': no GPU needed to test the check)."""
    return copy.deepcopy(sft()).to("meta")


def logps(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [-5 * torch.rand(n, generator=g, dtype=torch.float64) for _ in range(4)]


def with_value(x, k, v):
    x = x.clone()
    x[k] = v
    return x


def dpo_with(k, v, **kwargs):
    args = logps()
    args[k] = with_value(args[k], 1, v)
    return lambda: losses.dpo_loss(*args, 0.1, **kwargs)


def pairs(n=2):
    return [{"prompt": "order:", "chosen": " one coffee .", "rejected": " one tea please ."} for _ in range(n)]


def pairs_with(k, **changes):
    out = pairs(3)
    out[k] = {**out[k], **changes}
    for key, value in changes.items():
        if value is ...:
            del out[k][key]
    return out


def one_step(pairs_, reference=None, policy=None, **config):
    """One DPO step; bad input is refused before it, so the shared SFT model is never trained."""
    config = {"steps": 1, "batch_size": 2, "eval_samples": 2, **config}
    return train_dpo(policy or sft(), pairs_, DPOConfig(**config), reference=reference)


def micro():
    """(log pi_ref (6,), rewards (6,), i, j): a small micro-world stand-in, float64."""
    g = torch.Generator().manual_seed(0)
    ref = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64), 0)
    r = torch.randn(6, generator=g, dtype=torch.float64)
    i, j = micro_dpo.pair_graph(6, "all")
    return ref, r, i, j


W, L = [0, 1, 2, 0], [1, 2, 0, 2]  # games over 3 items, strongly connected

CASES = [
    # ------------------------------------------------------------ losses: Bradley-Terry
    ("bradley_terry_loss: NaN chosen reward",
     lambda: losses.bradley_terry_loss(torch.tensor([0.5, NAN]), torch.zeros(2)), ValueError, "chosen_rewards.*NaN"),
    ("bradley_terry_loss: inf rejected reward",
     lambda: losses.bradley_terry_loss(torch.zeros(2), torch.tensor([INF, 0.0])), ValueError, "rejected_rewards.*inf"),
    ("bradley_terry_loss: labels +1/-1",
     lambda: losses.bradley_terry_loss(torch.zeros(2), torch.zeros(2), torch.tensor([1.0, -1.0])), ValueError,
     r"labels.*\[0, 1\].*\(y \+ 1\) / 2"),
    ("bradley_terry_loss: raw reward differences as labels",
     lambda: losses.bradley_terry_loss(torch.zeros(2), torch.zeros(2), torch.tensor([2.3, -0.7])), ValueError,
     r"labels.*\[0, 1\].*sigmoid"),
    ("bradley_terry_loss: NaN label",
     lambda: losses.bradley_terry_loss(torch.zeros(2), torch.zeros(2), torch.tensor([1.0, NAN])), ValueError, "labels"),
    # ------------------------------------------------------------ losses: DPO, IPO, SimPO
    ("dpo_loss: NaN policy_chosen_logps", dpo_with(0, NAN), ValueError, "policy_chosen_logps.*NaN"),
    ("dpo_loss: inf policy_rejected_logps", dpo_with(1, -INF), ValueError, "policy_rejected_logps.*inf"),
    ("dpo_loss: NaN ref_chosen_logps", dpo_with(2, NAN), ValueError, "ref_chosen_logps.*NaN"),
    ("dpo_loss: inf ref_rejected_logps", dpo_with(3, INF), ValueError, "ref_rejected_logps.*inf"),
    ("dpo_loss: NaN with ipo", dpo_with(0, NAN, loss_type="ipo"), ValueError, "policy_chosen_logps.*NaN"),
    ("dpo_loss: probabilities as log-probs",
     lambda: losses.dpo_loss(*(torch.tensor([0.3, 0.9]) for _ in range(4)), 0.1), ValueError,
     r"policy_chosen_logps.*<= 0.*0\.9.*log"),
    ("dpo_loss: one positive reference log-prob", dpo_with(3, 0.5), ValueError, "ref_rejected_logps.*<= 0"),
    ("dpo_loss: label_smoothing 0.5", lambda: losses.dpo_loss(*logps(), 0.1, label_smoothing=0.5), ValueError,
     r"label_smoothing.*0\.5.*gradient"),
    ("dpo_loss: label_smoothing 0.7", lambda: losses.dpo_loss(*logps(), 0.1, label_smoothing=0.7), ValueError,
     "label_smoothing"),
    ("dpo_loss: negative label_smoothing", lambda: losses.dpo_loss(*logps(), 0.1, label_smoothing=-0.1), ValueError,
     "label_smoothing"),
    ("simpo_loss: NaN chosen", lambda: losses.simpo_loss(torch.tensor([NAN, -1.0]), torch.tensor([-1.0, -2.0]), 2.0, 0.5),
     ValueError, "chosen_avg_logps.*NaN"),
    ("simpo_loss: probabilities as log-probs",
     lambda: losses.simpo_loss(torch.tensor([0.4, 0.2]), torch.tensor([0.1, 0.3]), 2.0, 0.5), ValueError,
     "chosen_avg_logps.*<= 0"),
    ("preference_accuracy: NaN reward",
     lambda: losses.preference_accuracy(torch.tensor([NAN, 1.0]), torch.zeros(2)), ValueError, "chosen_rewards.*NaN"),
    # ------------------------------------------------------------ DPOConfig
    ("DPOConfig: label_smoothing 0.5", lambda: DPOConfig(label_smoothing=0.5), ValueError,
     r"label_smoothing.*0\.5.*gradient"),
    ("DPOConfig: negative label_smoothing", lambda: DPOConfig(label_smoothing=-0.05), ValueError, "label_smoothing"),
    # ------------------------------------------------------------ preferences
    ("fit_bradley_terry: +1/-1 outcomes", lambda: preferences.fit_bradley_terry(W, L, 3, [1, -1, 1, -1]), ValueError,
     r"labels.*\[0, 1\].*\(y \+ 1\) / 2"),
    ("online_elo: reward differences as labels", lambda: preferences.online_elo(W, L, 3, [0.5, 2.0, -1.5, 0.2]),
     ValueError, r"labels.*\[0, 1\]"),
    ("win_counts: NaN label", lambda: preferences.win_counts(W, L, 3, [1, NAN, 1, 1]), ValueError, "labels"),
    ("fit_bradley_terry: labels of the wrong length", lambda: preferences.fit_bradley_terry(W, L, 3, [1.0, 0.5]),
     ValueError, "labels.*per game"),
    ("elo_update: score -1 (a +1/-1 outcome)", lambda: preferences.elo_update(1000.0, 1000.0, -1.0), ValueError,
     r"score_a.*\[0, 1\]"),
    ("elo_update: score 2", lambda: preferences.elo_update(1000.0, 1000.0, 2.0), ValueError, r"score_a.*\[0, 1\]"),
    ("elo_update: NaN rating", lambda: preferences.elo_update(NAN, 1000.0, 1.0), ValueError, "rating_a"),
    ("elo_expected: scale 0", lambda: preferences.elo_expected(1000.0, 1000.0, scale=0), ValueError, "scale"),
    ("expected_wins: theta of the wrong length", lambda: preferences.expected_wins(torch.zeros(2), W, L, 3), ValueError,
     "theta.*3"),
    ("pair_weights: counts", lambda: preferences.pair_weights([3, 1, 2]), ValueError, "probs.*sum.*6.*divide"),
    ("pair_weights: a negative entry", lambda: preferences.pair_weights([1.2, -0.2, 0.0]), ValueError,
     "probs.*negative"),
    ("pair_weights: NaN", lambda: preferences.pair_weights([NAN, 0.5, 0.5]), ValueError, "probs"),
    ("pair_weights: one item holds all the mass", lambda: preferences.pair_weights([1.0, 0.0, 0.0]), ValueError,
     "two items"),
    ("accuracy_ceiling: probs for other items", lambda: preferences.accuracy_ceiling([0.0, 1.0, 2.0], [0.5, 0.5]),
     ValueError, "utilities.*probs"),
    ("expected_accuracy: probs for other items",
     lambda: preferences.expected_accuracy([0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [0.5, 0.5]), ValueError, "probs"),
    ("reliability: reward differences as predictions", lambda: preferences.reliability([1.5, -0.3], [1.0, 0.0]),
     ValueError, r"predicted.*\[0, 1\].*sigmoid"),
    ("reliability: +1/-1 outcomes", lambda: preferences.reliability([0.7, 0.2], [1.0, -1.0]), ValueError,
     r"outcome.*\[0, 1\]"),
    ("reliability: negative weights", lambda: preferences.reliability([0.7, 0.2], [1.0, 0.0], [1.0, -1.0]),
     ValueError, "weights"),
    # ------------------------------------------------------------ micro_dpo
    ("micro_dpo.dpo_pair_loss: +1/-1 labels",
     lambda: micro_dpo.dpo_pair_loss(micro()[0], micro()[0], micro()[2], micro()[3],
                                     torch.ones(15, dtype=torch.float64).index_fill_(0, torch.tensor([1]), -1.0), 0.5),
     ValueError, r"labels.*\[0, 1\]"),
    ("micro_dpo.dpo_pair_loss: probabilities for log pi_ref",
     lambda: micro_dpo.dpo_pair_loss(micro()[0], micro()[0].exp(), micro()[2], micro()[3],
                                     torch.ones(15, dtype=torch.float64), 0.5), ValueError, "ref_logp.*log"),
    ("micro_dpo.rlhf_optimum: counts for log pi_ref",
     lambda: micro_dpo.rlhf_optimum(torch.tensor([3.0, 1.0, 2.0]).log(), torch.zeros(3), 0.5), ValueError,
     "ref_logp.*logsumexp"),
    ("micro_dpo.rlhf_optimum: NaN reward",
     lambda: micro_dpo.rlhf_optimum(micro()[0], with_value(micro()[1], 2, NAN), 0.5), ValueError, "rewards.*NaN"),
    ("micro_dpo.ipo_pair_loss: a pair index out of range",
     lambda: micro_dpo.ipo_pair_loss(micro()[0], micro()[0], torch.tensor([0, 6]), torch.tensor([1, 2]), 0.5),
     ValueError, r"winners.*\[0, 6\)"),
    ("micro_dpo.step_size: curvature 0", lambda: micro_dpo.step_size(micro()[2], micro()[3], 6, 0.0), ValueError,
     "curvature"),
    ("micro_dpo.step_size: a completion against itself",
     lambda: micro_dpo.step_size(torch.tensor([0, 1]), torch.tensor([1, 1]), 6, 1.0), ValueError, "itself"),
    ("micro_dpo.fit: lr 0", lambda: micro_dpo.fit(lambda lp: lp.sum(), micro()[0], 0.0, 2, [0]), ValueError, "lr"),
    ("micro_dpo.kl: probabilities for log-probs",
     lambda: micro_dpo.kl(micro()[0].exp(), micro()[0]), ValueError, "logp.*log"),
    # ------------------------------------------------------------ train_dpo wiring
    ("train_dpo: a pair without 'rejected'", lambda: one_step(pairs_with(1, rejected=...)), ValueError,
     r"pairs\[1\] has no 'rejected'.*'prompt', 'chosen', 'rejected'"),
    ("train_dpo: a pair without 'chosen'", lambda: one_step(pairs_with(2, chosen=...)), ValueError,
     r"pairs\[2\] has no 'chosen'"),
    ("train_dpo: a pair without 'prompt'", lambda: one_step(pairs_with(0, prompt=...)), ValueError,
     r"pairs\[0\] has no 'prompt'"),
    ("train_dpo: a prompt that is None", lambda: one_step(pairs_with(1, prompt=None)), TypeError,
     r"pairs\[1\]\['prompt'\] must be a string.*None"),
    ("train_dpo: token ids as a response", lambda: one_step(pairs_with(0, chosen=[5, 6, 7])), TypeError,
     r"pairs\[0\]\['chosen'\] must be a string"),
    ("train_dpo: a pair as a tuple", lambda: one_step([("order:", " one tea .", " one coffee .")]), TypeError,
     r"pairs\[0\] must be a dict"),
    ("train_dpo: a soft label", lambda: one_step(pairs_with(2, label=0.3)), ValueError,
     r"pairs\[2\] has label 0\.3.*label 1.*swap.*label_smoothing"),
    ("train_dpo: a reversed label", lambda: one_step(pairs_with(0, label=0)), ValueError, r"pairs\[0\] has label 0\b"),
    ("train_dpo: the policy as its own reference", lambda: one_step(pairs(), reference=sft()),
     ValueError, "reference is the policy itself.*frozen copy"),
    ("train_dpo: a reference on another device", lambda: one_step(pairs(), reference=meta_copy()), ValueError,
     r"reference.*meta.*policy.*cpu.*\.to\("),
    ("train_dpo: a reference that is not a GPT", lambda: one_step(pairs(), reference="sft"), TypeError,
     "reference must be a minirl GPT"),
    ("train_dpo: a dict of pairs", lambda: one_step(pairs()[0]), ValueError, "non-empty list"),
    ("label_noise: no pairs", lambda: dpo.label_noise([]), ValueError, "non-empty list"),
    ("label_noise: a pair without 'chosen'", lambda: dpo.label_noise(pairs_with(1, chosen=...)), ValueError,
     r"pairs\[1\] has no 'chosen'"),
    ("reference_logprobs: no pairs", lambda: dpo.reference_logprobs(sft(), [], 0, False), ValueError, "no pairs"),
    ("pair_logprobs: no pairs", lambda: dpo.pair_logprobs(sft(), [], 0), ValueError, "no pairs"),
    # ------------------------------------------------------------ rlhf
    ("policy_report: a reference on another device", lambda: rlhf.policy_report(sft(), meta_copy(), samples=4),
     ValueError, r"reference.*meta.*policy.*cpu.*\.to\("),
    ("policy_report: a reference that is not a GPT", lambda: rlhf.policy_report(sft(), "base", samples=4), TypeError,
     "reference must be a minirl GPT"),
    ("policy_report: one sample", lambda: rlhf.policy_report(sft(), sft(), samples=1), ValueError, "samples must be >= 2"),
    ("policy_report: no samples", lambda: rlhf.policy_report(sft(), sft(), samples=0), ValueError, "samples must be >= 2"),
    ("sequence_kl: a reference on another device", lambda: rlhf.sequence_kl(rlhf.order_samples(sft(), 2, 0), meta_copy()),
     ValueError, r"reference.*meta.*cpu"),
    ("win_rate: NaN gold", lambda: rlhf.win_rate([1.0, NAN], [0.0]), ValueError, "gold_a.*NaN"),
    ("gold_pairs: n_pairs 2.5", lambda: rlhf.gold_pairs([" one tea .", " one coffee ."], 2.5, 0), TypeError, "n_pairs"),
]


@pytest.mark.parametrize("label, call, error, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(label, call, error, match):
    assert_refused_by_minirl(call, error, match)


# ---------------------------------------------------------------- legal degenerate input keeps working
def test_identical_chosen_and_rejected_give_log_2():
    pc, pr, rc, rr = logps()
    for loss_type in ("sigmoid", "ipo"):
        loss, r_c, r_r = losses.dpo_loss(pc, pc.clone(), rr, rr.clone(), 0.1, loss_type)
        want = math.log(2) if loss_type == "sigmoid" else (1 / 0.2) ** 2
        assert loss.item() == pytest.approx(want, abs=1e-12) and torch.equal(r_c, r_r)
    assert losses.bradley_terry_loss(pc, pc.clone()).item() == pytest.approx(math.log(2), abs=1e-12)
    zero = torch.zeros(3, dtype=torch.float64)  # a log-prob of 0 (probability 1) is a log-prob
    assert losses.dpo_loss(zero, zero, zero, zero, 0.1)[0].item() == pytest.approx(math.log(2), abs=1e-12)


def test_a_single_pair_and_ties_everywhere():
    pc, pr, rc, rr = logps(1)
    loss = losses.dpo_loss(pc, pr, rc, rr, 0.5, label_smoothing=0.49)[0]  # just below 1/2: still trains
    assert math.isfinite(loss.item())
    ties = torch.full((4,), 0.5)
    assert losses.bradley_terry_loss(torch.randn(4), torch.randn(4), ties).item() > 0
    assert losses.bradley_terry_loss(torch.zeros(1), torch.zeros(1), torch.tensor([0.5])).item() == pytest.approx(
        math.log(2))
    theta = preferences.fit_bradley_terry(W, L, 3, [0.5] * 4)  # every game a tie: equal strengths
    assert torch.allclose(theta, torch.zeros(3, dtype=torch.float64), atol=1e-12)
    assert torch.equal(preferences.online_elo(W, L, 3, [0.5] * 4)[:1], torch.tensor([1000.0], dtype=torch.float64))
    assert preferences.fit_bradley_terry([0], [1], 2, l2=0.1).shape == (2,)  # a single game, with a prior
    assert preferences.elo_update(1000.0, 1000.0, 0.5) == (1000.0, 1000.0)
    assert preferences.pair_weights([0.5, 0.5, 0.0]).sum().item() == pytest.approx(1.0)  # an item never drawn
    assert preferences.reliability([0.5, 0.5], [1.0, 0.0], [0.0, 2.0])["ece"] == pytest.approx(0.5)  # counts as weights


def test_preference_fits_are_unchanged_and_stay_on_the_inputs_device():
    """CPU tensors in: results equal to those of Python lists, on the CPU (the code creates every
    tensor on the device of the item ids, so CUDA ids would keep the work on the GPU)."""
    labels = [1.0, 0.5, 1.0, 0.0]
    from_lists = preferences.fit_bradley_terry(W, L, 3, labels)
    from_tensors = preferences.fit_bradley_terry(torch.tensor(W), torch.tensor(L), 3, torch.tensor(labels))
    assert torch.equal(from_lists, from_tensors) and from_tensors.device.type == "cpu"
    assert torch.equal(preferences.online_elo(W, L, 3, labels), preferences.online_elo(torch.tensor(W), torch.tensor(L),
                                                                                       3, torch.tensor(labels)))
    assert torch.equal(preferences.win_counts(W, L, 3, labels), torch.tensor([1.0, 0.5, 2.5], dtype=torch.float64))
    assert torch.allclose(preferences.expected_wins(from_lists, W, L, 3), preferences.win_counts(W, L, 3, labels),
                          atol=1e-9)


def test_the_trainer_takes_label_1_and_identical_responses():
    labelled = [{**p, "label": 1} for p in pairs(2)]
    history, _ = one_step(labelled, policy=minirl.load_model("sft"))
    same = [{"prompt": "order:", "chosen": " one tea .", "rejected": " one tea ."}]
    history_same, _ = one_step(same, policy=minirl.load_model("sft"), batch_size=1)
    assert history_same[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)  # the policy starts at its reference
    reference = copy.deepcopy(sft())  # a reference of the caller's own, on the policy's device
    assert len(one_step(pairs(1), reference=reference, policy=minirl.load_model("sft"), batch_size=1)[0]) == 1


def test_policy_report_may_measure_a_model_against_itself():
    """Lesson 09 reports the base model against itself (KL 0): allowed, unlike a trainer's reference."""
    report = rlhf.policy_report(sft(), sft(), samples=2, seed=0)
    assert report["kl"] == pytest.approx(0.0, abs=1e-5) and math.isfinite(report["kl_se"])
