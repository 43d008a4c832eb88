"""Lesson 11's DPO pieces against references computed apart from them: the DPO, IPO and SimPO
losses against their closed forms written with `math` one pair at a time (and DPO against the
Bradley-Terry loss of the implicit rewards); sequence log-probs against a plain loop over ragged
rows; the micro world's DPO optimum against the RLHF optimum from `minirl.exact.mdp`'s enumeration;
hard-label drift against -log pi_ref(winners); IPO's minimizer against the normal equations of
the comparison graph solved directly; the trainer's first step at log 2; SimPO's per-token means,
online DPO's frozen reference and the evaluations' KL against plain loops over unpadded sequences."""
import copy
import math

import pytest
import torch

import minirl
from minirl import losses
from minirl.exact import micro_dpo
from minirl.exact.mdp import MicroMDP
from minirl.lm import sequences
from minirl.lm.sequences import pair_tokens
from minirl.lm.tokenizer import PAD
from minirl.ops import sequence_logprob
from minirl.train import dpo, rlhf
from minirl.train.dpo import DPOConfig, train_dpo
from minirl.world import datasets, rewards


def logps(seed: int, n: int = 6) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [-5 * torch.rand(n, generator=g, dtype=torch.float64) for _ in range(4)]


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x > -30 else x


def plain_dpo(pc, pr, rc, rr, beta, loss_type, eps):
    """One pair at a time from the papers' formulas: h = log-ratio margin."""
    total = 0.0
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist()):
        h = (a - c) - (b - d)
        if loss_type == "sigmoid":
            total += -(1 - eps) * log_sigmoid(beta * h) - eps * log_sigmoid(-beta * h)
        else:
            total += (h - (1 - 2 * eps) / (2 * beta)) ** 2
    return total / len(pc)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
@pytest.mark.parametrize("beta,eps", [(0.1, 0.0), (0.5, 0.2), (2.0, 0.45)])
def test_dpo_loss_matches_closed_form(loss_type, beta, eps):
    pc, pr, rc, rr = logps(int(beta * 10))
    loss, r_c, r_r = losses.dpo_loss(pc, pr, rc, rr, beta, loss_type, eps)
    assert loss.item() == pytest.approx(plain_dpo(pc, pr, rc, rr, beta, loss_type, eps), abs=1e-12)
    assert torch.allclose(r_c, beta * (pc - rc)) and torch.allclose(r_r, beta * (pr - rr))
    assert not r_c.requires_grad


def test_dpo_is_bradley_terry_on_the_implicit_reward():
    """Conservative DPO with eps = the Bradley-Terry loss of beta*log(pi/pi_ref) with label 1 - eps."""
    pc, pr, rc, rr = logps(3)
    for eps in (0.0, 0.1, 0.31):
        loss = losses.dpo_loss(pc, pr, rc, rr, 0.7, label_smoothing=eps)[0]
        bt = losses.bradley_terry_loss(0.7 * (pc - rc), 0.7 * (pr - rr), torch.full_like(pc, 1 - eps))
        assert loss.item() == pytest.approx(bt.item(), abs=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_dpo_loss_is_log_2_when_the_policy_is_the_reference(eps):
    pc, pr, _, _ = logps(4)
    loss, r_c, r_r = losses.dpo_loss(pc, pr, pc.clone(), pr.clone(), 0.1, label_smoothing=eps)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-12)
    assert r_c.eq(0).all() and r_r.eq(0).all()
    assert losses.preference_accuracy(r_c, r_r) == 0.5  # a tie, not a miss


def test_dpo_gradient_is_the_weighted_log_ratio_gradient():
    """d loss / d log pi(y_c) = -beta sigmoid(-beta h) / B (the paper's weight: larger when the
    implicit reward orders the pair wrongly); the rejected side gets the opposite."""
    pc, pr, rc, rr = logps(5)
    pc.requires_grad_(True)
    pr.requires_grad_(True)
    beta = 0.5
    losses.dpo_loss(pc, pr, rc, rr, beta)[0].backward()
    h = (pc - rc - pr + rr).detach()
    want = torch.tensor([-beta / (1 + math.exp(beta * x)) / len(h) for x in h.tolist()], dtype=torch.float64)
    assert torch.allclose(pc.grad, want, atol=1e-12) and torch.allclose(pr.grad, -want, atol=1e-12)


def test_simpo_matches_closed_form():
    pc, pr, _, _ = logps(6)
    beta, gamma = 2.0, 0.5
    loss, r_c, r_r = losses.simpo_loss(pc / 4, pr / 7, beta, gamma)
    want = sum(-log_sigmoid(beta * (a / 4 - b / 7) - gamma) for a, b in zip(pc.tolist(), pr.tolist())) / len(pc)
    assert loss.item() == pytest.approx(want, abs=1e-12)
    assert torch.allclose(r_c, beta * pc / 4) and torch.allclose(r_r, beta * pr / 7)


def test_preference_accuracy_counts_ties_as_half():
    c = torch.tensor([1.0, 0.0, 2.0, -1.0])
    r = torch.tensor([0.0, 0.0, 3.0, -1.0])
    assert losses.preference_accuracy(c, r) == pytest.approx((1 + 0.5 + 0 + 0.5) / 4)


def test_dpo_loss_rejects_bad_input():
    pc, pr, rc, rr = logps(7)
    with pytest.raises(ValueError, match="one shape"):
        losses.dpo_loss(pc, pr[:3], rc, rr, 0.1)
    with pytest.raises(ValueError, match="beta"):
        losses.dpo_loss(pc, pr, rc, rr, 0.0)
    with pytest.raises(ValueError, match="loss_type"):
        losses.dpo_loss(pc, pr, rc, rr, 0.1, loss_type="hinge")
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.dpo_loss(pc, pr, rc, rr, 0.1, label_smoothing=0.6)
    with pytest.raises(ValueError, match="no pairs"):
        losses.dpo_loss(*[x[:0] for x in (pc, pr, rc, rr)], 0.1)
    with pytest.raises(TypeError):
        losses.dpo_loss(pc.long(), pr, rc, rr, 0.1)


# ---------------------------------------------------------------- sequence log-probs
def test_sequence_logprob_matches_a_loop_over_ragged_rows():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    lengths = [6, 1, 3, 4]
    mask = torch.tensor([[1.0] * n + [0.0] * (6 - n) for n in lengths], dtype=torch.float64)
    x[1, 3] = float("nan")  # junk on padding never reaches the result
    for average in (False, True):
        want = [sum(x[i, :n].tolist()) / (n if average else 1) for i, n in enumerate(lengths)]
        got = sequence_logprob(x, mask, average)
        assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), atol=1e-12)


def test_model_sequence_logprobs_match_one_unpadded_sequence_at_a_time():
    model, enc = minirl.load_model("sft"), minirl.load_tokenizer()
    pairs = datasets.load_preferences("test")[:5]
    items = [(c, n) for c, n, _, _ in pair_tokens(pairs, enc)] + [(r, n) for _, n, r, _ in pair_tokens(pairs, enc)]
    with torch.no_grad():
        for average in (False, True):
            got = sequences.tokenized_logprobs(model, items, enc.encode_single_token(PAD), average)
            for k, (ids, n) in enumerate(items):
                logp = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0], dim=-1)
                terms = [logp[t - 1, ids[t]].item() for t in range(n, len(ids))]
                want = sum(terms) / (len(terms) if average else 1)
                assert got[k].item() == pytest.approx(want, abs=1e-4)


# ---------------------------------------------------------------- the micro world, exactly
@pytest.fixture(scope="module")
def micro():
    """A random tabular reference, prompt 'x': its completions' log-probs and returns, and the
    RLHF optimum at beta from mdp's closed form (enumeration, not micro_dpo)."""
    mdp, beta = MicroMDP(), 0.5
    ref_logits = 0.5 * torch.randn(mdp.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ref = mdp.completion_probs(ref_logits, "x").log()
    return ref, mdp.returns("x"), beta, mdp.optimal_completion_probs(ref_logits, beta, "x")


@pytest.mark.parametrize("kind,steps", [("all", 100), ("star", 2000)])
def test_soft_label_dpo_reaches_the_rlhf_optimum(micro, kind, steps):
    ref, r, beta, optimum = micro
    i, j = micro_dpo.pair_graph(len(r), kind)
    y = micro_dpo.bt_labels(r, i, j)
    lr = micro_dpo.step_size(i, j, len(r), beta**2 / 4)
    end = micro_dpo.fit(lambda lp: micro_dpo.dpo_pair_loss(lp, ref, i, j, y, beta), ref, lr, steps, [steps])[steps]
    assert (end.exp() - optimum).abs().max() < 1e-6
    assert torch.allclose(micro_dpo.rlhf_optimum(ref, r, beta).exp(), optimum, atol=1e-12)


def test_soft_labels_on_a_disconnected_graph_miss_the_optimum(micro):
    ref, r, beta, optimum = micro
    i, j = micro_dpo.pair_graph(len(r), "split")
    lr = micro_dpo.step_size(i, j, len(r), beta**2 / 4)
    loss = lambda lp: micro_dpo.dpo_pair_loss(lp, ref, i, j, micro_dpo.bt_labels(r, i, j), beta)  # noqa: E731
    end = micro_dpo.fit(loss, ref, lr, 500, [500])[500]
    half = torch.arange(len(r)) < len(r) // 2
    # inside each component the optimum conditioned on it is reached ...
    for part in (half, ~half):
        got, want = torch.log_softmax(end[part], 0), torch.log_softmax(optimum.log()[part], 0)
        assert (got - want).abs().max() < 1e-6
    # ... but moving mass between the components leaves the loss unchanged: the data cannot decide
    moved = torch.log_softmax(end + 1.0 * half, 0)
    assert loss(moved).item() == pytest.approx(loss(end).item(), abs=1e-12)
    assert (end.exp() - optimum).abs().max() > 0.01


def test_hard_label_dpo_drifts_to_the_winners(micro):
    ref, r, beta, _ = micro
    i, j = micro_dpo.pair_graph(len(r), "all")
    w, l = micro_dpo.hard_pairs(r, i, j)
    winners = torch.tensor(sorted(set(range(len(r))) - set(l.tolist())))
    assert r[winners].eq(r.max()).all()
    lr = micro_dpo.step_size(w, l, len(r), beta**2 / 4)
    record = [100, 1000, 5000]
    kept = micro_dpo.fit(lambda lp: micro_dpo.dpo_pair_loss(lp, ref, w, l, torch.ones(len(w), dtype=torch.float64), beta),
                         ref, lr, 5000, record)
    limit = -torch.logsumexp(ref[winners], 0).item()
    gaps = [limit - micro_dpo.kl(kept[s], ref) for s in record]
    reverse = [micro_dpo.kl(ref, kept[s]) for s in record]
    assert gaps[0] > gaps[1] > gaps[2] > 0 and gaps[2] < 0.01
    assert reverse[0] < reverse[1] < reverse[2] and reverse[2] > 10 * limit
    # inside the winners the reference's proportions are kept
    inside = kept[5000][winners] - ref[winners]
    assert (inside - inside[0]).abs().max() < 1e-9


def test_ipo_settles_at_the_least_squares_solution(micro):
    ref, r, beta, _ = micro
    w, l = micro_dpo.hard_pairs(r, *micro_dpo.pair_graph(len(r), "all"))
    end = micro_dpo.fit(lambda lp: micro_dpo.ipo_pair_loss(lp, ref, w, l, beta), ref,
                        micro_dpo.step_size(w, l, len(r), 2.0), 300, [300])[300]
    closed = micro_dpo.ipo_closed_form(ref, w, l, beta)
    assert (end.exp() - closed.exp()).abs().max() < 1e-9
    # the normal equations L u = (1/(2 beta)) (wins - losses), solved with the first u pinned to 0
    n = len(r)
    lap, b = torch.zeros(n, n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for a, c in zip(w.tolist(), l.tolist()):
        lap[a, a] += 1
        lap[c, c] += 1
        lap[a, c] -= 1
        lap[c, a] -= 1
        b[a] += 1 / (2 * beta)
        b[c] -= 1 / (2 * beta)
    u = torch.zeros(n, dtype=torch.float64)
    u[1:] = torch.linalg.solve(lap[1:, 1:], b[1:])
    assert torch.allclose(closed, torch.log_softmax(ref + u, dim=0), atol=1e-10)


# ---------------------------------------------------------------- the trainer
def test_label_noise_is_the_mean_flip_probability():
    pairs = [{"prompt": "order:", "chosen": " one green tea .", "rejected": " one green tea please ."},
             {"prompt": "order:", "chosen": " one coffee .", "rejected": " one coffee ."}]
    u = [rewards.order_utility("order:" + p[s]) for p in pairs for s in ("chosen", "rejected")]
    want = (1 / (1 + math.exp(abs(u[0] - u[1]))) + 0.5) / 2
    assert dpo.label_noise(pairs) == pytest.approx(want, abs=1e-12)


def test_trainer_starts_at_log_2_and_learns_its_pairs():
    pairs = datasets.load_preferences("train")[:16]
    config = DPOConfig(steps=6, batch_size=16, beta=1.0, lr=3e-4, eval_samples=8)
    policy = minirl.load_model("sft")
    history, evals = train_dpo(policy, pairs, config)
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert history[0]["accuracy"] == 0.5 and abs(history[0]["margin"]) < 1e-5
    assert history[-1]["loss"] < history[0]["loss"] - 0.05 and history[-1]["margin"] > 0.1
    # the chosen side really gained on the rejected one, measured apart from the trainer's own pairing
    enc = minirl.load_tokenizer()
    pad, tokens = enc.encode_single_token(PAD), pair_tokens(pairs, enc)
    chosen, rejected = [(c, n) for c, n, _, _ in tokens], [(r, n) for _, n, r, _ in tokens]
    with torch.no_grad():
        log_ratio = [sequences.tokenized_logprobs(policy, side, pad) - sequences.tokenized_logprobs(minirl.load_model("sft"), side, pad)
                     for side in (chosen, rejected)]
    assert (log_ratio[0] - log_ratio[1]).mean() > 0.1
    assert [e["step"] for e in evals] == [0, 6] and set(evals[0]) >= {"gold", "valid", "kl"}
    again, _ = train_dpo(minirl.load_model("sft"), pairs, config)
    assert again == history  # seeded: the same run twice


@pytest.mark.parametrize("loss_type", ["ipo", "simpo"])
def test_trainer_runs_every_loss(loss_type):
    pairs = datasets.load_preferences("train")[:8]
    history, _ = train_dpo(minirl.load_model("sft"), pairs,
                           DPOConfig(steps=2, batch_size=8, loss_type=loss_type, eval_samples=8))
    assert all(math.isfinite(h["loss"]) for h in history)


def test_online_trainer_labels_its_own_pairs():
    history, evals = train_dpo(minirl.load_model("sft"), None,
                               DPOConfig(steps=2, batch_size=4, online_every=1, eval_samples=8, lr=1e-4))
    assert len(history) == 2 and history[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)


def test_trainer_rejects_bad_input():
    model = minirl.load_model("sft")
    with pytest.raises(ValueError, match="online DPO labels its own pairs"):
        train_dpo(model, datasets.load_preferences("train")[:4], DPOConfig(online_every=2))
    with pytest.raises(ValueError, match="non-empty list"):
        train_dpo(model, [], DPOConfig())
    with pytest.raises(TypeError, match="minirl GPT"):
        train_dpo("sft", datasets.load_preferences("train")[:4])
    with pytest.raises(ValueError, match="loss_type"):
        DPOConfig(loss_type="kto")
    with pytest.raises(ValueError, match="steps"):
        DPOConfig(steps=0)


def plain_logprob(model, prompt: list[int], completion: list[int], average: bool = False) -> float:
    """log model(completion | prompt), or its per-token mean, of one unpadded sequence, in float64."""
    ids = prompt + completion
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0].double(), dim=-1)
    terms = [logp[t - 1, ids[t]].item() for t in range(len(prompt), len(ids))]
    return sum(terms) / (len(terms) if average else 1)


def plain_pair_logprobs(model, pairs, enc, average: bool = False) -> dict[str, list[float]]:
    """Each side's log-prob (completion + EOS), one pair at a time."""
    return {side: [plain_logprob(model, enc.encode_ordinary(p["prompt"]),
                                 enc.encode_ordinary(p[side]) + [enc.eot_token], average) for p in pairs]
            for side in ("chosen", "rejected")}


def mean(xs) -> float:
    return sum(xs) / len(xs)


def test_simpo_trainer_scores_each_side_by_its_per_token_mean():
    """SimPO's reward is beta times the per-token MEAN log-prob, whatever average_logprobs says: the
    first step's metrics and loss against the closed form on means computed one pair at a time. The
    pairs' sides differ in length, so summed log-probs give other numbers."""
    enc = minirl.load_tokenizer()
    pairs = datasets.load_preferences("train")[:4]
    policy, beta, gamma = minirl.load_model("sft"), 2.0, 0.5
    avg = plain_pair_logprobs(policy, pairs, enc, average=True)
    total = plain_pair_logprobs(policy, pairs, enc)
    assert max(abs(a - b) for a, b in zip(avg["chosen"], total["chosen"])) > 1.0
    history, _ = train_dpo(policy, pairs, DPOConfig(steps=1, batch_size=4, loss_type="simpo", beta=beta,
                                                    simpo_gamma=gamma, average_logprobs=False, eval_samples=8))
    h = history[0]
    assert h["chosen_logps"] == pytest.approx(mean(avg["chosen"]), abs=1e-4)
    assert h["rejected_logps"] == pytest.approx(mean(avg["rejected"]), abs=1e-4)
    assert h["chosen_rewards"] == pytest.approx(beta * mean(avg["chosen"]), abs=1e-4)
    assert h["rejected_rewards"] == pytest.approx(beta * mean(avg["rejected"]), abs=1e-4)
    want = mean([-log_sigmoid(beta * (c - r) - gamma) for c, r in zip(avg["chosen"], avg["rejected"])])
    assert h["loss"] == pytest.approx(want, abs=1e-4)


def test_online_dpo_scores_fresh_pairs_against_the_frozen_start():
    """Online DPO's second step labels pairs of the moved policy's own samples (drawn as the trainer
    draws them: 2 * batch_size samples seeded seed + step, paired by `rlhf.gold_pairs`); its implicit
    rewards are beta * log(pi / pi_ref) with pi_ref the policy AT THE START, here recomputed one pair
    at a time. A reference recomputed from the moving policy would read 0 there."""
    enc = minirl.load_tokenizer()
    start, policy, snapshots = minirl.load_model("sft"), minirl.load_model("sft"), []
    config = DPOConfig(steps=2, batch_size=4, online_every=1, beta=1.0, lr=1e-3, eval_samples=8, seed=3)
    history, _ = train_dpo(policy, None, config, callback=lambda m, model: snapshots.append(copy.deepcopy(model)))
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)
    moved = snapshots[0]  # the policy after step 1: it sampled and scored step 2's pairs
    pairs = rlhf.gold_pairs(rlhf.order_samples(moved, 8, config.seed + 1, enc).texts, 4, config.seed + 1)
    now, ref = plain_pair_logprobs(moved, pairs, enc), plain_pair_logprobs(start, pairs, enc)
    ratio = {side: [a - b for a, b in zip(now[side], ref[side])] for side in now}
    assert max(abs(x) for x in ratio["chosen"] + ratio["rejected"]) > 0.05  # step 1 moved the policy
    h = history[1]
    assert h["chosen_rewards"] == pytest.approx(config.beta * mean(ratio["chosen"]), abs=1e-4)
    assert h["rejected_rewards"] == pytest.approx(config.beta * mean(ratio["rejected"]), abs=1e-4)
    want = mean([-log_sigmoid(config.beta * (c - r)) for c, r in zip(ratio["chosen"], ratio["rejected"])])
    assert h["loss"] == pytest.approx(want, abs=1e-4)


def test_evaluations_report_kl_of_the_policy_from_the_reference():
    """The SFT model trained against the base as reference: the first evaluation's KL is the mean over
    its samples (`eval_samples` of 'order:', seeded seed + 123) of sum_t log pi - log pi_ref, here
    summed one unpadded sequence at a time; the SFT model has moved away from the base, so the
    estimate is clearly positive and a flipped sign cannot pass."""
    enc = minirl.load_tokenizer()
    policy, reference = minirl.load_model("sft"), minirl.load_model("base")
    config = DPOConfig(steps=1, batch_size=4, eval_samples=16, seed=5)
    out = minirl.sample(policy, [rlhf.PROMPT], max_new_tokens=rlhf.MAX_NEW_TOKENS, group_size=16,
                        generator=torch.Generator().manual_seed(config.seed + 123), tokenizer=enc)
    prompt = enc.encode_ordinary(rlhf.PROMPT)
    rows = [out.tokens[i, :int(out.mask[i].sum())].tolist() for i in range(16)]
    want = mean([plain_logprob(policy, prompt, c) - plain_logprob(reference, prompt, c) for c in rows])
    assert want > 0.1
    _, evals = train_dpo(policy, datasets.load_preferences("train")[:4], config, reference=reference)
    assert evals[0]["step"] == 0 and evals[0]["kl"] == pytest.approx(want, abs=1e-3)
