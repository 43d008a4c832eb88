"""The seeded generator of the tiny world: writes every corpus, prompt set and label into data/.

    python -m minirl.world            # rewrites data/world/*, data/tokenizer.json, data/MANIFEST.json
                                      # (under $MINIRL_DATA instead of data/ when it is set)

The output is a pure function of SEED, so a rebuild reproduces the committed files byte for byte
(the tokenizer included, and hence the checkpoints stay valid).

Files (one JSON object or one text per line):

    world/corpus_<family>.txt     pretraining documents, one per line (prompt + completion, no EOS)
    world/prompts_<family>.jsonl  RL / evaluation prompts with a train/test split
    world/order_prefs.jsonl       Bradley-Terry preference pairs over orders (noisy labels)
    world/plan_demos.jsonl        expert plans, soft-optimal for the hidden plan reward
    world/order_scores.jsonl      absolute scores of single orders by noisy annotators (lesson 08)

Files added after the first release draw from random streams of their own (`stream`), so adding
one leaves every earlier file byte for byte what it was.
"""
from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

from . import grammar, rewards

__all__ = ["SEED", "CORPUS_SIZES", "ARITHMETIC_P_CORRECT", "ARITHMETIC_ERRORS", "N_HELDOUT_PAIRS",
           "N_TRAIN_ARITHMETIC_PROMPTS", "N_PREFERENCE_PAIRS", "N_DEMOS", "N_SCORED_ORDERS", "N_SCORE_ANNOTATORS",
           "SCORE_OFFSET_SD", "SCORE_LOG_SCALE_SD", "SCORE_NOISE_SD", "TEST_FRACTION", "MOODS", "MOOD_WEIGHTS",
           "order_distribution", "expert_plan_distribution", "build_world", "main"]

SEED = 1234
CORPUS_SIZES = {"reviews": 40_000, "arithmetic": 80_000, "orders": 20_000, "plans": 20_000}
ARITHMETIC_P_CORRECT = 0.4  # the corpus is right 40% of the time ...
ARITHMETIC_ERRORS = (-10, -1, 1, 10)  # ... and otherwise off by one of these
N_HELDOUT_PAIRS = 300
N_TRAIN_ARITHMETIC_PROMPTS = 2000
N_PREFERENCE_PAIRS = 3000
N_DEMOS = 2000
N_SCORED_ORDERS = 3000
# The absolute-score annotators (fixed before any reward model was trained on them): annotator k
# reports offset_k + scale_k * u + noise for an order of utility u, with offset_k ~ N(0, 1),
# scale_k ~ LogNormal(0, 0.5) and noise ~ N(0, 1) per score; each order goes to one of them at random.
N_SCORE_ANNOTATORS = 8
SCORE_OFFSET_SD, SCORE_LOG_SCALE_SD, SCORE_NOISE_SD = 1.0, 0.5, 1.0
TEST_FRACTION = 0.25

# Review moods: the probability of a positive / neutral / negative adjective in each clause.
MOODS = {"positive": (0.75, 0.15, 0.10), "negative": (0.10, 0.15, 0.75), "mixed": (0.4, 0.2, 0.4)}
MOOD_WEIGHTS = {"positive": 0.4, "negative": 0.4, "mixed": 0.2}


# ---------------------------------------------------------------- reviews
def sample_review(rng: random.Random) -> str:
    mood = rng.choices(list(MOOD_WEIGHTS), weights=list(MOOD_WEIGHTS.values()))[0]
    n_clauses = rng.choice([1, 2, 2, 3, 3])
    nouns = rng.sample(grammar.NOUNS, n_clauses)
    used: set[str] = set()
    clauses, signs = [], []
    for noun in nouns:
        pool = rng.choices([grammar.POSITIVE, grammar.NEUTRAL, grammar.NEGATIVE], weights=MOODS[mood])[0]
        adjective = rng.choice([a for a in pool if a not in used])
        used.add(adjective)
        signs.append(rewards.LEXICON.get(adjective, 0.0))
        words = ["the", noun, "was"]
        if rng.random() < 0.25:
            words.append(rng.choice(grammar.INTENSIFIERS))
        clauses.append(" ".join(words + [adjective]))
    # group clauses into sentences of one or two clauses
    sentences, i = [], 0
    while i < n_clauses:
        if i + 1 < n_clauses and rng.random() < 0.6:
            joiner = "but" if signs[i] * signs[i + 1] < 0 else "and"
            sentences.append(f"{clauses[i]} {joiner} {clauses[i + 1]} .")
            i += 2
        else:
            sentences.append(f"{clauses[i]} .")
            i += 1
    return "review: " + " ".join(sentences)


def review_prompts() -> list[dict]:
    """Every possible first clause, as a prompt, tagged by the sign of its adjective."""
    prompts = []
    for noun, intensifier, adjective in itertools.product(grammar.NOUNS, ("",) + grammar.INTENSIFIERS, grammar.ADJECTIVES):
        start = rewards.LEXICON.get(adjective, 0.0)
        if start == 0:
            continue
        words = ["review:", "the", noun, "was"] + ([intensifier] if intensifier else []) + [adjective]
        prompts.append({"prompt": " ".join(words), "start": "positive" if start > 0 else "negative"})
    return prompts


# ---------------------------------------------------------------- arithmetic
def arithmetic_text(a: int, b: int, c: int) -> str:
    return f"q: {a}+{b}= a: {c}"


def arithmetic_prompt(a: int, b: int) -> str:
    return f"q: {a}+{b}= a:"


def heldout_pairs(rng: random.Random) -> list[tuple[int, int]]:
    """Operand pairs kept out of the corpus in both orders."""
    unordered = [(a, b) for a in range(grammar.MAX_OPERAND + 1) for b in range(a, grammar.MAX_OPERAND + 1)]
    return [p if rng.random() < 0.5 else p[::-1] for p in rng.sample(unordered, N_HELDOUT_PAIRS)]


def noisy_answer(rng: random.Random, a: int, b: int) -> int:
    if rng.random() < ARITHMETIC_P_CORRECT:
        return a + b
    return a + b + rng.choice([e for e in ARITHMETIC_ERRORS if a + b + e >= 0])


# ---------------------------------------------------------------- orders
def sample_order(rng: random.Random) -> str:
    words = ["order:"]
    if rng.random() < 0.3:
        words += [rng.choice(grammar.GREETINGS), ","]
    words.append("one")
    if rng.random() < 0.6:
        words.append(rng.choice(grammar.SIZES))
    words.append(rng.choice(grammar.DRINKS))
    if rng.random() < 0.4:
        words += ["with", rng.choice(grammar.MILKS), "milk"]
    if rng.random() < 0.5:
        words.append(rng.choice(grammar.POLITE))
    return " ".join(words + ["."])


def order_distribution() -> tuple[list[str], list[float]]:
    """Every order `sample_order` can write and its exact probability (1,008 valid orders)."""
    greetings = [([], 0.7)] + [([g, ","], 0.3 / len(grammar.GREETINGS)) for g in grammar.GREETINGS]
    sizes = [([], 0.4)] + [([s], 0.6 / len(grammar.SIZES)) for s in grammar.SIZES]
    drinks = [([d], 1 / len(grammar.DRINKS)) for d in grammar.DRINKS]
    milks = [([], 0.6)] + [(["with", m, "milk"], 0.4 / len(grammar.MILKS)) for m in grammar.MILKS]
    polite = [([], 0.5)] + [([p], 0.5 / len(grammar.POLITE)) for p in grammar.POLITE]
    texts, probs = [], []
    for parts in itertools.product(greetings, sizes, drinks, milks, polite):
        g, s, d, m, p = (words for words, _ in parts)
        texts.append(" ".join(["order:", *g, "one", *s, *d, *m, *p, "."]))
        probs.append(math.prod(q for _, q in parts))
    return texts, probs


def preference_pair(rng: random.Random) -> dict:
    """Two different orders; the annotator's choice is drawn from Bradley-Terry on its utility."""
    a, b = sample_order(rng), sample_order(rng)
    while b == a:
        b = sample_order(rng)
    if rng.random() >= rewards.preference_probability(a, b):
        a, b = b, a
    head = "order:"
    return {"prompt": head, "chosen": a[len(head):], "rejected": b[len(head):]}


def order_scores(rng: random.Random) -> list[dict]:
    """Single orders, each scored on an absolute scale by one of N_SCORE_ANNOTATORS noisy annotators."""
    offsets = [rng.gauss(0.0, SCORE_OFFSET_SD) for _ in range(N_SCORE_ANNOTATORS)]
    scales = [math.exp(rng.gauss(0.0, SCORE_LOG_SCALE_SD)) for _ in range(N_SCORE_ANNOTATORS)]
    records = []
    for _ in range(N_SCORED_ORDERS):
        text, k = sample_order(rng), rng.randrange(N_SCORE_ANNOTATORS)
        score = offsets[k] + scales[k] * rewards.order_utility(text) + rng.gauss(0.0, SCORE_NOISE_SD)
        records.append({"prompt": "order:", "completion": text[len("order:"):], "annotator": k, "score": round(score, 4)})
    return records


# ---------------------------------------------------------------- plans
def sample_uniform_plan(rng: random.Random) -> str:
    return "plan: " + " ".join(rng.choices(grammar.ACTIVITIES, k=grammar.PLAN_LENGTH)) + " ."


def expert_plan_distribution() -> tuple[list[tuple[str, ...]], list[float]]:
    """All plans and their soft-optimal probabilities exp(R) / Z (exact: 6^4 plans)."""
    plans = list(itertools.product(grammar.ACTIVITIES, repeat=grammar.PLAN_LENGTH))
    weights = [math.exp(rewards.plan_reward(p)) for p in plans]
    z = sum(weights)
    return plans, [w / z for w in weights]


# ---------------------------------------------------------------- writing
def split(items: list, rng: random.Random) -> list[dict]:
    """Tag each item with split 'train' or 'test' (a fixed fraction, chosen at random)."""
    test = set(rng.sample(range(len(items)), round(TEST_FRACTION * len(items))))
    return [{**item, "split": "test" if i in test else "train"} for i, item in enumerate(items)]


def stream(seed: int, name: str) -> random.Random:
    """A random stream of its own for a file added later: its draws move no earlier file."""
    return random.Random(f"{seed}:{name}")  # a str seed is hashed with SHA-512: the same on every machine


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def write_jsonl(path: Path, records: list[dict]) -> None:
    write_lines(path, [json.dumps(r) for r in records])


def build_world(out: Path, seed: int = SEED) -> dict[str, list[str]]:
    """Write every family's files under out/world/; return the corpora (family -> documents)."""
    rng = random.Random(seed)
    world = out / "world"
    corpora: dict[str, list[str]] = {}

    corpora["reviews"] = [sample_review(rng) for _ in range(CORPUS_SIZES["reviews"])]
    write_jsonl(world / "prompts_reviews.jsonl", split(review_prompts(), rng))

    held = heldout_pairs(rng)
    banned = set(held) | {p[::-1] for p in held}
    allowed = [(a, b) for a in range(grammar.MAX_OPERAND + 1) for b in range(grammar.MAX_OPERAND + 1) if (a, b) not in banned]
    pairs = rng.choices(allowed, k=CORPUS_SIZES["arithmetic"])
    corpora["arithmetic"] = [arithmetic_text(a, b, noisy_answer(rng, a, b)) for a, b in pairs]
    train_pairs = rng.sample(allowed, N_TRAIN_ARITHMETIC_PROMPTS)
    write_jsonl(world / "prompts_arithmetic.jsonl", [
        {"prompt": arithmetic_prompt(a, b), "answer": a + b, "split": s}
        for s, ps in (("train", train_pairs), ("test", held)) for a, b in ps
    ])

    corpora["orders"] = [sample_order(rng) for _ in range(CORPUS_SIZES["orders"])]
    write_jsonl(world / "prompts_orders.jsonl", [{"prompt": "order:", "split": "train"}, {"prompt": "order:", "split": "test"}])
    write_jsonl(world / "order_prefs.jsonl", split([preference_pair(rng) for _ in range(N_PREFERENCE_PAIRS)], rng))

    corpora["plans"] = [sample_uniform_plan(rng) for _ in range(CORPUS_SIZES["plans"])]
    write_jsonl(world / "prompts_plans.jsonl", [{"prompt": "plan:", "split": "train"}, {"prompt": "plan:", "split": "test"}])
    plans, probs = expert_plan_distribution()
    demos = rng.choices(plans, weights=probs, k=N_DEMOS)
    write_jsonl(world / "plan_demos.jsonl", [{"prompt": "plan:", "completion": " " + " ".join(p) + " ."} for p in demos])

    scores_rng = stream(seed, "order_scores")
    write_jsonl(world / "order_scores.jsonl", split(order_scores(scores_rng), scores_rng))

    for family, docs in corpora.items():
        assert all(grammar.VALIDATORS[family](d) for d in docs), f"generator wrote an invalid {family} document"
        write_lines(world / f"corpus_{family}.txt", docs)
    return corpora


def main() -> None:
    from ..core import paths
    from ..lm import tokenizer

    out = paths.data_dir(create=True)
    corpora = build_world(out)
    text = "\n".join(doc for docs in corpora.values() for doc in docs)
    tokenizer.save_tokenizer(tokenizer.train_bpe(text, tokenizer.VOCAB_SIZE, tokenizer.SPLIT_PATTERN), out / tokenizer.FILE)
    paths.write_manifest(out)
    print(f"wrote the tiny world and tokenizer under {out} (seed {SEED})")


if __name__ == "__main__":
    main()
