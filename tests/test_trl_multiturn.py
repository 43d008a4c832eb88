"""Multi-turn GRPO against TRL (skipped when TRL is absent): on one batch of calculator episodes,
TRL's GRPOTrainer trains on exactly the tokens minirl's does, the calculator's answer left out.

TRL 1.16's `rollout_func` hands generation to the caller: ours calls minirl's own sampler
(`multiturn.sample_episodes`, the shipped tool model, the `Calculator`) and returns the episodes'
prompt ids, completion ids (the policy's and the calculator's tokens, as sampled), the sampler's
log-probs and `env_mask` = `Rollout.action_mask`. TRL takes `env_mask` as its `tool_mask` and
trains on completion_mask * tool_mask (trl/trainer/grpo_trainer.py, `_generate`: `tool_mask =
extra_fields.pop("env_mask", None)`; `_compute_loss`: `mask = completion_mask * inputs["tool_mask"]`).
The calls' costs reach TRL's rewards as an extra field of the rollout, which TRL forwards to the
reward functions. The trainer runs on the exported tool model and tokenizer (`minirl.lm.export`),
with `use_mask_positions`: the arithmetic prompts are 9 and 10 tokens, so TRL left-pads them, and
GPT-2 would otherwise score them at other positions than the sampler used (lesson 16).

minirl's side is its GRPO trainer's: rewards from `tasks.training_rewards` (the outcome plus the
calls' costs), `advantages.group_normalize`, log-probs of our GPT (`completion_logprobs`) and
`losses.grpo_loss` on `Rollout.policy_mask`. Old and reference log-probs are perturbed so that the
clip and the KL act, as in tests/test_trl_reference.py.
"""
import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

pytest.importorskip("trl", reason="TRL is not installed: `pip install -c constraints.txt -e .[dev]` pins it")

import minirl  # noqa: E402
from minirl import advantages, losses  # noqa: E402
from minirl.lm import export, multiturn  # noqa: E402
from minirl.lm.sampling import completion_logprobs  # noqa: E402
from minirl.world import tasks, tools  # noqa: E402

G, COST, BETA, EPS, SEED = 4, 0.1, 0.04, 0.2, 0
PROMPTS = ["q: 51+89= a:", "q: 48+28= a:", "q: 4+17= a:", "q: 20+52= a:"]  # 10, 10, 9 and 10 tokens
LOSS_TYPES = [("sequence_mean", "grpo"), ("token_mean", "bnpo"), ("token_mean", "dapo"), ("constant", "dr_grpo")]


def episode_fields(rollout) -> dict:
    """A Rollout as TRL's rollout_func returns it: per row, the prompt's ids (no padding), the
    completion up to and including EOS (the policy's tokens and the calculator's, as sampled),
    the sampler's log-probs (0 on the calculator's tokens), env_mask (1 where the policy wrote
    the token, 0 where the calculator did) and the calls' costs (an extra field: TRL passes it on
    to the reward functions)."""
    lengths = rollout.mask.sum(1).long().tolist()
    rows = list(enumerate(lengths))
    return {
        "prompt_ids": [rollout.prompt_tokens[i][rollout.prompt_mask[i].bool()].tolist() for i, _ in rows],
        "completion_ids": [rollout.tokens[i, :n].tolist() for i, n in rows],
        "logprobs": [rollout.logprobs[i, :n].tolist() for i, n in rows],
        "env_mask": [rollout.action_mask[i, :n].long().tolist() for i, n in rows],
        "env_reward": rollout.env_rewards.sum(1).tolist(),
    }


def calculator_costs(prompts, completions, env_reward, **kwargs):
    """The calls' costs, as the rollout reported them (minirl adds them to the outcome)."""
    return env_reward


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """TRL's GRPOTrainer on the exported tool model with a rollout_func that runs minirl's sampler
    on the minirl model, and one batch it generated and scored: (trainer, TRL's batch, the Rollout,
    the task, the minirl policy). Built once: TRL's imports and the exports take most of the time."""
    workdir = tmp_path_factory.mktemp("trl_multiturn")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    policy, task = minirl.load_model("tool"), tasks.tool_task(COST)
    path = export.save(workdir / "tool", policy)["policy"]  # the policy and the tokenizer
    sampled = []

    def rollout_func(prompts, trainer):
        assert prompts == [p for p in prompts[::G] for _ in range(G)], "TRL hands over each prompt G times in a row"
        rollout = multiturn.sample_episodes(policy, prompts[::G], task.env, max_new_tokens=task.max_new_tokens,
                                            max_calls=task.max_calls, group_size=G,
                                            generator=torch.Generator().manual_seed(SEED))
        sampled.append(rollout)
        return episode_fields(rollout)

    args = GRPOConfig(**{
        "output_dir": str(workdir / "output"), "use_cpu": True, "report_to": [], "save_strategy": "no",
        "logging_strategy": "no", "per_device_train_batch_size": G * len(PROMPTS), "num_generations": G,
        "max_completion_length": task.max_new_tokens, "beta": BETA, "epsilon": EPS, "temperature": 1.0,
        "mask_truncated_completions": False, "scale_rewards": "group", "bf16": False, "fp16": False,
        "dataloader_num_workers": 0, "disable_tqdm": True, "seed": 0})
    trainer = GRPOTrainer(model=str(path), reward_funcs=[tools.tool_reward, calculator_costs], args=args,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
                          processing_class=export.to_hf_tokenizer(), rollout_func=rollout_func)
    for model in (trainer.model, trainer.ref_model):
        export.use_mask_positions(model)  # left-padded prompts: positions from the mask, as the sampler's
    trainer.model.train()
    batch = trainer._generate_and_score_completions([{"prompt": p} for p in PROMPTS for _ in range(G)])
    assert len(sampled) == 1
    return trainer, batch, sampled[0], task, policy


def test_trl_batch_is_the_rollout(world):
    """TRL's batch holds minirl's episodes token for token, its loss mask is the policy's tokens,
    its advantages are group_normalize of minirl's rewards, and TRL scores the tokens as minirl's
    sampler did."""
    tr, batch, rollout, task, policy = world
    n_calls = multiturn.calls(rollout)
    assert n_calls.sum() > 0 and (n_calls == 0).any(), "some episodes call the calculator, some do not"
    assert (rollout.prompt_mask == 0).any(), "prompts of different lengths: TRL left-pads"
    assert torch.equal(batch["prompt_ids"], rollout.prompt_tokens)
    assert torch.equal(batch["prompt_mask"], rollout.prompt_mask)
    assert torch.equal(batch["completion_ids"], rollout.tokens)
    assert torch.equal(batch["completion_mask"].float(), rollout.mask)
    assert list(tr._logs["completion"]) == rollout.texts  # what TRL's reward functions read
    assert "tool_mask" in batch, "TRL read no env_mask from the rollout (it looks for exactly that key)"
    loss_mask = (batch["completion_mask"] * batch["tool_mask"]).float()
    assert torch.equal(loss_mask, rollout.action_mask), "TRL's loss mask is the policy's tokens"
    assert (rollout.mask - rollout.action_mask).sum() > 0, "the calculator's tokens are in the batch, out of the mask"
    assert batch["num_items_in_batch"].item() == rollout.action_mask.sum().item()  # DAPO's token count

    rewards = tasks.training_rewards(task, rollout, minirl.load_tokenizer()).sum(1)  # minirl's GRPO rewards
    ours = advantages.group_normalize(rewards, G)
    assert ours.abs().max() > 0.5, "some group's rewards differ"
    assert torch.allclose(batch["advantages"], ours, atol=1e-6)

    # TRL's scoring of the batch (its loss's forward pass) gives the sampler's log-probs on the
    # policy's tokens: the position hook at work (without it the gap is about 17 on the 9-token prompt)
    assert torch.equal(batch["sampling_per_token_logps"], rollout.logprobs)
    seq = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        trl_logp, _, _ = tr._get_per_token_logps_and_entropies(tr.model, seq, attn, rollout.tokens.size(1))
        minirl_logp = completion_logprobs(policy, rollout)
    assert (trl_logp - rollout.logprobs)[rollout.action_mask.bool()].abs().max() < 1e-4
    assert (trl_logp - minirl_logp)[rollout.mask.bool()].abs().max() < 1e-4


def hf_grad(grads: dict, name: str) -> torch.Tensor:
    g = grads[f"transformer.{name}"]
    return g.t() if name.endswith(export.CONV1D) else g


@pytest.mark.parametrize("aggregation, loss_type", LOSS_TYPES)
def test_multiturn_grpo_loss_matches_trl(aggregation, loss_type, world):
    """Same episodes, same perturbed old and reference log-probs, same advantages: TRL's loss and
    gradients equal minirl's grpo_loss on the policy's tokens; with the calculator's tokens left in
    (mask = completion_mask) the loss is another."""
    tr, batch, rollout, task, policy = world
    batch = dict(batch)
    tr.loss_type = loss_type  # what GRPOTrainer.__init__ does with args.loss_type
    model = tr.model.train()
    policy.train()
    policy.zero_grad()
    with torch.no_grad():
        logp = completion_logprobs(policy, rollout)  # our GPT, positions from the mask
    g = torch.Generator().manual_seed(1)
    batch["old_per_token_logps"] = logp + 0.3 * torch.randn(logp.shape, generator=g)
    batch["ref_per_token_logps"] = logp + 0.5 * torch.randn(logp.shape, generator=g)
    tr.current_gradient_accumulation_steps = 1
    rewards = tasks.training_rewards(task, rollout, minirl.load_tokenizer()).sum(1)
    adv = advantages.group_normalize(rewards, G)

    model.zero_grad()
    trl_loss = tr._compute_loss(model, batch)
    trl_loss.backward()
    trl_grads = {name: p.grad.clone() for name, p in model.named_parameters()}

    def ours(mask):
        return losses.grpo_loss(completion_logprobs(policy, rollout), batch["old_per_token_logps"],
                                batch["ref_per_token_logps"], adv, mask, clip_eps=EPS, beta=BETA,
                                aggregation=aggregation, max_len=task.max_new_tokens,
                                kl_ratio_weight=True)  # TRL's use_bias_correction_kl, on by default

    loss, diag = ours(rollout.policy_mask)
    loss.backward()
    assert 0 < diag["clip_fraction"] < 1
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    for name, p in policy.named_parameters():
        assert torch.allclose(p.grad, hf_grad(trl_grads, name), atol=1e-6), name

    policy.zero_grad()
    leaky, _ = ours(rollout.mask)  # the calculator's tokens in the loss, as if env_mask were ignored
    leaky.backward()
    gap = max((p.grad - hf_grad(trl_grads, name)).abs().max().item() for name, p in policy.named_parameters())
    assert abs(leaky.item() - trl_loss.item()) > 1e-4 and gap > 1e-2, "the mask must matter on this batch"
