"""The tiny world: its files are reproducible, its validators and rewards mean what they say,
and a missing or corrupted data file fails loudly with the command that fixes it."""
import math
import re
import shutil

import pytest

from minirl.core import paths
from minirl.exact import micro
from minirl.lm.tokenizer import load_tokenizer
from minirl.world import datasets, generate, grammar, rewards


def test_rebuild_reproduces_the_committed_world(tmp_path):
    generate.build_world(tmp_path)
    root = paths.data_dir()
    for produced in sorted((tmp_path / "world").iterdir()):
        committed = root / "world" / produced.name
        assert paths.sha256(produced) == paths.sha256(committed), produced.name


@pytest.mark.parametrize("family", grammar.FAMILIES)
def test_every_corpus_document_parses(family):
    docs = datasets.load_corpus(family)
    assert len(docs) == generate.CORPUS_SIZES[family]
    assert all(grammar.VALIDATORS[family](d) for d in docs)


@pytest.mark.parametrize("text", [
    "review: the plot was dull .",
    "review: the plot was very dull but the cast was fun . the ending was great .",
    "q: 0+0= a: 0",
    "q: 99+99= a: 198",
    "order: one coffee .",
    "order: hi , one large matcha latte with oat milk please .",
    "plan: read run swim nap .",
])
def test_validators_accept_well_formed_text(text):
    assert grammar.is_valid(text)


@pytest.mark.parametrize("text", [
    "review: the plot was dull",  # no full stop
    "review: great great great .",  # lexicon spam
    "review: the plot was dull . the cast was fun . the end was great . the film was bad .",  # unknown noun
    "review: the plot was dull and the cast was fun and the film was bad .",  # three clauses in a sentence
    "q: 17+25= a: 042",  # leading zero
    "q: 100+1= a: 101",  # operand out of range
    "q: 17+25= a:",
    "order: one large .",
    "order: hi one coffee .",
    "order: one coffee with milk .",
    "plan: read run swim .",
    "plan: read run swim fly .",
    "hello world",
])
def test_validators_reject_malformed_text(text):
    assert not grammar.is_valid(text)


def test_review_rewards_proxy_vs_gold():
    prompt = "review: the plot was dull"
    good = " but the cast was great . the ending was fun ."
    spam = " great great great great great"
    repeated = " but the cast was great . the ending was great ."
    proxy = rewards.review_proxy_reward([prompt] * 3, [good, spam, repeated])
    gold = rewards.review_gold_reward([prompt] * 3, [good, spam, repeated])
    assert proxy == [2.0, 5.0, 2.0]
    assert gold[0] == pytest.approx(1 / 3)  # (2 positive - 1 negative) / 3 adjectives
    assert gold[1] == -1.0 and gold[2] == -1.0  # spam is malformed, repeats are repetitive


def test_token_rewards_sum_to_the_text_proxy_and_land_on_word_ends():
    enc = load_tokenizer()
    completion = " but the cast was great . the ending was really dull ."
    tokens = enc.encode(completion) + [enc.eot_token, enc.eot_token + 1]
    per_token = rewards.review_token_rewards(enc, tokens)
    assert len(per_token) == len(tokens)
    assert sum(per_token) == rewards.review_proxy_reward([""], [completion])[0] == 0.0
    pieces = [enc.decode([t]) for t in tokens[:-2]]
    assert per_token[pieces.index(" great")] == 1.0 and per_token[pieces.index(" dull")] == -1.0
    # a word split across tokens is scored once, at its last token
    split = enc.encode(" gr") + enc.encode("eat")
    assert len(split) > 1 and rewards.review_token_rewards(enc, split) == [0.0] * (len(split) - 1) + [1.0]


def test_arithmetic_reward_is_a_verifier():
    prompts = ["q: 17+25= a:"] * 4
    assert rewards.arithmetic_reward(prompts, [" 42", " 43", " 042", " 42 ."]) == [1.0, 0.0, 0.0, 0.0]


def test_arithmetic_corpus_is_noisy_and_heldout_pairs_never_appear():
    docs = datasets.load_corpus("arithmetic")
    parsed = [tuple(map(int, grammar.ARITHMETIC.fullmatch(d).groups())) for d in docs]
    correct = sum(a + b == c for a, b, c in parsed) / len(parsed)
    assert abs(correct - generate.ARITHMETIC_P_CORRECT) < 0.01
    seen = {(a, b) for a, b, _ in parsed}
    test = datasets.load_prompts("arithmetic", "test")
    assert len(test) >= 200
    for r in test:
        a, b = map(int, re.findall(r"\d+", r["prompt"]))
        assert (a, b) not in seen and (b, a) not in seen and r["answer"] == a + b


def test_preferences_follow_the_hidden_utility():
    pairs = datasets.load_preferences("train") + datasets.load_preferences("test")
    agree = [rewards.order_utility(p["prompt"] + p["chosen"]) > rewards.order_utility(p["prompt"] + p["rejected"]) for p in pairs]
    expected = sum(max(q, 1 - q) for q in (rewards.preference_probability(p["prompt"] + p["chosen"], p["prompt"] + p["rejected"]) for p in pairs)) / len(pairs)
    assert 0.6 < sum(agree) / len(pairs) and abs(sum(agree) / len(pairs) - expected) < 0.03  # noisy, as Bradley-Terry says


def test_demos_are_soft_optimal():
    plans, probs = generate.expert_plan_distribution()
    assert len(plans) == 6**4 and math.isclose(sum(probs), 1.0)
    demos = datasets.load_demos()
    true = rewards.plan_true_reward([d["prompt"] for d in demos], [d["completion"] for d in demos])
    expected = sum(p * rewards.plan_reward(plan) for plan, p in zip(plans, probs))
    assert abs(sum(true) / len(true) - expected) < 0.1  # the demos' mean reward matches exp(R)/Z
    uniform = sum(rewards.plan_reward(plan) for plan in plans) / len(plans)
    assert expected > uniform + 1.0


def test_micro_world_enumerates_and_scores():
    seqs = micro.completions()
    assert len(seqs) == 1 + 3 + 9 + 27  # EOS after 0, 1, 2 tokens, or 3 tokens truncated
    assert micro.total_reward("x", ("a", "b", micro.EOS)) == pytest.approx(0.3 + 0.0 + 1.0)
    assert micro.total_reward("x", ("a", "b", "b")) == pytest.approx(0.3)  # truncated: no goal reward
    assert micro.step_rewards("y", ("c", "a", micro.EOS)) == pytest.approx([0.3, -0.2, 1.0])


def test_unknown_family_and_split_are_clear_errors():
    with pytest.raises(ValueError, match="unknown family 'poems'"):
        datasets.load_corpus("poems")
    with pytest.raises(ValueError, match="unknown split"):
        datasets.load_prompts("reviews", "validation")


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A private copy of data/ that MINIRL_DATA points at."""
    copy = tmp_path / "data"
    shutil.copytree(paths.data_dir(), copy, ignore=shutil.ignore_patterns("checkpoints"))
    monkeypatch.setenv("MINIRL_DATA", str(copy))
    monkeypatch.setattr(paths, "_verified", {})
    return copy


def test_corrupted_file_names_itself_and_the_fix(data_copy):
    with open(data_copy / "world" / "corpus_orders.txt", "a") as f:
        f.write("order: one free coffee .\n")
    with pytest.raises(paths.DataError, match=r"data/world/corpus_orders.txt does not match.*python -m minirl.world"):
        datasets.load_corpus("orders")


def test_missing_file_names_itself_and_the_fix(data_copy):
    (data_copy / "tokenizer.json").unlink()
    with pytest.raises(paths.DataError, match=r"data/tokenizer.json is missing.*python -m minirl.world"):
        paths.verified_path("tokenizer.json")
    with pytest.raises(paths.DataError, match=r"checkpoints/base.pt is missing.*python -m minirl.train.pretrain"):
        paths.verified_path("checkpoints/base.pt")


def test_missing_data_dir_says_how_to_point_at_it(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIRL_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(paths.DataError, match="MINIRL_DATA"):
        paths.data_dir()
    monkeypatch.delenv("MINIRL_DATA")
    monkeypatch.setattr(paths, "__file__", str(tmp_path / "site-packages" / "minirl" / "paths.py"))
    with pytest.raises(paths.DataError, match="pip install -e"):
        paths.data_dir()


def test_order_distribution_is_the_samplers():
    """Every valid order once, probabilities summing to 1, and the 20,000-order corpus within five
    standard errors of them on every order."""
    texts, probs = generate.order_distribution()
    assert len(texts) == len(set(texts)) == 3 * 4 * 7 * 4 * 3 and all(grammar.is_order(t) for t in texts)
    assert sum(probs) == pytest.approx(1.0)
    corpus = datasets.load_corpus("orders")
    counts = {t: 0 for t in texts}
    for doc in corpus:
        counts[doc] += 1  # a KeyError would mean the sampler wrote an order outside the distribution
    n = len(corpus)
    assert all(abs(counts[t] / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-4 for t, p in zip(texts, probs))


def test_absolute_scores_follow_their_noise_model():
    """Each annotator's scores regress on the utility with a slope near its scale (all positive),
    and the residual sd is near the per-score noise."""
    records = datasets.load_order_scores("train") + datasets.load_order_scores("test")
    assert len(records) == generate.N_SCORED_ORDERS
    for k in range(generate.N_SCORE_ANNOTATORS):
        mine = [(rewards.order_utility(r["prompt"] + r["completion"]), r["score"]) for r in records if r["annotator"] == k]
        mu, ms = sum(u for u, _ in mine) / len(mine), sum(s for _, s in mine) / len(mine)
        slope = sum((u - mu) * (s - ms) for u, s in mine) / sum((u - mu) ** 2 for u, _ in mine)
        resid = [s - ms - slope * (u - mu) for u, s in mine]
        assert slope > 0 and 0.8 < math.sqrt(sum(e * e for e in resid) / len(resid)) < 1.2
