"""Expert iteration (`minirl.train.expert_iteration`) against references computed apart from it: the
completions it keeps and the SFT items it builds against a plain loop over the same draws, the
steps a round takes, a round that keeps nothing, that a round makes the kept completions more
likely, and its refusals. The draws are the trainer's: prompts drawn by random.Random(seed), the
sampler seeded by seed, on the three-number sums from the shipped steps model (about 1 in 4 right)."""
import math
import random

import pytest
import torch

import minirl
from minirl.train import expert_iteration as ei
from minirl.train.grpo import GRPOConfig
from minirl.train.sft import sft_loss_on
from minirl.lm.tokenizer import PAD
from minirl.world import steps

PROMPTS, N, SEED = 6, 4, 3


@pytest.fixture(scope="module")
def enc():
    return minirl.load_tokenizer()


@pytest.fixture(scope="module")
def task():
    return steps.steps_task(3)


def draws(task, enc, prompts=PROMPTS, n=N, seed=SEED):
    """The first round's completions, drawn as the trainer draws them."""
    rng = random.Random(seed)
    chosen = [rng.choice(task.train_prompts) for _ in range(prompts)]
    return minirl.sample(minirl.load_model("steps"), chosen, max_new_tokens=task.max_new_tokens, group_size=n,
                         generator=torch.Generator().manual_seed(seed), tokenizer=enc)


def items_of(rollout, rows, enc):
    """Prompt ids + completion ids through EOS (or all of them, when cut), one row at a time."""
    out = []
    for i in rows:
        prompt, tokens = enc.encode_ordinary(rollout.prompts[i]), rollout.tokens[i].tolist()
        completion = tokens[:tokens.index(enc.eot_token) + 1] if enc.eot_token in tokens else tokens
        out.append((prompt + completion, len(prompt)))
    return out


def spy_on_fit(monkeypatch):
    """Record each call of `fit` (its items and config) and run the real one."""
    calls = []

    def spy(policy, items, config, pad, desc="SFT"):
        calls.append((list(items), config))
        return real(policy, items, config, pad, desc)
    real = ei.fit
    monkeypatch.setattr(ei, "fit", spy)
    return calls


def test_keeps_exactly_the_accepted_completions_as_sft_items(task, enc, monkeypatch):
    """The kept set is every draw a plain loop over `final_correct` accepts, in row order, each as
    its prompt's ids and its sampled ids through EOS; there are rejected draws too, so keeping
    everything, or the rejected ones, gives other items."""
    rollout = draws(task, enc)
    right = [i for i, (p, c) in enumerate(zip(rollout.prompts, rollout.texts)) if steps.final_correct(p, c)]
    assert 0 < len(right) < PROMPTS * N
    calls = spy_on_fit(monkeypatch)
    config = ei.ExpertIterationConfig(rounds=1, prompts_per_round=PROMPTS, n=N, batch_size=2, seed=SEED)
    history = ei.train_expert_iteration(minirl.load_model("steps"), task, config, tokenizer=enc)
    [(items, sft)] = calls
    assert items == items_of(rollout, right, enc)
    assert items != items_of(rollout, range(PROMPTS * N), enc)
    assert history[0]["kept"] == len(right)
    assert history[0]["reward"] == pytest.approx(len(right) / (PROMPTS * N), abs=1e-12)
    assert sft.steps == history[0]["sft_steps"] == math.ceil(len(right) / 2) and sft.lr == config.lr


def test_a_round_takes_epochs_times_kept_over_batch_size_steps(task, enc, monkeypatch):
    """Two epochs over k kept completions in batches of 3: ceil(2k / 3) steps, each round's count
    of samples the running total; a round's batch order is seeded by seed + round."""
    calls = spy_on_fit(monkeypatch)
    config = ei.ExpertIterationConfig(rounds=2, prompts_per_round=PROMPTS, n=N, epochs=2, batch_size=3, seed=SEED)
    history = ei.train_expert_iteration(minirl.load_model("steps"), task, config, tokenizer=enc)
    assert [h["samples"] for h in history] == [PROMPTS * N, 2 * PROMPTS * N]
    assert any(h["kept"] % 3 for h in history)  # where ceil and floor differ
    for h, (items, sft) in zip(history, calls):
        assert sft.steps == h["sft_steps"] == math.ceil(2 * h["kept"] / 3) and len(items) == h["kept"]
        assert sft.seed == SEED + h["round"] and math.isfinite(h["sft_loss"])


def test_a_round_with_nothing_accepted_leaves_the_weights_unchanged(task, enc):
    def never(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    policy = minirl.load_model("steps")
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    config = ei.ExpertIterationConfig(rounds=1, prompts_per_round=PROMPTS, n=N, seed=SEED)
    [h] = ei.train_expert_iteration(policy, task, config, tokenizer=enc, reward_fn=never)
    assert h["kept"] == 0 and h["sft_steps"] == 0 and math.isnan(h["sft_loss"]) and h["reward"] == 0
    assert all(torch.equal(start[k], v) for k, v in policy.state_dict().items())


def test_one_round_makes_the_kept_completions_more_likely(task, enc, monkeypatch):
    calls = spy_on_fit(monkeypatch)
    policy = minirl.load_model("steps")
    config = ei.ExpertIterationConfig(rounds=1, prompts_per_round=PROMPTS, n=N, epochs=2, lr=3e-4, seed=SEED)
    ei.train_expert_iteration(policy, task, config, tokenizer=enc)
    [(items, _)] = calls
    pad = enc.encode_single_token(PAD)
    with torch.no_grad():
        before, after = (sft_loss_on(m, items, pad).item() for m in (minirl.load_model("steps"), policy))
    assert after < before - 0.01


@pytest.mark.parametrize("score", [0.5, 2.0, -1.0])
def test_a_reward_that_is_not_zero_or_one_is_refused(task, enc, score):
    def graded(prompts, completions, **kwargs):
        return [score] * len(completions)

    config = ei.ExpertIterationConfig(rounds=1, prompts_per_round=2, n=2, seed=SEED)
    with pytest.raises(ValueError, match="must be 0 or 1.*train_raft"):
        ei.train_expert_iteration(minirl.load_model("steps"), task, config, tokenizer=enc, reward_fn=graded)


@pytest.mark.parametrize("make, error, message", [
    (lambda: ei.ExpertIterationConfig(epochs=0), ValueError, "epochs must be >= 1"),
    (lambda: ei.ExpertIterationConfig(n=2.5), TypeError, "n must be an integer"),
    (lambda: ei.ExpertIterationConfig(lr=math.nan), ValueError, "lr must be"),
    (lambda: ei.ExpertIterationConfig(learning_rate=1e-4), TypeError, "did you mean 'lr'"),
    (lambda: ei.ExpertIterationConfig(max_new_tokens=8), TypeError, "lives on the task"),
    (lambda: ei.train_expert_iteration(minirl.load_model("steps"), steps.steps_task(3), GRPOConfig()), TypeError,
     "must be a.*ExpertIterationConfig"),
    (lambda: ei.train_expert_iteration(minirl.load_model("steps"), steps.steps_task(3),
                                       ei.ExpertIterationConfig(), reward_fn="right"), TypeError, "reward_fn must be"),
    (lambda: ei.train_expert_iteration(minirl.load_model("steps"), steps.steps_task(3),
                                       ei.ExpertIterationConfig(), callback=3), TypeError, "callback must be"),
])
def test_bad_settings_are_refused_clearly(make, error, message):
    with pytest.raises(error, match=message):
        make()
