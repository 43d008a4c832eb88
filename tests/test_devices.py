"""The same code on a GPU (item 1 of the GPU checklist, docs/measurements.md): logits, sampled log-probs, every loss
and advantage, value and gradient, equal on the CPU and on the accelerator; each trainer, and
`evaluate`, runs on it with the CPU generator it is given. Skipped where there is no CUDA (or MPS)
device. Tolerances: 1e-4 on logits and log-probs of the tiny GPT (fp32 kernels differ in their
summation order), 1e-5 on the losses and advantages of small float32 tensors.
"""
import pytest
import torch

import minirl
from minirl import advantages, kl, losses
from minirl.lm import reward_head
from minirl.lm.sampling import completion_logprobs
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.train.pg import PGConfig, train_policy_gradient
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.world import evaluate, tasks

ACCELERATORS = [d for d, ok in (("cuda", torch.cuda.is_available()), ("mps", torch.backends.mps.is_available())) if ok]
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not ACCELERATORS, reason="needs a CUDA (or MPS) device: item 1 of the GPU checklist (docs/measurements.md)")]
DEVICES = ACCELERATORS or ["cuda"]


def moved(rollout, device):
    """The rollout with every tensor on `device` (texts and prompts unchanged)."""
    fields = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in vars(rollout).items()}
    return type(rollout)(**fields)


@pytest.mark.parametrize("device", DEVICES)
def test_logits_are_equal_on_cpu_and_the_device(device):
    cpu, acc = minirl.load_model("base"), minirl.load_model("base", device=device)
    ids = torch.randint(0, cpu.config.vocab_size, (4, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = cpu(ids), acc(ids.to(device)).cpu()
    assert (got - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("device", DEVICES)
def test_sampled_log_probs_equal_the_cpu_models_on_the_same_tokens(device):
    """Sample on the device with a CPU generator; feed the same tokens to the CPU model."""
    acc = minirl.load_model("base", device=device)
    out = minirl.sample(acc, ["q: 17+25= a:", "review: the plot was dull"], max_new_tokens=12, group_size=4,
                        generator=torch.Generator().manual_seed(0))
    assert out.tokens.device.type == device
    with torch.no_grad():
        want = completion_logprobs(minirl.load_model("base"), moved(out, "cpu"))
    assert (out.logprobs.cpu() - want).abs().max().item() <= 1e-4
    greedy = [minirl.sample(m, ["q: 17+25= a:"], max_new_tokens=6, temperature=0).texts
              for m in (acc, minirl.load_model("base"))]
    assert greedy[0] == greedy[1]


@pytest.mark.parametrize("device", DEVICES)
def test_a_generator_on_the_device_serves_and_one_elsewhere_is_refused(device):
    acc = minirl.load_model("base", device=device)
    out = minirl.sample(acc, ["plan:"], max_new_tokens=6, generator=torch.Generator(device).manual_seed(0))
    assert len(out.texts) == 1
    with pytest.raises(ValueError, match="the generator lives on"):
        minirl.sample(minirl.load_model("base"), ["plan:"], max_new_tokens=6, generator=torch.Generator(device))


def loss_inputs(device):
    g = torch.Generator().manual_seed(0)
    B, T = 6, 5
    logp = -torch.rand(B, T, generator=g) * 2
    old = logp + 0.3 * torch.randn(B, T, generator=g)
    ref = logp + 0.5 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    values, returns = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    logits, tokens = torch.randn(B, T, 7, generator=g), torch.randint(0, 7, (B, T), generator=g)
    mask = torch.ones(B, T)
    mask[1, 3:], mask[4, 1:] = 0, 0
    return [x.to(device) for x in (logp, old, ref, adv, values, returns, logits, tokens, mask)]


FUNCTIONS = {
    "policy_gradient_loss": lambda lp, o, r, a, v, R, lg, tk, m: losses.policy_gradient_loss(lp, a, m),
    "ppo_clip_loss": lambda lp, o, r, a, v, R, lg, tk, m: losses.ppo_clip_loss(lp, o, a, m)[0],
    "grpo_loss": lambda lp, o, r, a, v, R, lg, tk, m: losses.grpo_loss(lp, o, r, a, m, beta=0.1)[0],
    "value_loss": lambda lp, o, r, a, v, R, lg, tk, m: losses.value_loss(v + lp, R, m, old_values=v, clip_range=0.2),
    "sft_loss": lambda lp, o, r, a, v, R, lg, tk, m: losses.sft_loss(lg * (1 + lp[..., None]), tk, m),
    "kl_k1_k2_k3": lambda lp, o, r, a, v, R, lg, tk, m: (kl.kl_k1(lp, r) + kl.kl_k2(lp, r) + kl.kl_k3(lp, r)).sum(),
    "reward_to_go": lambda lp, o, r, a, v, R, lg, tk, m: (advantages.reward_to_go(lp * R, m, 0.9) * R).sum(),
    "gae": lambda lp, o, r, a, v, R, lg, tk, m: sum(x.sum() for x in advantages.gae(R * lp, v + lp, m, 0.9, 0.8)),
    "group_normalize": lambda lp, o, r, a, v, R, lg, tk, m: (advantages.group_normalize(lp.sum(1), 3) * a).sum(),
    "leave_one_out": lambda lp, o, r, a, v, R, lg, tk, m: (advantages.leave_one_out(lp.sum(1), 3) * a).sum(),
}


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("device", DEVICES)
def test_every_loss_and_advantage_value_and_gradient_match(device, name):
    def value_and_grad(on):
        inputs = loss_inputs(on)
        inputs[0].requires_grad_(True)
        out = FUNCTIONS[name](*inputs)
        out.backward()
        return out.item(), inputs[0].grad.cpu()

    (want, want_grad), (got, got_grad) = value_and_grad("cpu"), value_and_grad(device)
    assert got == pytest.approx(want, abs=1e-5)
    assert (got_grad - want_grad).abs().max().item() <= 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("train, config", [
    (train_policy_gradient, PGConfig(steps=2, prompts_per_step=2, group_size=2, beta=0.1)),
    (train_policy_gradient, PGConfig(steps=2, prompts_per_step=2, group_size=2, estimator="gae")),
    (train_ppo, PPOConfig(steps=2, prompts_per_step=2, group_size=2, minibatches=2)),
    (train_grpo, GRPOConfig(steps=2, prompts_per_step=2, group_size=2)),
], ids=["reinforce", "actor_critic", "ppo", "grpo"])
def test_each_trainer_runs_two_steps_on_the_device(device, train, config):
    policy = minirl.load_model("base", device=device)
    history = train(policy, tasks.reviews_task("negative"), config)
    assert len(history) == 2 and all(torch.isfinite(torch.tensor(h["reward"])) for h in history)
    assert next(policy.parameters()).device.type == device
    with_fn = train(policy, tasks.arithmetic_task(), config, reward_fn=minirl.world.rewards.arithmetic_reward)
    assert len(with_fn) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_evaluate_runs_on_the_device(device):
    model = minirl.load_model("base", device=device)
    report = evaluate.heldout_report(model, tasks.arithmetic_task(), reference=minirl.load_model("base", device=device),
                                     samples=1)
    assert 0 <= report["correct"] <= 1 and abs(report["kl"]) < 1e-4


@pytest.mark.parametrize("device", DEVICES)
def test_reward_model_trains_and_scores_on_the_device(device):
    from minirl.train import reward_model
    from minirl.world import datasets

    pairs = datasets.load_preferences("train")[:32]
    cpu, _ = reward_model.train_reward_model(pairs, reward_model.RMConfig(steps=2, batch_size=16))
    acc, _ = reward_model.train_reward_model(pairs, reward_model.RMConfig(steps=2, batch_size=16),
                                             base=minirl.load_model("base", device=device))
    texts = ["order: one matcha latte please .", "order: one espresso ."]
    assert torch.allclose(reward_head.score_texts(acc, texts), reward_head.score_texts(cpu, texts), atol=1e-3)
