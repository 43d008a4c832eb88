"""GAIL's pieces on the plans world against references computed apart from them: the policy's
probability of each plan against one unpadded sequence at a time, the exact KL(expert || policy)
and true reward against plain sums over the 1,296 plans, the reward forms against their closed
forms, a discriminator step lowering its loss, and the trainer running end to end."""
import math

import pytest
import torch

import minirl
from minirl import datasets, gail, rewards, world
from minirl.ppo_trainer import PPOConfig


@pytest.fixture(scope="module")
def base():
    return minirl.load_model("base")


def test_plan_distribution_matches_one_sequence_at_a_time(base):
    enc = minirl.load_tokenizer()
    plans, probs = gail.plan_distribution(base)
    assert len(plans) == 6 ** 4 and 0.9 < probs.sum() <= 1.0
    with torch.no_grad():
        for k in (0, 777, 1295):
            ids = enc.encode("plan: " + " ".join(plans[k]) + " .") + [enc.eot_token]
            n = len(enc.encode("plan:"))
            logp = torch.log_softmax(base(torch.tensor([ids[:-1]]))[0], -1)
            want = sum(logp[t - 1, ids[t]].item() for t in range(n, len(ids)))
            assert math.log(probs[k].item()) == pytest.approx(want, abs=1e-4)


def test_expert_kl_and_true_reward_are_plain_sums(base):
    plans, probs = gail.plan_distribution(base)
    expert = world.expert_plan_distribution()[1]
    want = sum(e * math.log(e / p) for e, p in zip(expert, probs.tolist()))
    assert gail.expert_kl(base) == pytest.approx(want, abs=1e-9)
    r = [rewards.plan_reward(p) for p in plans]
    assert gail.expert_true_reward() == pytest.approx(sum(e * x for e, x in zip(expert, r)), abs=1e-9)
    missing = 1 - probs.sum().item()
    assert gail.expected_true_reward(probs) == pytest.approx(
        sum(p * x for p, x in zip(probs.tolist(), r)) + missing * rewards.INVALID_PLAN_REWARD, abs=1e-9)


def test_reward_forms():
    logits = torch.tensor([-3.0, 0.0, 2.0], dtype=torch.float64)
    d = torch.sigmoid(logits)
    assert torch.allclose(gail.policy_reward(logits, "log_d"), d.log())
    assert torch.allclose(gail.policy_reward(logits, "neg_log_1m_d"), -(1 - d).log())
    assert torch.allclose(gail.policy_reward(logits, "logit"), d.log() - (1 - d).log())
    with pytest.raises(ValueError, match="reward_form"):
        gail.policy_reward(logits, "log")


def test_a_discriminator_step_lowers_its_loss(base):
    enc = minirl.load_tokenizer()
    disc = gail.Discriminator(datasets.load_demos()[:64], gail.GAILConfig(expert_batch=64, disc_lr=1e-3, disc_steps=5),
                              base=base)
    invalid = [enc.encode("plan: run run the movie was .")] * 8
    losses_seen = [disc.update(invalid)["disc_loss"] for _ in range(3)]
    assert losses_seen[0] < math.log(2) + 1e-6 and losses_seen[-1] < losses_seen[0]


def test_train_gail_runs(base):
    history, disc = gail.train_gail(minirl.load_model("base"), datasets.load_demos()[:128], gail.GAILConfig(),
                                    PPOConfig(steps=2, prompts_per_step=4, group_size=2, epochs=1, minibatches=1))
    assert len(history) == 2 and {"disc_loss", "d_expert", "d_policy"} <= set(history[0])


def test_replay_buffer_and_warm_start(base):
    """The discriminator trains on its last `policy_batches` batches of policy samples (the
    batches' own contents, oldest dropped); `pretrain` samples the fixed policy once per step."""
    enc = minirl.load_tokenizer()
    disc = gail.Discriminator(datasets.load_demos()[:16], gail.GAILConfig(expert_batch=16, policy_batches=2), base=base)
    batches = [[enc.encode(f"plan: {a} {a} {a} {a} .")] for a in ("run", "nap", "cook")]
    for b in batches:
        disc.update(b)
    assert list(disc.buffer) == batches[1:]
    stats = gail.pretrain(disc, base, steps=2, batch=3, generator=torch.Generator().manual_seed(0))
    assert len(stats) == 2 and all(len(b) == 3 and b[0][: len(enc.encode("plan:"))] == enc.encode("plan:") for b in disc.buffer)
    history, _ = gail.train_gail(minirl.load_model("base"), datasets.load_demos()[:16], gail.GAILConfig(expert_batch=16),
                                 PPOConfig(steps=1, prompts_per_step=2, group_size=2, epochs=1, minibatches=1), pretrain_steps=2)
    assert len(history) == 1 and "d_expert" in history[0]  # the warm start's statistics are not merged into PPO's steps
