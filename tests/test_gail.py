"""GAIL's pieces on the plans world against references computed apart from them: the policy's
probability of each plan against one unpadded sequence at a time, the exact KL(expert || policy)
and true reward against plain sums over the 1,296 plans, the reward forms against their closed
forms, the 'airl' logit against f and log-probabilities summed token by token, a discriminator step
lowering its loss, its loss against the cross-entropy with the expert labelled 1 written with `math`,
and the trainer running end to end."""
import math

import pytest
import torch

import minirl
from minirl.train import gail
from minirl.train.grpo import GRPOConfig
from minirl.world import datasets, generate, rewards


@pytest.fixture(scope="module")
def base():
    return minirl.load_model("base")


def completion_logprob(model, ids: list[int]) -> float:
    """log model(completion | 'plan:') of one unpadded sequence, token by token."""
    n = len(minirl.load_tokenizer().encode("plan:"))
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0], -1)
    return sum(logp[t - 1, ids[t]].item() for t in range(n, len(ids)))


def test_plan_distribution_matches_one_sequence_at_a_time(base):
    enc = minirl.load_tokenizer()
    plans, probs = gail.plan_distribution(base)
    assert len(plans) == 6 ** 4 and 0.9 < probs.sum() <= 1.0
    for k in (0, 777, 1295):
        ids = enc.encode("plan: " + " ".join(plans[k]) + " .") + [enc.eot_token]
        assert gail.plan_sequences()[k] == ids
        assert math.log(probs[k].item()) == pytest.approx(completion_logprob(base, ids), abs=1e-4)


def test_expert_kl_and_true_reward_are_plain_sums(base):
    plans, probs = gail.plan_distribution(base)
    expert = generate.expert_plan_distribution()[1]
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


def test_airl_logit_is_f_minus_the_policys_log_ratio_to_the_reference(base):
    """logit = f - (log pi - log pi_ref), each log-probability summed token by token apart from the
    discriminator; the plain discriminator's logit is f alone."""
    policy = minirl.load_model("base")
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    seqs = [gail.plan_sequences()[k] for k in (3, 500, 1200)] + [minirl.load_tokenizer().encode("plan: run the .")]
    airl = gail.Discriminator(datasets.load_demos()[:8], gail.GAILConfig(), policy=policy, base=base)
    with torch.no_grad():
        torch.nn.init.normal_(airl.model.score.weight, generator=torch.Generator().manual_seed(0))
        f, logits = airl.f(seqs), airl.logits(seqs)
    want = [fx - (completion_logprob(policy, s) - completion_logprob(base, s)) for fx, s in zip(f.tolist(), seqs)]
    assert logits.tolist() == pytest.approx(want, abs=1e-4)
    assert max(abs(x - y) for x, y in zip(logits.tolist(), f.tolist())) > 0.1  # the log ratio is not negligible here
    plain = gail.Discriminator(datasets.load_demos()[:8], gail.GAILConfig(discriminator="gail"), base=base)
    with torch.no_grad():
        assert torch.equal(plain.logits(seqs), plain.f(seqs))
    with pytest.raises(ValueError, match="policy="):
        gail.Discriminator(datasets.load_demos()[:8], gail.GAILConfig(), base=base)


def test_a_discriminator_step_lowers_its_loss(base):
    enc = minirl.load_tokenizer()
    disc = gail.Discriminator(datasets.load_demos()[:64], gail.GAILConfig(expert_batch=64, disc_lr=1e-3, disc_steps=5),
                              policy=base, base=base)
    invalid = [enc.encode("plan: run run the movie was .")] * 8
    losses_seen = [disc.update(invalid)["disc_loss"] for _ in range(3)]
    assert losses_seen[0] < math.log(2) + 1e-6 and losses_seen[-1] < losses_seen[0]


def test_train_gail_runs(base):
    policy = minirl.load_model("base")
    history, disc = gail.train_gail(policy, datasets.load_demos()[:128], gail.GAILConfig(),
                                    GRPOConfig(steps=2, prompts_per_step=1, group_size=4, beta=0.0))
    assert len(history) == 2 and {"disc_loss", "d_expert", "d_policy"} <= set(history[0])
    assert disc.policy is policy and disc.reference is not policy  # the reference is a frozen copy of the start
    assert all(torch.equal(p, q) for p, q in zip(disc.reference.parameters(), minirl.load_model("base").parameters()))


def test_replay_buffer_and_warm_start(base):
    """The discriminator trains on its last `policy_batches` batches of policy samples (the
    batches' own contents, oldest dropped); `pretrain` samples the fixed policy once per step."""
    enc = minirl.load_tokenizer()
    disc = gail.Discriminator(datasets.load_demos()[:16], gail.GAILConfig(expert_batch=16, policy_batches=2), policy=base,
                              base=base)
    batches = [[enc.encode(f"plan: {a} {a} {a} {a} .")] for a in ("run", "nap", "cook")]
    for b in batches:
        disc.update(b)
    assert list(disc.buffer) == batches[1:]
    stats = gail.pretrain(disc, base, steps=2, batch=3, generator=torch.Generator().manual_seed(0))
    assert len(stats) == 2 and all(len(b) == 3 and b[0][: len(enc.encode("plan:"))] == enc.encode("plan:") for b in disc.buffer)
    history, _ = gail.train_gail(minirl.load_model("base"), datasets.load_demos()[:16], gail.GAILConfig(expert_batch=16),
                                 GRPOConfig(steps=1, prompts_per_step=1, group_size=2, beta=0.0), pretrain_steps=2)
    assert len(history) == 1 and "d_expert" in history[0]  # the warm start's statistics are not merged into GRPO's steps


def test_the_discriminator_keeps_the_first_blocks_of_the_base(base):
    """disc_layers=k: the network is the base's embeddings, its first k blocks (copied, not shared) and
    its final LayerNorm; more blocks than the base has is an error."""
    disc = gail.Discriminator(datasets.load_demos()[:8], gail.GAILConfig(disc_layers=2), policy=base, base=base)
    trunk = disc.model.transformer
    assert len(trunk.h) == trunk.config.n_layer == 2 and trunk.h[0] is not base.h[0]
    ids = torch.tensor([gail.plan_sequences()[7]])
    with torch.no_grad():
        x = base.wte(ids) + base.wpe(torch.arange(ids.size(1))[None])
        for block in base.h[:2]:
            x = block(x, None, None, 0, None, None)
        assert torch.allclose(trunk.hidden_states(ids), base.ln_f(x), atol=1e-6)
    with pytest.raises(ValueError, match="disc_layers"):
        gail.Discriminator(datasets.load_demos()[:8], gail.GAILConfig(disc_layers=7), policy=base, base=base)


def test_the_discriminator_labels_the_expert_1_and_the_policy_0(base):
    """The loss of an update is the cross-entropy with label 1 on the demonstrations and 0 on the
    policy's samples, from logits computed here before the update (the whole demonstration set is
    the expert batch, so its order does not matter); the score head starts random so that swapping
    the two batches changes the number. After a few updates D is above 1/2 on every demonstration
    and below it on the policy's (invalid) plan."""
    enc = minirl.load_tokenizer()
    demos = datasets.load_demos()[:16]
    disc = gail.Discriminator(demos, gail.GAILConfig(discriminator="gail", expert_batch=16, disc_lr=1e-3, disc_steps=1),
                              base=base)
    with torch.no_grad():
        torch.nn.init.normal_(disc.model.score.weight, std=0.5, generator=torch.Generator().manual_seed(1))
    expert = [enc.encode_ordinary(d["prompt"]) + enc.encode_ordinary(d["completion"]) + [enc.eot_token] for d in demos]
    policy = [enc.encode("plan: run run the movie was .")] * 4
    with torch.no_grad():
        e, p = disc.f(expert).tolist(), disc.f(policy).tolist()
    assert abs(sum(e) / len(e) - sum(p) / len(p)) > 0.05  # the two sides start apart: a swap shows
    nll = lambda x, label: math.log1p(math.exp(-x if label else x))  # noqa: E731  -log sigmoid(+-x)
    want = 0.5 * (sum(nll(x, 1) for x in e) / len(e) + sum(nll(x, 0) for x in p) / len(p))
    stats = disc.update(policy)
    assert stats["disc_loss"] == pytest.approx(want, abs=1e-5)
    assert stats["d_expert"] == pytest.approx(sum(1 / (1 + math.exp(-x)) for x in e) / len(e), abs=1e-5)
    assert stats["d_policy"] == pytest.approx(sum(1 / (1 + math.exp(-x)) for x in p) / len(p), abs=1e-5)
    for _ in range(4):
        disc.update(policy)
    with torch.no_grad():
        assert disc.logits(expert).min().item() > 0 > disc.logits(policy[:1]).item()
