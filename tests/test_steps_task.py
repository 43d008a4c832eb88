"""The step-by-step sums task (minirl.world.steps): step labels against a plain second
implementation, by hand and over a grid of prompts and perturbed completions; the outcome is
arithmetic correctness; malformed completions labelled as the docstring says; the prompts a pure
function of the seed, train and test apart; a planted off-by-one in the labeller is caught."""
import itertools

import pytest
import torch

from minirl.lm.sampling import Rollout
from minirl.world import rewards, steps

P3 = "q: 12+34+5= a:"


# ---------------------------------------------------------------- a plain second implementation
def is_number(word):
    return word.isascii() and word.isdigit() and str(int(word)) == word


def plain_labels(prompt, completion, mode):
    """Step k (from 1) is right from the start if it equals numbers[0] + ... + numbers[k]; locally
    if it equals the step before it (numbers[0] for the first) plus numbers[k]."""
    numbers = [int(x) for x in prompt[len("q: "):-len("= a:")].split("+")]
    words = completion.split()
    labels = []
    for k in range(1, len(words) + 1):
        word = words[k - 1]
        if k >= len(numbers) or not is_number(word):
            labels.append(False)
        elif mode == "from_start":
            labels.append(int(word) == sum(numbers[: k + 1]))
        else:
            before = str(numbers[0]) if k == 1 else words[k - 2]
            labels.append(is_number(before) and int(word) == int(before) + numbers[k])
    return labels


def perturbations(numbers):
    """Completions near the right one: right; each step off by 1 or 10, alone or carried on
    (locally right after); a step dropped, repeated, added or not a number; spacing; empty."""
    truth = steps.partial_sums(numbers)
    out = {"".join(f" {v}" for v in truth), "", " ", "x", " 4x", " 046"}
    for k, d in itertools.product(range(len(truth)), (-10, -1, 1, 10)):
        alone = list(truth)
        alone[k] += d
        carried = truth[:k] + [v + d for v in truth[k:]]
        for values in (alone, carried):
            if min(values) >= 0:
                out.add("".join(f" {v}" for v in values))
    for k in range(len(truth)):
        out.add("".join(f" {v}" for i, v in enumerate(truth) if i != k))        # a step missing
        out.add("".join(f" {v}" for v in truth[: k + 1] + truth[k:]))            # a step repeated
        out.add("".join(f" {v}" if i != k else " ?" for i, v in enumerate(truth)))  # not a number
    right = "".join(f" {v}" for v in truth)
    out |= {right + f" {truth[-1]}", right + " 0", right.strip(), right.replace(" ", "  "), right + ".",
            " " + "+".join(map(str, numbers)) + right, right + "\n"}
    return sorted(out)


GRID = [(a, b, c) for a, b, c in itertools.product((0, 1, 9, 50, 99), repeat=3)] + \
       [(a, b, c, d) for a, b, c, d in itertools.product((0, 7, 99), repeat=4)]


def mismatches(labeller):
    """(prompt, completion, mode) where `labeller` disagrees with the plain one, over the grid."""
    bad = []
    for numbers in GRID:
        prompt = steps.step_prompt(numbers)
        for completion, mode in itertools.product(perturbations(numbers), steps.LABELS):
            if labeller(prompt, completion, mode) != plain_labels(prompt, completion, mode):
                bad.append((prompt, completion, mode))
    return bad


def test_labels_match_a_plain_implementation_over_a_grid_of_prompts_and_perturbations():
    assert len(GRID) == 206
    assert mismatches(steps.label_steps) == []


def test_an_off_by_one_in_the_partial_sum_a_step_is_compared_with_is_caught(monkeypatch):
    true_sums = steps.partial_sums
    monkeypatch.setattr(steps, "partial_sums", lambda numbers: [numbers[0]] + true_sums(numbers)[:-1])
    assert mismatches(steps.label_steps)  # from the start: step k compared with the sum before it
    assert steps.label_steps(P3, " 46 51") == [False, False]


@pytest.mark.parametrize("completion, from_start, local", [
    (" 46 51", [True, True], [True, True]),
    (" 47 52", [False, False], [False, True]),    # one slip, carried on: wrong from the start, right locally
    (" 47 51", [False, True], [False, False]),    # the right answer after a wrong step
    (" 46 52", [True, False], [True, False]),
    (" 46", [True], [True]),                      # a step missing: only written steps are labelled
    (" 51", [False], [False]),                    # the answer alone is a wrong first step
    (" 46 51 51", [True, True, False], [True, True, False]),  # an extra step is wrong
    (" 46 5l", [True, False], [True, False]),     # not a number
    (" x 51", [False, True], [False, False]),     # after a non-number, nothing to add to
    (" 046 51", [False, True], [False, False]),   # a leading zero is not a number
    ("", [], []),
    ("46  51", [True, True], [True, True]),       # labels read the words; the outcome wants the format
])
def test_hand_cases(completion, from_start, local):
    assert steps.label_steps(P3, completion, "from_start") == from_start == plain_labels(P3, completion, "from_start")
    assert steps.label_steps(P3, completion, "local") == local == plain_labels(P3, completion, "local")
    assert steps.step_label_rewards([P3], [completion], mode="local") == [[float(x) for x in local]]


def test_four_numbers_by_hand():
    prompt = "q: 16+0+58+94= a:"
    assert steps.partial_sums(steps.operands(prompt)) == [16, 74, 168]
    assert steps.label_steps(prompt, " 16 75 169") == [True, False, False]
    assert steps.label_steps(prompt, " 16 75 169", "local") == [True, False, True]
    assert steps.steps_reward([prompt] * 2, [" 16 74 168", " 16 75 168"]) == [1.0, 1.0]


def test_the_outcome_is_arithmetic_correctness():
    for numbers in GRID:
        prompt = steps.step_prompt(numbers)
        for completion in perturbations(numbers):
            values = completion.split()
            well_formed = (len(values) == len(numbers) - 1 and all(map(is_number, values))
                           and completion == "".join(" " + v for v in values))
            assert steps.is_well_formed(prompt, completion) == well_formed, completion
            right = well_formed and int(values[-1]) == sum(numbers)
            assert steps.steps_reward([prompt], [completion]) == [float(right)], (prompt, completion)


def test_on_two_numbers_the_outcome_is_the_arithmetic_reward():
    completions = [" 42", " 41", "42", " 042", " 42 42", "", " 4 2", " 420"]
    for a, b in itertools.product((0, 17, 25, 99), repeat=2):
        prompt = f"q: {a}+{b}= a:"
        assert steps.steps_reward([prompt] * 9, completions + [f" {a + b}"]) == \
               rewards.arithmetic_reward([prompt] * 9, completions + [f" {a + b}"])


def test_step_accuracy_counts_missing_and_extra_steps_against_it():
    assert steps.step_accuracy(P3, " 46 51") == 1.0
    assert steps.step_accuracy(P3, " 46") == 0.5
    assert steps.step_accuracy(P3, " 46 51 51") == pytest.approx(2 / 3)
    assert steps.step_accuracy(P3, "") == 0.0
    assert steps.step_accuracy(P3, " 47 52", "local") == 0.5


def test_bad_input_is_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="not a sum prompt"):
        steps.label_steps("q: 12+345= a:", " 357")
    with pytest.raises(ValueError, match="without leading zeros"):
        steps.steps_reward(["q: 05+3+1= a:"], [" 8 9"])  # arithmetic_reward scores its two-number kin 0
    with pytest.raises(ValueError, match="did you mean 'local'"):
        steps.label_steps(P3, " 46 51", mode="locl")
    with pytest.raises(ValueError, match="choose one of 3, 4"):
        steps.step_problems(5)
    with pytest.raises(ValueError, match="give one prompt per completion"):
        steps.steps_reward([P3], [" 46 51", " 46"])


@pytest.mark.parametrize("terms", steps.TERMS)
def test_prompts_are_a_pure_function_of_the_seed_and_test_never_meets_train(terms):
    train, test = steps.step_problems(terms, "train"), steps.step_problems(terms, "test")
    assert train == steps.step_problems(terms, "train") and test == steps.step_problems(terms, "test")
    assert steps.step_problems(terms, "test", seed=1) != test
    assert (len(train), len(test)) == (steps.N_TRAIN, steps.N_TEST)
    prompts = [r["prompt"] for r in train + test]
    assert len(set(prompts)) == len(prompts)  # distinct, so train and test are disjoint
    for r in train + test:
        assert len(r["operands"]) == terms and min(r["operands"]) >= 0 and sum(r["operands"]) <= 99
        assert steps.operands(r["prompt"]) == r["operands"]
        assert r["partial_sums"] == [sum(r["operands"][: k + 1]) for k in range(1, terms)]
    # the first test prompt, pinned: a change to the stream or the decoding of a draw would move it
    assert test[0]["prompt"] == {3: "q: 11+19+17= a:", 4: "q: 20+43+14+10= a:"}[terms]


@pytest.mark.parametrize("terms", steps.TERMS)
def test_the_task_rewards_the_outcome_at_the_last_token_and_reports_the_steps(terms):
    from minirl.lm.tokenizer import load_tokenizer
    task = steps.steps_task(terms)
    enc = load_tokenizer()
    prompt = task.test_prompts[0]
    truth = steps.partial_sums(steps.operands(prompt))
    right = "".join(f" {v}" for v in truth)
    slipped = "".join(f" {v + 1}" for v in truth)  # every step off by one: locally right after the first
    texts = [right, slipped]
    ids = [enc.encode_ordinary(t) + [enc.eot_token] for t in texts]
    longest = max(len(enc.encode_ordinary(" 396")) * (terms - 1) + 1, max(map(len, ids)))
    assert longest <= task.max_new_tokens
    T = max(map(len, ids))
    tokens = torch.tensor([row + [0] * (T - len(row)) for row in ids])
    mask = torch.tensor([[1.0] * len(row) + [0.0] * (T - len(row)) for row in ids])
    rollout = Rollout(prompt_tokens=torch.zeros(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1), tokens=tokens,
                      logprobs=torch.zeros(2, T), mask=mask, truncated=torch.zeros(2, dtype=torch.bool),
                      prompts=[prompt] * 2, texts=texts)
    r = task.token_rewards(rollout, enc)
    assert r.sum(dim=1).tolist() == [1.0, 0.0] and r[0, len(ids[0]) - 1] == 1.0
    gold = task.gold(rollout)
    assert gold["correct"] == 0.5 and gold["well_formed"] == 1.0
    assert gold["step_accuracy"] == 0.5
    assert gold["step_accuracy_local"] == pytest.approx((1 + (terms - 2) / (terms - 1)) / 2)
