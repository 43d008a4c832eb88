"""The process reward model (minirl.lm.process_head, minirl.train.prm): its input layout, loss,
Monte Carlo labels and aggregations, each against a second computation: the tokenizer on the
joined text, a loop over steps, the model's exact probability of the one right continuation, and
Hugging Face's token classifier, the model TRL's PRMTrainer trained."""
import math

import pytest
import torch

import minirl
from minirl.lm import export
from minirl.lm.process_head import SEP, completion_steps, from_policy, prm_batch, prm_input, step_probabilities
from minirl.lm.tokenizer import load_tokenizer
from minirl.train import prm
from minirl.world import steps

ENC = load_tokenizer()
PROMPT = "q: 12+34+5= a:"


@pytest.fixture(scope="module")
def policy():
    return minirl.load_model("steps")


@pytest.fixture(scope="module")
def model(policy):
    """A PRM whose head reads something: random weights, seeded."""
    m = from_policy(policy)
    with torch.no_grad():
        m.score.weight.copy_(torch.randn(m.score.weight.shape, generator=torch.Generator().manual_seed(0)) * 0.1)
        m.score.bias.fill_(0.3)
    return m.eval()


def test_input_is_the_joined_text_with_separators():
    steps_ = completion_steps(" 46  51 7")
    assert steps_ == [" 46", " 51", " 7"]
    ids, ends = prm_input(ENC, PROMPT, steps_)
    assert ids == ENC.encode_ordinary(PROMPT + " 46\n 51\n 7\n")
    assert ends == [i for i, t in enumerate(ids) if t == ENC.encode_single_token(SEP)]
    assert [ENC.decode(ids[a + 1:b + 1]) for a, b in zip([len(ENC.encode_ordinary(PROMPT)) - 1] + ends, ends)] == \
        [s + SEP for s in steps_]


def test_loss_is_the_mean_binary_cross_entropy_over_steps(model):
    records = [{"prompt": PROMPT, "steps": [" 46", " 52"], "labels": [1.0, 0.25]},
               {"prompt": "q: 1+2+3+4= a:", "steps": [" 3"], "labels": [0.0]}]
    loss = prm.prm_loss(model, *prm_batch(ENC, records))
    terms = []
    for r in records:  # one sequence at a time, no padding
        ids, ends = prm_input(ENC, r["prompt"], r["steps"])
        z = model(torch.tensor([ids]))[0]
        for end, y in zip(ends, r["labels"]):
            p = torch.sigmoid(z[end]).item()
            terms.append(-(y * math.log(p) + (1 - y) * math.log(1 - p)))
    assert abs(loss.item() - sum(terms) / len(terms)) < 1e-5


def test_a_fresh_head_gives_one_half_and_log_two(policy):
    fresh = from_policy(policy)
    records = [{"prompt": PROMPT, "steps": [" 46", " 51"], "labels": [1.0, 0.0]}]
    assert abs(prm.prm_loss(fresh, *prm_batch(ENC, records)).item() - math.log(2)) < 1e-6
    assert step_probabilities(fresh, [PROMPT], [[" 46", " 51"]]) == [[0.5, 0.5]]


def test_step_probabilities_match_one_sequence_at_a_time(model):
    prompts = [PROMPT, "q: 1+2+3+4= a:", PROMPT]
    lists = [[" 46", " 51"], [" 3", " 6", " 10"], []]
    got = step_probabilities(model, prompts, lists, batch_size=2)
    for p, s, g in zip(prompts, lists, got):
        ids, ends = prm_input(ENC, p, s)
        z = model(torch.tensor([ids]))[0].double()
        assert len(g) == len(s) and all(abs(a - torch.sigmoid(z[e]).item()) < 1e-6 for a, e in zip(g, ends))


def test_aggregations():
    probs = [0.9, 0.5, 0.8]
    assert prm.completion_score(probs, "min") == 0.5
    assert abs(prm.completion_score(probs, "product") - 0.36) < 1e-12
    assert prm.completion_score(probs, "last") == 0.8
    assert all(prm.completion_score([], how) == 0.0 for how in prm.AGGREGATIONS)
    with pytest.raises(ValueError, match="how"):
        prm.completion_score(probs, "mean")


def test_prefixes_and_hard_labels():
    assert prm.prefixes(" 46 51") == [" 46", " 46 51"]
    assert prm.prefixes("") == []
    assert prm.hard_labels([[0.0, 0.125], [1.0]]) == [[0.0, 1.0], [1.0]]


def right_continuation_probability(policy, prompt: str, prefix: str) -> float:
    """The exact chance the policy, from prompt + prefix, writes the rest of the right answer and stops:
    the canonical tokens of the remaining partial sums, then EOS (a product of its probabilities)."""
    numbers = steps.operands(prompt)
    done = len(completion_steps(prefix))
    assert steps.step_values(prefix) == steps.partial_sums(numbers)[:done], "a right prefix only"
    rest = "".join(f" {v}" for v in steps.partial_sums(numbers)[done:])
    context = ENC.encode_ordinary(prompt + prefix)
    target = ENC.encode_ordinary(rest) + [ENC.eot_token]
    with torch.no_grad():
        logits = policy(torch.tensor([context + target[:-1]]))[0, len(context) - 1:]
    return torch.log_softmax(logits.double(), -1).gather(1, torch.tensor(target)[:, None]).sum().exp().item()


@pytest.mark.parametrize("prefix_steps", [1, 2])
def test_monte_carlo_label_estimates_the_value_of_the_step(policy, prefix_steps):
    """From a right prefix the one right ending is the rest of the partial sums then EOS; its exact
    probability (other tokenizations of the same text are left out, a lower bound off by little) is
    what the share of rollouts estimates."""
    completion = " 46 51"
    rollouts = 1500
    labels, samples = prm.monte_carlo_labels(policy, [PROMPT], [completion], rollouts, torch.Generator().manual_seed(1))
    assert len(samples) == 2 * rollouts and len(labels[0]) == 2
    value = right_continuation_probability(policy, PROMPT, [" 46", " 46 51"][prefix_steps - 1])
    estimate = labels[0][prefix_steps - 1]
    sd = math.sqrt(value * (1 - value) / rollouts)
    assert value > 0.05
    assert abs(estimate - value) < 4 * sd + 0.01, (estimate, value)


def test_a_rollout_that_rewrites_the_step_does_not_count(policy):
    """' 5' as a finished step: a continuation '1' would make it 51 (the right sum); it must not count."""
    labels, samples = prm.monte_carlo_labels(policy, [PROMPT], [" 46 5"], 1000, torch.Generator().manual_seed(2))
    from_step = samples[1000:]  # the rollouts from ' 46 5' (the first 1000 are from ' 46')
    extended = [t[len(" 46 5"):][:1] not in ("", " ") for _, t in from_step]
    right = [steps.final_correct(p, t) for p, t in from_step]
    assert sum(r and e for r, e in zip(right, extended)) > 0  # the case happens
    assert labels[0][1] * 1000 == sum(r and not e for r, e in zip(right, extended))


def test_hugging_face_token_classifier_gives_the_same_loss(model):
    """TRL's PRMTrainer trained an AutoModelForTokenClassification with two labels on the prompt, then
    each step followed by the separator, labels -100 but at each separator (0 or 1), and took the
    cross-entropy over the labelled tokens. Exported (export.to_hf_prm), the model gives the same loss
    as minirl's on hard labels, on a right-padded batch."""
    records = [{"prompt": PROMPT, "steps": [" 46", " 52"], "labels": [1.0, 0.0]},
               {"prompt": "q: 1+2+3+4= a:", "steps": [" 3", " 6", " 1"], "labels": [1.0, 1.0, 0.0]}]
    ids, targets, mask = prm_batch(ENC, records)
    ours = prm.prm_loss(model, ids, targets, mask).item()
    hf = export.to_hf_prm(model)
    rows = []
    for r in records:  # the stepwise layout, built from the tokenizer alone
        row = ENC.encode_ordinary(r["prompt"])
        labels = [-100] * len(row)
        for step, y in zip(r["steps"], r["labels"]):
            piece = ENC.encode_ordinary(step + SEP)
            row, labels = row + piece, labels + [-100] * (len(piece) - 1) + [int(y)]
        rows.append((row, labels))
    width = max(len(r) for r, _ in rows)
    input_ids = torch.tensor([r + [0] * (width - len(r)) for r, _ in rows])
    labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in rows])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r, _ in rows])
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, attention_mask=attention, labels=labels).loss.item()
    assert abs(ours - theirs) < 1e-5


def test_training_lowers_the_loss_on_its_records(policy):
    records = [{"prompt": r["prompt"], "steps": [f" {v}" for v in r["partial_sums"]], "labels": [1.0] * 2}
               for r in steps.step_problems(3)[:8]]
    records += [{"prompt": r["prompt"], "steps": [f" {v + 1}" for v in r["partial_sums"]], "labels": [0.0] * 2}
                for r in steps.step_problems(3)[8:16]]
    trained, history = prm.train_prm(records, prm.PRMConfig(steps=30, batch_size=16, lr=3e-4), policy)
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert sum(h["loss"] for h in history[-5:]) / 5 < 0.5 * math.log(2)
    assert not trained.training


@pytest.mark.parametrize("call, error, words", [
    (lambda: prm_input(ENC, PROMPT, " 46 51"), TypeError, "list of strings"),
    (lambda: prm_input(ENC, PROMPT, [" 46\n", " 51"]), ValueError, "separator"),
    (lambda: prm_batch(ENC, [{"prompt": PROMPT, "steps": [" 46"], "labels": [1.0, 0.0]}]), ValueError, "one per step"),
    (lambda: prm_batch(ENC, [{"prompt": PROMPT, "steps": [" 46"], "labels": [2.0]}]), ValueError, "label"),
    (lambda: prm.train_prm([], prm.PRMConfig()), ValueError, "non-empty"),
    (lambda: prm.PRMConfig(step=3), TypeError, "steps"),
    (lambda: completion_steps(None), TypeError, "string"),
])
def test_clear_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_monte_carlo_labels_sample_in_chunks_with_the_same_stream(policy, monkeypatch):
    """Many prefixes are sampled a chunk at a time (one batch of 30,000 prefixes x 8 rollouts would
    need a 35 GB cache); the labels are each prefix's own, whatever the chunk size."""
    from minirl.lm import sampling
    batches = []
    real = sampling.sample

    def counting(model, prompts, **kwargs):
        batches.append(len(prompts))
        return real(model, prompts, **kwargs)
    monkeypatch.setattr(prm, "sample", counting)
    monkeypatch.setattr(prm, "PREFIXES_PER_BATCH", 3)
    completions = [" 46 51", " 47 52", " 46"]
    labels, samples = prm.monte_carlo_labels(policy, [PROMPT] * 3, completions, 4, torch.Generator().manual_seed(3))
    assert batches == [3, 2]  # five prefixes, three at a time
    assert [len(row) for row in labels] == [2, 2, 1]
    starts = [(c, pre) for c in completions for pre in prm.prefixes(c)]
    for k, (c, pre) in enumerate(starts):  # each label is the share of its own four rollouts
        mine = [t[len(pre):] for _, t in samples[4 * k:4 * k + 4]]
        assert all(t.startswith(pre) for _, t in samples[4 * k:4 * k + 4])
        assert labels[completions.index(c)][prm.prefixes(c).index(pre)] == prm.monte_carlo_label(PROMPT, pre, mine)
