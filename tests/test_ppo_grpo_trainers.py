"""The PPO and GRPO trainers: their pieces by hand, that they learn, and that each switch acts
(what all trainers share, reward functions and the NaN guard included: test_training.py)."""
import dataclasses
import math

import pytest
import torch

import minirl
from minirl.train.grpo import GRPOConfig, group_advantages, lr_factor, train_grpo, zero_advantage_fraction
from minirl.train.ppo import PPO, PPOConfig, explained_variance, rlhf_rewards, train_ppo
from minirl.world import tasks
from minirl.world.evaluate import heldout_report


def test_rlhf_rewards_put_the_score_at_the_last_action_token():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    r = rlhf_rewards(torch.tensor([2.0, -1.0]), logp, ref, mask, beta=0.1)
    # KL_t = logp - ref: row 0 (0.5, -1.0, 0.0), row 1 (1.0, 0.0, [padding])
    assert torch.allclose(r, torch.tensor([[-0.05, 0.1, 2.0], [-0.1, -1.0, 0.0]]))
    assert torch.allclose(r.sum(1), torch.tensor([2.0 - 0.1 * -0.5, -1.0 - 0.1 * 1.0]))  # R_total = score - beta KL


def test_dense_rewards_stay_on_their_tokens():
    """With token rewards (B, T), the return a token's GAE targets (beta 0, gamma 1, lambda 1) is
    the sum of the rewards from that token on, by a plain loop; with the (B,) sum, every token's
    return is the whole sum."""
    policy = minirl.load_model("base")
    task = tasks.arithmetic_task()
    rollout = minirl.sample(policy, task.train_prompts[:2], max_new_tokens=task.max_new_tokens, group_size=2,
                            generator=torch.Generator().manual_seed(0))
    ppo = PPO(policy, PPOConfig(beta=0.0, lam=1.0, whiten=False, dense=True))
    mask = rollout.mask
    rewards = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1)) * mask  # (B, T)
    to_go = [[sum(rewards[i, t:].tolist()) if mask[i, t] else 0.0 for t in range(mask.size(1))]
             for i in range(mask.size(0))]
    assert torch.allclose(ppo.score_batch(rollout, rewards)["returns"], torch.tensor(to_go), atol=1e-5)
    summed = ppo.score_batch(rollout, rewards.sum(dim=1))["returns"]
    assert torch.allclose(summed, rewards.sum(dim=1, keepdim=True) * mask, atol=1e-5)


def test_dense_changes_nothing_for_a_task_that_rewards_the_last_token():
    """The arithmetic task scores only a completion's last token, so the two placements of its
    reward are one: training with and without `dense` gives the same history."""
    task = tasks.arithmetic_task()
    config = PPOConfig(steps=2, prompts_per_step=2, group_size=2, epochs=1, minibatches=1, lr=1e-3)
    runs = [train_ppo(minirl.load_model("base"), task, dataclasses.replace(config, dense=dense)) for dense in (False, True)]
    for key in ("reward", "kl", "total_reward", "value_loss", "explained_variance"):
        assert [h[key] for h in runs[0]] == pytest.approx([h[key] for h in runs[1]], abs=1e-6)


def test_explained_variance_by_hand():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 2.0), returns, mask) == pytest.approx(0.0)
    # residuals (0.5, 0, -0.5): variance 0.25 against Var(returns) = 1
    assert explained_variance(torch.tensor([[0.5, 2.0, 3.5, 0.0]]), returns, mask) == pytest.approx(0.75)


def test_group_advantages_and_the_zero_advantage_share():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    config = GRPOConfig(group_size=4)
    assert group_advantages(rewards, config)[4:].eq(0).all()
    assert zero_advantage_fraction(rewards, 4) == 0.5
    loo = group_advantages(rewards, dataclasses.replace(config, advantage="leave_one_out"))
    assert loo[:4].tolist() == pytest.approx([2 / 3, -2 / 3, 2 / 3, -2 / 3])
    with pytest.raises(ValueError, match="unknown advantage 'vtrace'"):
        dataclasses.replace(config, advantage="vtrace")


def test_rollout_select_keeps_rows_aligned():
    enc = minirl.load_tokenizer()
    r = minirl.sample(minirl.load_model("base"), ["q: 1+2= a:", "review: the plot"], max_new_tokens=5, group_size=2,
                      generator=torch.Generator().manual_seed(0), tokenizer=enc)
    sub = r.select(torch.tensor([3, 0]))
    assert sub.texts == [r.texts[3], r.texts[0]] and sub.prompts == [r.prompts[3], r.prompts[0]]
    assert torch.equal(sub.tokens, r.tokens[[3, 0]]) and torch.equal(sub.mask, r.mask[[3, 0]])


@pytest.mark.slow
def test_ppo_raises_gold_and_records_its_diagnostics():
    """Judged on the 89 held-out openings (4 samples each), not on 16-completion training batches,
    whose share moves by 1/16 per sample. At the default rate (3e-4) one of four seeds collapsed by
    step 10 on an Intel Xeon (held-out 0.03 -> 0.02), so the test runs at 1e-4."""
    task = tasks.reviews_task("negative")
    policy = minirl.load_model("base")
    before = heldout_report(policy, task)["gold_positive"]
    history = train_ppo(policy, task, PPOConfig(steps=10, prompts_per_step=8, group_size=2, lr=1e-4))
    after = heldout_report(policy, task)["gold_positive"]
    assert after > before + 0.3  # measured: 0.03 -> 0.44-0.54 over seeds 0-3 at 1 thread, 0.49-0.51 at 2 (seeds 0-1)
    expected = {"reward", "kl", "entropy", "clip_fraction", "approx_kl", "value_loss", "explained_variance", "length", "gold"}
    assert expected <= set(history[0])
    assert history[0]["explained_variance"] == 0  # the critic starts at zero
    assert sum(h["explained_variance"] for h in history[-3:]) / 3 > 0  # measured 0.04-0.25 over those runs


def test_target_kl_stops_a_batchs_epochs_early():
    """3 epochs of 2 minibatches take 6 steps; with a target KL of 1e-5 only the first minibatch
    steps: its ratio is 1 up to rounding (approximate KL about 1e-8), and after one step at this
    learning rate the next minibatch reads more than the target."""
    task = tasks.arithmetic_task()
    config = PPOConfig(steps=1, prompts_per_step=2, group_size=2, epochs=3, minibatches=2, lr=1e-3)
    assert train_ppo(minirl.load_model("base"), task, config)[0]["updates"] == 6
    for seed in range(3):
        stopped = train_ppo(minirl.load_model("base"), task, dataclasses.replace(config, target_kl=1e-5, seed=seed))[0]
        assert stopped["updates"] == 1 and abs(stopped["approx_kl"]) < 1e-6


def test_target_kl_on_an_updated_batch_takes_no_step():
    """A second pass over a batch the policy has already moved on: the first minibatch's approximate
    KL is past the target, so nothing steps and the diagnostics are NaN, not a division by zero."""
    task = tasks.arithmetic_task()
    policy = minirl.load_model("base")
    ppo = PPO(policy, PPOConfig(prompts_per_step=2, group_size=2, epochs=1, minibatches=1, lr=1e-3))
    rollout = minirl.sample(policy, task.train_prompts[:2], max_new_tokens=task.max_new_tokens, group_size=2,
                            generator=torch.Generator().manual_seed(0))
    batch = ppo.score_batch(rollout, torch.tensor(minirl.world.rewards.arithmetic_reward(rollout.prompts, rollout.texts)))
    assert ppo.update(rollout, batch, step=0)["updates"] == 1
    ppo.config = dataclasses.replace(ppo.config, target_kl=1e-5)
    again = ppo.update(rollout, batch, step=0)
    assert again["updates"] == 0 and math.isnan(again["approx_kl"])


@pytest.mark.slow
def test_ppo_switches_act():
    task = tasks.reviews_task("negative")
    config = PPOConfig(steps=1, prompts_per_step=4, group_size=2)
    clipped = train_ppo(minirl.load_model("base"), task, config)[0]
    unclipped = train_ppo(minirl.load_model("base"), task, dataclasses.replace(config, clip=False))[0]
    assert clipped["clip_fraction"] > 0 and unclipped["clip_fraction"] == 0
    one_epoch = train_ppo(minirl.load_model("base"), task, dataclasses.replace(config, epochs=1, minibatches=1))[0]
    assert one_epoch["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # one step on fresh data: ratio 1


@pytest.mark.slow
def test_grpo_raises_arithmetic_accuracy():
    task = tasks.arithmetic_task()
    history = train_grpo(minirl.load_model("base"), task, GRPOConfig(steps=40, inner_steps=2))
    first = sum(h["correct"] for h in history[:5]) / 5
    last = sum(h["correct"] for h in history[-5:]) / 5
    assert last > first + 0.1  # measured: 0.45 -> 0.65 (5-step means) at one thread
    assert history[-1]["clip_fraction"] > 0  # the second inner step moves the ratio off 1
    expected = {"reward", "kl", "entropy", "clip_fraction", "length", "zero_adv_groups", "loss_first", "step_time"}
    assert expected <= set(history[0])


def test_grpo_callback_runs_once_per_step_and_its_additions_land_in_the_history():
    policy, calls = minirl.load_model("base"), []

    def callback(metrics, model):
        calls.append((metrics["step"], model is policy))
        metrics["probe"] = 10 * metrics["step"]

    history = train_grpo(policy, tasks.arithmetic_task(), GRPOConfig(steps=2, prompts_per_step=1, group_size=2),
                         callback=callback)
    assert calls == [(0, True), (1, True)]
    assert [h["probe"] for h in history] == [0, 10]


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_grpo_learning_rate_schedule(schedule, monkeypatch):
    """The rate of each step's update, read by a spy on the optimizer: with 2 warm-up steps of 6, lr/3
    and 2lr/3, then lr throughout for 'constant', and lr * (6 - step) / 4 for 'linear' (from lr down
    to 0 after the last step); without warm-up, 'linear' is lr * (1 - step / steps)."""
    seen, original = [], torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    config = GRPOConfig(steps=6, prompts_per_step=1, group_size=2, lr=1e-4, lr_schedule=schedule, warmup_steps=2)
    train_grpo(minirl.load_model("base"), tasks.arithmetic_task(), config)
    after = [1.0, 0.75, 0.5, 0.25] if schedule == "linear" else [1.0] * 4
    assert seen == pytest.approx([1e-4 * x for x in [1 / 3, 2 / 3] + after], rel=1e-12)
    plain = GRPOConfig(steps=4, lr_schedule="linear")
    assert [lr_factor(k, plain) for k in range(4)] == pytest.approx([1, 0.75, 0.5, 0.25])
    with pytest.raises(ValueError, match="lr_schedule"):
        GRPOConfig(lr_schedule="cosine")
    with pytest.raises(ValueError, match="warmup_steps"):
        GRPOConfig(steps=4, warmup_steps=4)
