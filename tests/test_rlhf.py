"""Lesson 09's RLHF pieces against references computed apart from them: best-of-N by enumerating
every N-tuple of draws, the SFT loss and sequence log-probs one unpadded sequence at a time, Gao
et al.'s fits on synthetic curves, the tilted optimum by a plain loop, PPO on a reward function
against PPO on the equivalent task, the critic started from a reward model against the reward
model itself, RAFT's winners (and that it fine-tunes on them), the gold win rate and preference
labels, and the KL that `policy_report` and `heldout_report` give against a plain loop."""
import itertools
import math
import random

import pytest
import torch

import minirl
from minirl.exact.mdp import MicroMDP
from minirl.lm import sequences
from minirl.lm.critic import completion_values, from_reward_model
from minirl.lm.reward_head import load_reward_model
from minirl.lm.tokenizer import PAD
from minirl.losses import sft_loss
from minirl.train import best_of_n as bon, overoptimization as over, rlhf, sft
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.train.raft import RAFTConfig, train_raft, winner_tokens
from minirl.world import evaluate, generate, rewards, tasks

TINY_PPO = PPOConfig(steps=2, prompts_per_step=4, group_size=2, epochs=1, minibatches=1)
DEMOS = [{"prompt": "order:", "completion": " one green tea please ."},
         {"prompt": "review: the plot was", "completion": " good"},
         {"prompt": "q: 12+7= a:", "completion": " 19"}]


@pytest.fixture(scope="module")
def enc():
    return minirl.load_tokenizer()


@pytest.fixture(scope="module")
def base():
    """The base model, read only (tests that train load their own)."""
    return minirl.load_model("base")


@pytest.fixture(scope="module")
def rm():
    return load_reward_model("rm_all")


def brute_force_best_of_n(probs, scores, n):
    """Enumerate every ordered n-tuple of draws, keep the first draw of the highest score, and add
    up the tuples' probabilities."""
    probs, scores = probs.tolist(), scores.tolist()
    out = [0.0] * len(probs)
    for draws in itertools.product(range(len(probs)), repeat=n):
        best = draws[0]
        for i in draws[1:]:
            if scores[i] > scores[best]:
                best = i
        out[best] += math.prod(probs[i] for i in draws)
    return torch.tensor(out, dtype=torch.float64)


def kl_loop(p, q):
    """KL(p || q) as a plain float64 sum over the support of p."""
    return sum(a * math.log(a / b) for a, b in zip(p.tolist(), q.tolist()) if a > 0)


def micro_probs(seed=0):
    """A random tabular policy's probabilities of the 40 completions of the micro world's prompt 'x'."""
    mdp = MicroMDP()
    logits = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return mdp.completion_probs(logits, "x"), mdp.returns("x")


# ---------------------------------------------------------------- best-of-N
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("ties", [True, False])
def test_exact_distribution_equals_enumerating_every_tuple_of_draws(n, ties):
    """The micro world's returns take 13 values over 40 completions (ties); without ties they are
    made distinct by a small offset per completion."""
    probs, returns = micro_probs()
    scores = returns if ties else returns + 1e-3 * torch.arange(len(returns), dtype=torch.float64)
    assert (len(set(scores.tolist())) < len(scores)) == ties
    exact = bon.exact_distribution(probs, scores, n)
    assert torch.allclose(exact, brute_force_best_of_n(probs, scores, n), rtol=0, atol=1e-12)
    assert exact.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_kl_divergence_equals_a_plain_loop():
    probs, returns = micro_probs(1)
    picked = bon.exact_distribution(probs, returns, 4)
    assert bon.kl_divergence(picked, probs) == pytest.approx(kl_loop(picked, probs), abs=1e-12)
    assert bon.kl_divergence(probs, probs) == 0.0


def test_kl_bound_by_hand():
    assert bon.kl_bound(1) == 0.0
    assert bon.kl_bound(4) == pytest.approx(math.log(4) - 3 / 4, abs=1e-15)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_kl_of_best_of_n_is_at_most_the_bound(seed, n):
    probs, returns = micro_probs(seed)
    assert kl_loop(bon.exact_distribution(probs, returns, n), probs) <= bon.kl_bound(n)


def test_kl_reaches_the_bound_when_the_mass_is_spread_thinly():
    """Uniform over 1,000 outputs with distinct rewards: KL within 1e-4 of the bound (measured 8e-7 below)."""
    probs = torch.full((1000,), 1e-3, dtype=torch.float64)
    scores = torch.randperm(1000, generator=torch.Generator().manual_seed(0)).double()
    kl = kl_loop(bon.exact_distribution(probs, scores, 4), probs)
    assert kl == pytest.approx(math.log(4) - 3 / 4, abs=1e-4)


@pytest.mark.parametrize("n", [2, 4, 16, 64])
def test_kl_stays_below_log_2_with_two_heavy_outputs(n):
    """Beirami et al. (2024): two outputs of probability 1/2 each. Best-of-n picks the better with
    probability 1 - 2^-n, so KL = (1 - 2^-n) log(2 (1 - 2^-n)) + 2^-n log(2^(1-n)) <= log 2,
    whatever n, while the bound grows like log n."""
    probs, scores = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64)
    kl = kl_loop(bon.exact_distribution(probs, scores, n), probs)
    w = 2.0 ** -n
    assert kl == pytest.approx((1 - w) * math.log(2 * (1 - w)) + w * math.log(2 * w), abs=1e-12)
    assert kl <= min(math.log(2), bon.kl_bound(n))
    if n == 64:
        assert bon.kl_bound(n) - kl > 2.4  # 3.17 against 0.69


def test_select_best_takes_the_first_of_tied_draws():
    """Against a loop over consecutive groups; scores from {0, 1, 2} give many ties."""
    n = 4
    scores = torch.randint(0, 3, (50 * n,), generator=torch.Generator().manual_seed(0)).double()
    expected = []
    for g in range(50):
        group = scores[g * n:(g + 1) * n].tolist()
        expected.append(g * n + group.index(max(group)))
    assert bon.select_best(scores, n).tolist() == expected
    with pytest.raises(ValueError, match="multiple of n=4"):
        bon.select_best(scores[:-1], n)


def test_best_of_n_keeps_each_prompts_highest_scoring_draw(base, enc):
    """Reward: the completion's length in characters. The draws are the sampler's with the same
    seed, consecutive by prompt; the pick is the first longest of each prompt's four."""
    def length(prompts, completions, **kwargs):
        return [float(len(c)) for c in completions]

    prompts, n = ["order:"] * 3, 4
    out = bon.best_of_n(base, prompts, n, length, max_new_tokens=16, generator=torch.Generator().manual_seed(5),
                        tokenizer=enc)
    draws = minirl.sample(base, prompts, max_new_tokens=16, group_size=n, generator=torch.Generator().manual_seed(5),
                          tokenizer=enc).texts
    assert out.rollout.texts == draws and out.scores.tolist() == [len(t) for t in draws]
    for i in range(len(prompts)):
        lengths = [len(t) for t in draws[i * n:(i + 1) * n]]
        j = i * n + lengths.index(max(lengths))
        assert out.best[i].item() == j and out.texts[i] == draws[j] and out.best_scores[i].item() == max(lengths)


def test_plugin_kl_estimate_converges_to_the_exact_kl():
    """20 outputs with distinct rewards, best-of-4: 200k plain draws for the empirical CDF and 50k
    picks (the max of 4 plain draws each). Measured error over seeds 0-4: at most 0.005."""
    g = torch.Generator().manual_seed(0)
    weights = torch.rand(20, generator=g, dtype=torch.float64) ** 3
    probs, scores = weights / weights.sum(), torch.randperm(20, generator=g).double()
    n = 4
    exact = kl_loop(bon.exact_distribution(probs, scores, n), probs)
    plain = scores[torch.multinomial(probs, 200_000, replacement=True, generator=g)]
    picks = scores[torch.multinomial(probs, 50_000 * n, replacement=True, generator=g)].view(-1, n).max(dim=1).values
    assert bon.kl_plugin_estimate(picks, plain, n) == pytest.approx(exact, abs=0.02)


def test_plugin_kl_estimate_counts_a_pick_below_every_plain_draw_as_rare_not_impossible():
    """A pick scoring below all m plain draws gets F = 1/(m+1), not 0: the estimate stays finite
    (before this floor, log 0 was clamped to -690 and swamped the mean)."""
    estimate = bon.kl_plugin_estimate(torch.tensor([0.0, 5.0]), torch.tensor([1.0, 2.0, 3.0]), 2)
    assert estimate == pytest.approx(0.5 * (math.log(2 * 0.25) + math.log(2.0)))


# ---------------------------------------------------------------- SFT
def response_nll_loop(model, items, include_prompt=False):
    """-log p of each target token, one unpadded sequence at a time, log-softmax in float64: the
    response tokens (EOS included), or every token after the first with include_prompt."""
    per_sequence = []
    with torch.no_grad():
        for seq, prompt_len in items:
            logp = torch.log_softmax(model(torch.tensor([seq]))[0].double(), dim=-1)
            start = 0 if include_prompt else prompt_len - 1  # position t predicts token t + 1
            per_sequence.append([-logp[t, seq[t + 1]].item() for t in range(start, len(seq) - 1)])
    return per_sequence


def test_demo_tokens_are_prompt_completion_and_eos(enc):
    items = sequences.demo_tokens(DEMOS, enc)
    for (seq, prompt_len), d in zip(items, DEMOS):
        prompt = enc.encode_ordinary(d["prompt"])
        assert seq == prompt + enc.encode_ordinary(d["completion"]) + [enc.eot_token] and prompt_len == len(prompt)
    with pytest.raises(ValueError, match="non-empty list"):
        sequences.demo_tokens([], enc)
    with pytest.raises(ValueError, match="'prompt' and 'completion'"):
        sequences.demo_tokens([{"prompt": "order:"}], enc)


def test_chosen_demos_are_the_chosen_sides():
    pairs = [{"prompt": "order:", "chosen": " one coffee .", "rejected": " one espresso ."}]
    assert sft.chosen_demos(pairs) == [{"prompt": "order:", "completion": " one coffee ."}]


def test_response_batch_by_hand():
    ids, mask = sequences.response_batch([([1, 2, 3, 4], 2), ([5, 6], 1)], pad=9, device="cpu")
    assert ids.tolist() == [[1, 2, 3, 4], [5, 6, 9, 9]]
    assert mask.tolist() == [[0, 1, 1], [1, 0, 0]]  # targets ids[:, 1:]: 3 and 4, then 6
    ids, mask = sequences.response_batch([([1, 2, 3, 4, 5], 1, [2, 3]), ([5, 6], 1, [])], pad=9, device="cpu")
    assert mask.tolist() == [[1, 0, 0, 1], [1, 0, 0, 0]]  # 3 and 4 an environment wrote: context, not targets


def test_sft_loss_is_the_mean_over_response_tokens_only(base, enc):
    """Ragged demos (prompts of 2, 5 and 9 tokens): the loss is the mean NLL of the response tokens
    and EOS; the mean over every token, prompt included, is a different number."""
    items = sequences.demo_tokens(DEMOS, enc)
    with torch.no_grad():
        loss = sft.sft_loss_on(base, items, enc.encode_single_token(PAD)).item()
    response = [x for seq in response_nll_loop(base, items) for x in seq]
    everything = [x for seq in response_nll_loop(base, items, include_prompt=True) for x in seq]
    assert loss == pytest.approx(sum(response) / len(response), abs=1e-5)
    assert abs(sum(everything) / len(everything) - loss) > 0.1


def test_sft_loss_keeps_junk_on_masked_positions_out():
    """NaN logits on the prompt and the padding reach neither the loss nor its gradient."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 7, (2, 4), generator=g)
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 0]], dtype=torch.float64)
    logits = torch.randn(2, 4, 7, generator=g, dtype=torch.float64)
    logits[mask == 0] = float("nan")
    logits.requires_grad_(True)
    loss = sft_loss(logits, tokens, mask)
    loss.backward()
    picked = [-torch.log_softmax(logits[i, t].detach(), -1)[tokens[i, t]].item()
              for i in range(2) for t in range(4) if mask[i, t]]
    assert loss.item() == pytest.approx(sum(picked) / len(picked), abs=1e-6)  # log-softmax in float32
    assert torch.isfinite(logits.grad).all() and logits.grad[mask == 0].eq(0).all()


def test_sequence_logprobs_equal_the_unbatched_sum_over_response_tokens(base, enc):
    items = sequences.demo_tokens(DEMOS, enc)
    with torch.no_grad():
        batched = sequences.tokenized_logprobs(base, items, enc.encode_single_token(PAD))
    alone = [-sum(seq) for seq in response_nll_loop(base, items)]
    assert batched.tolist() == pytest.approx(alone, abs=1e-4)


def test_train_sft_reports_the_masked_loss_and_lowers_it(enc):
    """One batch holds all three demos, so the first step's loss is the start's mean NLL of their
    response tokens, from the unbatched loop."""
    policy, pad = minirl.load_model("base"), enc.encode_single_token(PAD)
    items = sequences.demo_tokens(DEMOS, enc)
    response = [x for seq in response_nll_loop(policy, items) for x in seq]
    start = sum(response) / len(response)
    history = sft.train_sft(policy, DEMOS, sft.SFTConfig(steps=3, batch_size=3, lr=1e-3), tokenizer=enc)
    assert [h["step"] for h in history] == [0, 1, 2]
    assert history[0]["loss"] == pytest.approx(start, abs=1e-5)
    with torch.no_grad():
        assert sft.sft_loss_on(policy, items, pad).item() < start
    assert not policy.training
    with pytest.raises(TypeError, match="minirl GPT"):
        sft.fit(torch.nn.Linear(2, 2), items, sft.SFTConfig(steps=1), pad)
    with pytest.raises(TypeError, match="SFTConfig"):
        sft.fit(policy, items, {"steps": 1}, pad)


def test_valid_order_distribution_sums_to_one_and_matches_one_order_scored_alone(base, enc):
    texts, probs, mass = rlhf.valid_order_distribution(base, tokenizer=enc)
    assert texts == generate.order_distribution()[0] and probs.dtype == torch.float64
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12) and 0.9 < mass <= 1.0
    i = max(range(len(texts)), key=lambda k: len(texts[k]))  # the longest order
    prompt = enc.encode_ordinary("order:")
    seq = prompt + enc.encode_ordinary(texts[i][len("order:"):]) + [enc.eot_token]
    logp = -sum(response_nll_loop(base, [(seq, len(prompt))])[0])
    assert (probs[i] * mass).item() == pytest.approx(math.exp(logp), rel=1e-4)


# ---------------------------------------------------------------- over-optimization
def gao_by_hand(kl, alpha, beta, form):
    d = [math.sqrt(k) for k in kl]
    second = d if form == "bon" else [math.log(x) if x > 0 else 0.0 for x in d]
    return [x * (alpha - beta * s) for x, s in zip(d, second)]


KLS = [0.0] + [0.05 * 1.4 ** k for k in range(15)]  # 0 to about 5.7 nats


@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_gain_by_hand(form):
    assert over.gao_gain(torch.tensor(KLS, dtype=torch.float64).sqrt(), 1.3, 0.4, form).tolist() == pytest.approx(
        gao_by_hand(KLS, 1.3, 0.4, form), abs=1e-12)


@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_recovers_alpha_and_beta_from_exact_points(form):
    alpha, beta = over.fit_gao(KLS, gao_by_hand(KLS, 1.3, 0.4, form), form)
    assert alpha == pytest.approx(1.3, abs=1e-9) and beta == pytest.approx(0.4, abs=1e-9)


@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_on_noisy_points_is_within_four_standard_errors(form):
    """Gaussian noise of sd 0.05 on the gains: least squares is unbiased with covariance
    sd^2 (X^T X)^-1, X = [d, -d basis(d)] built here by hand; 4 standard errors fail once in 16,000."""
    sd = 0.05
    noise = sd * torch.randn(len(KLS), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    gain = torch.tensor(gao_by_hand(KLS, 1.3, 0.4, form), dtype=torch.float64) + noise
    d = torch.tensor(KLS, dtype=torch.float64).sqrt()
    second = d if form == "bon" else d.log().nan_to_num(neginf=0.0)  # d log d -> 0 at d = 0
    X = torch.stack([d, -d * second], dim=1)
    se = sd * torch.linalg.inv(X.T @ X).diagonal().sqrt()
    alpha, beta = over.fit_gao(KLS, gain, form)
    assert abs(alpha - 1.3) < 4 * se[0].item() and abs(beta - 0.4) < 4 * se[1].item()


def test_fit_gao_refuses_negative_kl_and_a_single_point():
    with pytest.raises(ValueError, match=">= 0"):
        over.fit_gao([0.5, -0.2], [0.1, 0.2], "bon")
    with pytest.raises(ValueError, match="at least two"):
        over.fit_gao([0.5], [0.1], "rl")


def tilted_loop(ref, reward, beta):
    weights = [p * math.exp(r / beta) for p, r in zip(ref.tolist(), reward.tolist())]
    return torch.tensor([w / sum(weights) for w in weights], dtype=torch.float64)


def small_support():
    """Six outputs: reference probabilities, a proxy with a tie, and a gold that disagrees with it."""
    ref = torch.tensor([0.3, 0.25, 0.2, 0.1, 0.1, 0.05], dtype=torch.float64)
    proxy = torch.tensor([0.0, 0.5, 0.5, 1.0, 2.0, 3.0], dtype=torch.float64)
    gold = torch.tensor([0.0, 0.6, 0.4, 1.2, 1.0, -1.0], dtype=torch.float64)
    return ref, proxy, gold


def test_tilted_equals_a_plain_loop():
    ref, proxy, _ = small_support()
    for beta in (0.5, 2.0):
        assert torch.allclose(over.tilted(ref, proxy, beta), tilted_loop(ref, proxy, beta), rtol=0, atol=1e-12)


def test_tilted_is_stable_for_a_tiny_beta():
    """At beta = 1e-4, e^{r/beta} overflows float64 (r = 3 gives e^30000); the optimum is the argmax."""
    ref, proxy, _ = small_support()
    pi = over.tilted(ref, proxy, 1e-4)
    assert torch.isfinite(pi).all() and pi[5].item() == pytest.approx(1.0, abs=1e-12)


def test_support_curve_rows_equal_plain_loops():
    """'rl' rows against the tilted loop, 'bon' rows against enumerating every tuple of draws."""
    ref, proxy, gold = small_support()
    rows = over.support_curve(ref, proxy, gold, betas=(0.5, 2.0), ns=(1, 3))
    assert [(r["kind"], r["knob"]) for r in rows] == [("rl", 0.5), ("rl", 2.0), ("bon", 1), ("bon", 3)]
    for row in rows:
        pi = tilted_loop(ref, proxy, row["knob"]) if row["kind"] == "rl" else brute_force_best_of_n(ref, proxy, row["knob"])
        assert row["kl"] == pytest.approx(kl_loop(pi, ref), abs=1e-12)
        assert row["proxy"] == pytest.approx(sum(a * b for a, b in zip(pi.tolist(), proxy.tolist())), abs=1e-12)
        assert row["gold"] == pytest.approx(sum(a * b for a, b in zip(pi.tolist(), gold.tolist())), abs=1e-12)
    assert rows[2]["kl"] == pytest.approx(0.0, abs=1e-15)  # best-of-1 is the reference
    with pytest.raises(ValueError, match="sum to 1"):
        over.support_curve(ref * 2, proxy, gold, betas=(1.0,))


def test_turnover_on_hand_made_curves():
    """Rows are ordered by KL first: gold 0, 0.5, 1.0 (peak), 0.7 ends 0.3 below its peak."""
    curve = [{"kl": 2.0, "gold": 1.0}, {"kl": 0.0, "gold": 0.0}, {"kl": 3.0, "gold": 0.7}, {"kl": 1.0, "gold": 0.5}]
    assert over.turnover(curve) == pytest.approx(0.3, abs=1e-12)
    assert over.turnover(curve[:2]) == 0.0
    assert math.isnan(over.turnover([]))


# ---------------------------------------------------------------- PPO, the critic, RAFT
def negated_gold(prompts, completions, **kwargs):
    return [-u for u in rewards.order_gold_reward(prompts, completions)]


@pytest.fixture(scope="module")
def ppo_on_task():
    """The base model's parameters after 2 tiny PPO steps on the orders task's own rewards."""
    policy = minirl.load_model("base")
    train_ppo(policy, tasks.orders_task(), TINY_PPO)
    return [p.detach().clone() for p in policy.parameters()]


@pytest.mark.parametrize("reward_fn, same", [(rewards.order_gold_reward, True), (negated_gold, False)])
def test_ppo_on_a_reward_function_equals_ppo_on_the_equivalent_task(ppo_on_task, reward_fn, same):
    """The orders task's reward is the gold utility at the last token: the same update from the same
    start and seed. A different reward function (the gold negated) gives a different one."""
    policy = minirl.load_model("base")
    train_ppo(policy, tasks.orders_task(), TINY_PPO, reward_fn=reward_fn)
    equal = [torch.equal(p, q) for p, q in zip(policy.parameters(), ppo_on_task)]
    assert all(equal) if same else not any(equal)


def test_ppo_callback_runs_once_per_step_and_its_additions_land_in_the_history():
    policy, calls = minirl.load_model("base"), []

    def callback(metrics, model):
        calls.append((metrics["step"], model is policy))
        metrics["probe"] = 10 * metrics["step"]

    history = train_ppo(policy, tasks.orders_task(), TINY_PPO, callback=callback)
    assert calls == [(0, True), (1, True)]
    assert [h["probe"] for h in history] == [0, 10]


def test_critic_from_reward_model_reads_the_normalized_score_at_eos(base, rm, enc):
    """At a finished completion's EOS the value head on the copied trunk gives rm.normalized(rm(ids)).
    `completion_values` at the EOS token is V of the state before it, the text without EOS: the
    reward model's normalized score of that shorter text."""
    rollout = minirl.sample(base, ["order:"], max_new_tokens=16, group_size=4, generator=torch.Generator().manual_seed(0),
                            tokenizer=enc)
    trunk, head = from_reward_model(rm)
    assert trunk is not rm.transformer and all(p.requires_grad for p in (*trunk.parameters(), *head.parameters()))
    prompt = enc.encode_ordinary("order:")
    finished = [i for i in range(4) if not rollout.truncated[i]]
    assert finished
    with torch.no_grad():
        values = completion_values(trunk, head, rollout)
        for i in finished:
            n = int(rollout.mask[i].sum())
            ids = torch.tensor([prompt + rollout.tokens[i, :n].tolist()])
            assert ids[0, -1].item() == enc.eot_token
            at_eos = head(trunk.hidden_states(ids))[0, -1]
            assert at_eos.item() == pytest.approx(rm.normalized(rm(ids)).item(), abs=1e-5)
            assert values[i, n - 1].item() == pytest.approx(rm.normalized(rm(ids[:, :-1])).item(), abs=1e-4)


def test_ppo_with_a_critic_from_the_reward_model_runs(rm):
    history = train_ppo(minirl.load_model("base"), tasks.orders_task(), TINY_PPO, critic_from=rm)
    assert [h["step"] for h in history] == [0, 1] and all(math.isfinite(h["value_loss"]) for h in history)
    with pytest.raises(TypeError, match="critic_from must be a minirl reward model"):
        train_ppo(minirl.load_model("base"), tasks.orders_task(), TINY_PPO, critic_from="x")


def test_raft_runs_two_rounds():
    config = RAFTConfig(rounds=2, prompts_per_round=4, n=2, sft_steps=1, batch_size=4)
    history = train_raft(minirl.load_model("base"), tasks.orders_task(), config)
    assert [h["round"] for h in history] == [0, 1]
    for h in history:
        assert {"round", "reward", "best_reward", "sft_loss", "gold", "valid"} <= set(h)
        assert h["best_reward"] >= h["reward"]


def test_winner_tokens_drop_the_left_padding_and_keep_eos(base, enc):
    """Prompts of 2 and 5 tokens: row 1 has a left-padded prompt and ends with EOS, row 2 is cut at
    4 new tokens and keeps all of them."""
    prompts = ["order:", "review: the plot was"]
    rollout = minirl.sample(base, prompts, max_new_tokens=4, group_size=2, generator=torch.Generator().manual_seed(2),
                            tokenizer=enc)
    best = torch.tensor([1, 2])
    assert not rollout.prompt_mask[1].all() and rollout.truncated[best].tolist() == [False, True]
    for (seq, prompt_len), row in zip(winner_tokens(rollout, best), best.tolist()):
        prompt, tokens = enc.encode_ordinary(rollout.prompts[row]), rollout.tokens[row].tolist()
        completion = tokens[:tokens.index(enc.eot_token) + 1] if enc.eot_token in tokens else tokens
        assert seq == prompt + completion and prompt_len == len(prompt)


def test_raft_fine_tunes_on_each_groups_best_draw(enc):
    """One round, one fine-tuning step on one batch of every winner: its loss (taken before the step)
    is the start's mean NLL of the winners' response tokens, from the unbatched loop. The draws are
    the trainer's (prompts drawn by random.Random(seed), the sampler seeded by seed); the reward is
    the completion's length in characters and the winner of a group its first longest draw, picked
    here by a loop. The first draws and the shortest ones give other losses."""
    def length(prompts, completions, **kwargs):
        return [float(len(c)) for c in completions]

    task, n, groups = tasks.orders_task(), 4, 6
    config = RAFTConfig(rounds=1, prompts_per_round=groups, n=n, sft_steps=1, batch_size=groups, seed=4)
    start = minirl.load_model("base")
    rng = random.Random(config.seed)
    prompts = [rng.choice(task.train_prompts) for _ in range(groups)]
    draws = minirl.sample(start, prompts, max_new_tokens=task.max_new_tokens, group_size=n,
                          generator=torch.Generator().manual_seed(config.seed), tokenizer=enc)
    lengths = [len(t) for t in draws.texts]

    def pick(choose):
        return [g * n + choose(lengths[g * n:(g + 1) * n]) for g in range(groups)]

    def mean_nll(rows):
        items = []
        for i in rows:
            prompt = enc.encode_ordinary(draws.prompts[i])
            items.append((prompt + draws.tokens[i, :int(draws.mask[i].sum())].tolist(), len(prompt)))
        nll = [x for seq in response_nll_loop(start, items) for x in seq]
        return sum(nll) / len(nll)

    winners = pick(lambda group: group.index(max(group)))
    others = {"first": pick(lambda group: 0), "shortest": pick(lambda group: group.index(min(group)))}
    want = mean_nll(winners)
    assert all(abs(mean_nll(rows) - want) > 0.01 for rows in others.values())
    history = train_raft(minirl.load_model("base"), task, config, tokenizer=enc, reward_fn=length)
    assert history[0]["sft_loss"] == pytest.approx(want, abs=1e-4)
    assert history[0]["best_reward"] == pytest.approx(sum(lengths[i] for i in winners) / groups, abs=1e-12)
    assert history[0]["reward"] == pytest.approx(sum(lengths) / len(lengths), abs=1e-12)


# ---------------------------------------------------------------- judging against the gold
def test_win_rate_equals_a_double_loop():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, generator=g).tolist(), torch.randn(7, generator=g).tolist()
    loop = sum(1 / (1 + math.exp(y - x)) for x in a for y in b) / (len(a) * len(b))
    assert rlhf.win_rate(a, b) == pytest.approx(loop, abs=1e-12)
    assert rlhf.win_rate(a, a) == pytest.approx(0.5, abs=1e-15)
    with pytest.raises(ValueError, match="non-empty"):
        rlhf.win_rate([], b)


def test_gold_pairs_follow_the_bradley_terry_probability():
    """Green tea (utility 1.2) against coffee (0.1): the better one is chosen with probability
    sigmoid(1.1) = 0.750; over 2,000 pairs the share lies within 3 standard errors of it."""
    better, worse = " one green tea .", " one coffee ."
    pairs = rlhf.gold_pairs([better, worse], 2000, seed=0)
    p = 1 / (1 + math.exp(-1.1))
    share = sum(r["chosen"] == better for r in pairs) / len(pairs)
    assert abs(share - p) < 3 * math.sqrt(p * (1 - p) / len(pairs))
    assert all(r["prompt"] == "order:" and {r["chosen"], r["rejected"]} == {better, worse} for r in pairs)


def test_gold_pairs_against_another_policy_set_one_text_of_each_side():
    """Iterated RLHF labels the policy's samples against the SFT model's: every pair holds one of each."""
    mine, theirs = [" one tea .", " one coffee ."], [" one green tea please .", " one matcha latte ."]
    for pair in rlhf.gold_pairs(mine, 200, seed=0, against=theirs):
        assert sorted([pair["chosen"] in mine, pair["rejected"] in mine]) == [False, True]


def test_gold_pairs_never_pair_a_text_with_itself():
    texts = [" one coffee .", " one coffee .", " one espresso .", " hello hello", " one green tea please ."]
    assert all(r["chosen"] != r["rejected"] for r in rlhf.gold_pairs(texts, 300, seed=1))
    with pytest.raises(ValueError, match="two different completions"):
        rlhf.gold_pairs([" one coffee .", " one coffee ."], 5, seed=0)


def test_repeats_a_word():
    assert rlhf.repeats_a_word(" one coffee coffee .")
    assert not rlhf.repeats_a_word(" hi , one small coffee , please .")  # punctuation aside
    assert not any(rlhf.repeats_a_word(t[len("order:"):]) for t in generate.order_distribution()[0])


def test_policy_report_against_its_own_samples(base, enc):
    """Base against itself: KL 0 up to rounding; gold, valid, length, repetition, truncation and the
    proxy (a length-in-characters reward) recomputed from the same seeded samples."""
    def length(prompts, completions, **kwargs):
        return [float(len(c)) for c in completions]

    report = rlhf.policy_report(base, base, samples=32, seed=7, reward_fn=length, tokenizer=enc)
    out = minirl.sample(base, ["order:"], max_new_tokens=16, group_size=32, generator=torch.Generator().manual_seed(7),
                        tokenizer=enc)
    gold = [rewards.order_utility("order:" + t) for t in out.texts]
    assert report["gold"] == pytest.approx(sum(gold) / 32, abs=1e-12)
    assert report["valid"] == pytest.approx(sum(u > -2 for u in gold) / 32, abs=1e-12)
    assert report["length"] == pytest.approx(out.mask.sum().item() / 32, abs=1e-12)
    assert report["repetition"] == sum(rlhf.repeats_a_word(t) for t in out.texts) / 32
    assert report["truncated"] == out.truncated.float().mean().item()
    assert report["proxy"] == pytest.approx(sum(len(t) for t in out.texts) / 32, abs=1e-12)
    assert abs(report["kl"]) < 1e-4 and report["kl_se"] < 1e-4


def plain_kl_samples(policy, reference, rollout, enc) -> list[float]:
    """sum_t log pi - log pi_ref over each sampled completion (EOS included when it ended), both
    log-probs recomputed one unpadded sequence at a time in float64."""
    out = []
    for i in range(rollout.tokens.size(0)):
        prompt = enc.encode_ordinary(rollout.prompts[i])
        item = [(prompt + rollout.tokens[i, :int(rollout.mask[i].sum())].tolist(), len(prompt))]
        out.append(sum(response_nll_loop(reference, item)[0]) - sum(response_nll_loop(policy, item)[0]))
    return out


def shaken_sft(scale: float = 0.02):
    """The SFT model with seeded noise on every parameter: a policy far enough from the base that
    the KL estimate is large (about 3 nats on 16 samples) and its sign unmistakable."""
    model = minirl.load_model("sft")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return model


def test_policy_report_kl_is_the_mean_log_ratio_of_the_policy_to_the_reference(enc):
    """A shaken SFT model against the base: KL(pi || pi_ref) estimated as the mean over the report's
    samples of sum_t log pi - log pi_ref, recomputed here; clearly positive, so a flipped sign cannot
    pass."""
    policy, reference = shaken_sft(), minirl.load_model("base")
    report = rlhf.policy_report(policy, reference, samples=16, seed=11, tokenizer=enc)
    out = minirl.sample(policy, ["order:"], max_new_tokens=16, group_size=16, generator=torch.Generator().manual_seed(11),
                        tokenizer=enc)
    kl = plain_kl_samples(policy, reference, out, enc)
    want = sum(kl) / 16
    assert want > 0.5 and report["kl"] == pytest.approx(want, abs=1e-3)
    sd = math.sqrt(sum((x - want) ** 2 for x in kl) / 15)
    assert report["kl_se"] == pytest.approx(sd / 4, abs=1e-3)
    swapped = rlhf.policy_report(reference, policy, samples=16, seed=11, tokenizer=enc)["kl"]
    assert swapped > 0  # KL(pi_ref || pi) on the base's own samples: positive too, not report["kl"] negated


def test_heldout_report_kl_is_the_mean_log_ratio_of_the_model_to_the_reference(enc):
    """`heldout_report`'s KL: a shaken SFT model against the base on the orders task's held-out prompt."""
    policy, reference, task = shaken_sft(), minirl.load_model("base"), tasks.orders_task()
    report = evaluate.heldout_report(policy, task, reference=reference, samples=16, seed=5, tokenizer=enc)
    out = minirl.sample(policy, task.test_prompts, max_new_tokens=task.max_new_tokens, group_size=16,
                        generator=torch.Generator().manual_seed(5), tokenizer=enc)
    kl = plain_kl_samples(policy, reference, out, enc)
    assert sum(kl) / len(kl) > 0.5 and report["kl"] == pytest.approx(sum(kl) / len(kl), abs=1e-3)
