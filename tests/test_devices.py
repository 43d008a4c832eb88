"""The same code on a GPU (item 1 of the GPU checklist, docs/measurements.md): logits, sampled log-probs, every loss
and advantage, value and gradient, equal on the CPU and on the accelerator; each trainer, and
`evaluate`, runs on it with the CPU generator it is given: the policy-gradient trainers, SFT, DPO
(its reference on the same device), RAFT, GAIL, best-of-N (whose exact distribution takes tensors
on the device too) and GRPO on multi-turn episodes with the calculator. On MPS, which has no
float64, whatever computes in float64 either works or is refused by minirl with a clear error,
never by torch. Skipped where there is no CUDA (or MPS) device. Tolerances: 1e-4 on logits and
log-probs of the tiny GPT (fp32 kernels differ in their summation order), 1e-5 on the losses and
advantages of small float32 tensors.
"""
import math
import os
import traceback

import pytest
import torch

import minirl
from minirl import advantages, kl, losses
from minirl.lm import reward_head
from minirl.lm.sampling import completion_logprobs
from minirl.train import best_of_n as bon, gail, rlhf, sft
from minirl.train.dpo import DPOConfig, train_dpo
from minirl.train.grpo import GRPOConfig, train_grpo
from minirl.train.pg import PGConfig, train_policy_gradient
from minirl.train.ppo import PPOConfig, train_ppo
from minirl.train.raft import RAFTConfig, train_raft
from minirl.world import datasets, evaluate, tasks

ACCELERATORS = [d for d, ok in (("cuda", torch.cuda.is_available()), ("mps", torch.backends.mps.is_available())) if ok]
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not ACCELERATORS, reason="needs a CUDA (or MPS) device: item 1 of the GPU checklist (docs/measurements.md)")]
DEVICES = ACCELERATORS or ["cuda"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
PACKAGE = os.path.dirname(os.path.abspath(minirl.__file__)) + os.sep
needs_mps = pytest.mark.skipif(not torch.backends.mps.is_available(), reason="needs an MPS device (it has no float64)")


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


def on_device(model, device) -> bool:
    return all(p.device.type == device for p in model.parameters())


@pytest.mark.parametrize("device", DEVICES)
def test_sft_trains_on_the_device_from_the_cpus_first_loss(device):
    """The first step's loss is taken before any update: the same number on the CPU and the device."""
    demos = [{"prompt": "order:", "completion": " one green tea please ."},
             {"prompt": "q: 12+7= a:", "completion": " 19"}]
    config = sft.SFTConfig(steps=2, batch_size=2, lr=1e-3)
    want = sft.train_sft(minirl.load_model("base"), demos, config)
    policy = minirl.load_model("base", device=device)
    got = sft.train_sft(policy, demos, config)
    assert got[0]["loss"] == pytest.approx(want[0]["loss"], abs=1e-4) and math.isfinite(got[1]["loss"])
    assert on_device(policy, device)
    assert sft.heldout_loss(policy, demos) < want[0]["loss"]


@pytest.mark.parametrize("device", DEVICES)
def test_dpo_trains_on_the_device_with_its_reference_there(device):
    """Offline DPO with the default reference (a frozen copy, on the policy's device) and with one
    given on the device: the first step at log 2, its log-probs those of the CPU run; online DPO
    samples and labels on the device; the evaluations' KL starts at 0."""
    pairs = datasets.load_preferences("train")[:8]
    config = DPOConfig(steps=2, batch_size=8, beta=1.0, lr=3e-4, eval_samples=8)
    cpu, _ = train_dpo(minirl.load_model("sft"), pairs, config)
    for reference in (None, minirl.load_model("sft", device=device)):
        policy = minirl.load_model("sft", device=device)
        history, evals = train_dpo(policy, pairs, config, reference=reference)
        assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)
        assert history[0]["chosen_logps"] == pytest.approx(cpu[0]["chosen_logps"], abs=1e-3)
        assert history[0]["rejected_logps"] == pytest.approx(cpu[0]["rejected_logps"], abs=1e-3)
        assert math.isfinite(history[1]["loss"]) and abs(evals[0]["kl"]) < 1e-4 and on_device(policy, device)
    online, _ = train_dpo(minirl.load_model("sft", device=device), None,
                          DPOConfig(steps=2, batch_size=4, online_every=1, eval_samples=8))
    assert online[0]["loss"] == pytest.approx(math.log(2), abs=1e-5) and math.isfinite(online[1]["loss"])


@pytest.mark.parametrize("device", DEVICES)
def test_raft_runs_a_round_on_the_device(device):
    config = RAFTConfig(rounds=1, prompts_per_round=2, n=2, sft_steps=1, batch_size=2)
    policy = minirl.load_model("base", device=device)
    for reward_fn in (None, minirl.world.rewards.order_gold_reward):
        history = train_raft(policy, tasks.orders_task(), config, reward_fn=reward_fn)
        assert len(history) == 1 and history[0]["best_reward"] >= history[0]["reward"]
        assert math.isfinite(history[0]["sft_loss"])
    assert on_device(policy, device)


@pytest.mark.parametrize("device", DEVICES)
def test_gail_runs_a_step_on_the_device(device):
    """One generator step (a warm start of one discriminator step first), the discriminator and its
    reference on the policy's device; the exact KL(expert || policy) reads the policy there."""
    policy = minirl.load_model("base", device=device)
    history, disc = gail.train_gail(policy, datasets.load_demos()[:16], gail.GAILConfig(expert_batch=16),
                                    GRPOConfig(steps=1, prompts_per_step=1, group_size=2, beta=0.0), pretrain_steps=1)
    assert len(history) == 1 and all(math.isfinite(history[0][k]) for k in ("disc_loss", "d_expert", "d_policy"))
    assert on_device(policy, device) and on_device(disc.model, device) and on_device(disc.reference, device)
    assert 0 < gail.expert_kl(policy) < math.inf


@pytest.mark.parametrize("device", DEVICES)
def test_best_of_n_samples_on_the_device_and_keeps_each_groups_best(device):
    def length(prompts, completions, **kwargs):
        return [float(len(c)) for c in completions]

    n = 4
    out = bon.best_of_n(minirl.load_model("base", device=device), ["order:", "plan:"], n, length, max_new_tokens=12,
                        generator=torch.Generator().manual_seed(0))
    assert out.rollout.tokens.device.type == device
    scores = [len(t) for t in out.rollout.texts]
    assert out.scores.tolist() == scores
    for i in range(2):
        group = scores[i * n:(i + 1) * n]
        assert out.best[i].item() == i * n + group.index(max(group))
    picked = bon.select_best(out.scores.to(device), n)
    assert picked.device.type == device and picked.tolist() == out.best.tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_multi_turn_episodes_on_the_device_have_the_cpu_models_log_probs(device):
    """Episodes sampled on the device (a CPU generator) with a calculator whose calls end at the
    digit 5, which the base model writes often: the policy's tokens have the CPU model's log-probs
    on the same tokens, the calculator's have none."""
    from minirl.lm.multiturn import calls, sample_episodes
    from minirl.world import tools

    acc = minirl.load_model("base", device=device)
    out = sample_episodes(acc, ["q: 38+47= a:", "q: 40+15= a:", "q: 7+5= a:"], tools.Calculator(call_end="5"),
                          group_size=4, max_new_tokens=tools.MAX_NEW_TOKENS, generator=torch.Generator().manual_seed(0))
    assert out.tokens.device.type == device and int(calls(out).sum()) > 0
    with torch.no_grad():
        want = completion_logprobs(minirl.load_model("base"), moved(out, "cpu"))
    policy = out.policy_mask.cpu()
    assert (policy * (out.logprobs.cpu() - want)).abs().max().item() <= 1e-4
    assert float(((1 - out.action_mask.cpu()) * out.mask.cpu() * out.logprobs.cpu()).abs().sum()) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_grpo_trains_with_the_calculator_on_the_device(device):
    policy = minirl.load_model("base", device=device)
    history = train_grpo(policy, tasks.tool_task(cost=0.1), GRPOConfig(steps=2, prompts_per_step=2, group_size=4))
    assert len(history) == 2 and all(math.isfinite(h["reward"]) for h in history) and on_device(policy, device)


@needs_cuda
def test_exact_best_of_n_distribution_on_cuda_tensors_equals_the_cpus():
    """Forty outputs with ties in the scores: the same distribution from CUDA tensors as from CPU ones."""
    g = torch.Generator().manual_seed(0)
    weights = torch.rand(40, generator=g, dtype=torch.float64)
    probs, scores = weights / weights.sum(), torch.randint(0, 8, (40,), generator=g).double()
    for n in (1, 3):
        want = bon.exact_distribution(probs, scores, n)
        got = bon.exact_distribution(probs.cuda(), scores.cuda(), n)
        assert torch.allclose(got.cpu(), want, rtol=0, atol=1e-12)
    picks, plain = scores[:10].cuda(), scores[10:].cuda()
    assert bon.kl_plugin_estimate(picks, plain, 3) == pytest.approx(bon.kl_plugin_estimate(picks.cpu(), plain.cpu(), 3))


def handled_or_refused_by_minirl(call, check):
    """`call()` either works (then `check` its result) or raises minirl's ValueError or TypeError: a
    `raise` statement in the package, not torch refusing a float64 tensor on MPS (torch's error
    surfaces on the package's line that called it, so the line itself is checked)."""
    try:
        out = call()
    except (ValueError, TypeError) as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        by_minirl = os.path.abspath(frame.filename).startswith(PACKAGE) and frame.line.startswith("raise")
        assert by_minirl, f"refused by torch, not by minirl ({frame.filename}:{frame.lineno} {frame.line}): {error}"
        assert "float64" in str(error) or "mps" in str(error).lower(), f"the refusal does not say why: {error}"
        return
    assert check(out), "handled, but not the CPU's numbers"


@needs_mps
def test_float64_on_mps_is_handled_or_refused_clearly():
    """MPS has no float64. Best-of-N's exact distribution and plug-in estimate, and the RLHF report
    (its KL and gold in float64), given MPS tensors and models: the CPU's numbers, or a clear refusal."""
    g = torch.Generator().manual_seed(0)
    weights = torch.rand(12, generator=g)
    probs, scores = weights / weights.sum(), torch.randint(0, 4, (12,), generator=g).float()
    want = bon.exact_distribution(probs, scores, 3)
    handled_or_refused_by_minirl(lambda: bon.exact_distribution(probs.to("mps"), scores.to("mps"), 3),
                                 lambda got: torch.allclose(got.cpu().double(), want, atol=1e-6))
    handled_or_refused_by_minirl(lambda: bon.kl_plugin_estimate(scores[:4].to("mps"), scores[4:].to("mps"), 3),
                                 lambda got: math.isfinite(got))
    report = lambda: rlhf.policy_report(minirl.load_model("sft", device="mps"),  # noqa: E731
                                        minirl.load_model("sft", device="mps"), samples=4)
    handled_or_refused_by_minirl(report, lambda got: abs(got["kl"]) < 1e-4)
