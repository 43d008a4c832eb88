"""Training on multi-turn episodes: the environment's tokens stay out of the policy loss (GRPO's and
the policy gradient's), and each call's reward lands on the token that ended it, or in the outcome."""
import copy
import math

import pytest
import torch

import minirl
from minirl.core import advantages as adv
from minirl.core.ops import token_logprobs
from minirl.lm.multiturn import Reply, calls, sample_episodes
from minirl.lm.sampling import Rollout, completion_logits
from minirl.train import GRPOConfig, PGConfig, PPOConfig, train_grpo, train_policy_gradient, train_ppo
from minirl.train.grpo import grpo_update
from minirl.world import tasks, tools


class Echo:
    """Answers a call ending in the digit 5 (the second digit of many answers) with ' is 7'."""
    call_end = "5"

    def respond(self, prompt, episode):
        return Reply(" is 7", reward=-0.5)


def test_a_grpo_step_counts_only_the_policys_tokens():
    """grpo_update's gradient (beta 0, one inner step, sequence_mean) = autograd of the GRPO
    surrogate written out over the policy's tokens only: -(1/B) sum_i A_i (1/n_i) sum_t ratio_it,
    n_i the policy's tokens in episode i, the ratio 1 in value."""
    model = minirl.load_model("base")
    G = 8
    rollout = sample_episodes(model, ["q: 38+47= a:", "q: 40+15= a:"], Echo(), max_new_tokens=20, max_calls=2,
                              group_size=G, generator=torch.Generator().manual_seed(0))
    assert int(calls(rollout).sum()) > 0
    rewards = torch.arange(2 * G, dtype=torch.float32) % 3  # any rewards that differ within each group
    config = GRPOConfig(group_size=G, beta=0.0, max_grad_norm=float("inf"))

    reference = copy.deepcopy(model)
    logp = token_logprobs(completion_logits(reference, rollout), rollout.tokens)  # (B, T)
    ratio = (logp - logp.detach()).exp()
    A, own = adv.group_normalize(rewards, G), rollout.action_mask
    (-(A * (ratio * own).sum(1) / own.sum(1)).mean()).backward()

    trained = copy.deepcopy(model)
    opt = torch.optim.SGD(trained.parameters(), lr=0.0)  # leaves the gradient in .grad and the weights as they are
    grpo_update(trained, opt, rollout, rewards, torch.zeros_like(rollout.logprobs), config, max_len=20)
    for (name, p), q in zip(reference.named_parameters(), trained.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6), name


def rollout_of(enc, prompt: str, pieces: list[tuple[str, bool]], reward_on_call: float) -> Rollout:
    """A one-row multi-turn rollout written by hand: (text, written by the policy) pieces, then EOS."""
    tokens, action = [], []
    for text, policy in pieces:
        ids = enc.encode_ordinary(text)
        tokens, action = tokens + ids, action + [float(policy)] * len(ids)
    tokens, action = tokens + [enc.eot_token], action + [1.0]
    env_rewards = [0.0] * len(tokens)
    for t in range(len(tokens) - 1):
        if action[t] == 1.0 and action[t + 1] == 0.0:
            env_rewards[t] = reward_on_call
    T, ids = len(tokens), enc.encode_ordinary(prompt)
    return Rollout(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), torch.tensor([tokens]), torch.zeros(1, T),
                   torch.ones(1, T), torch.tensor([False]), prompts=[prompt],
                   texts=["".join(text for text, _ in pieces)], action_mask=torch.tensor([action]),
                   env_rewards=torch.tensor([env_rewards]))


def test_the_outcome_lands_on_the_last_token_and_each_calls_cost_on_its_call():
    enc, task = minirl.load_tokenizer(), tasks.tool_task(cost=0.25)
    called = rollout_of(enc, "q: 47+38= a:", [(" [47+38=", True), ("85]", False), (" 85", True)], -0.25)
    r = tasks.training_rewards(task, called, enc)[0].tolist()
    call_at = len(enc.encode_ordinary(" [47+38=")) - 1
    assert r[call_at] == -0.25 and r[-1] == 1.0 and sum(x != 0 for x in r) == 2
    wrong = rollout_of(enc, "q: 47+38= a:", [(" [47+38=", True), ("85]", False), (" 84", True)], -0.25)
    assert tasks.training_rewards(task, wrong, enc)[0].sum().item() == -0.25
    direct = rollout_of(enc, "q: 47+38= a:", [(" 85", True)], 0.0)
    assert tasks.training_rewards(task, direct, enc)[0].tolist() == [0.0, 0.0, 1.0]
    assert task.gold(called) == {"correct": 1.0, "calls": 1.0}


def test_outcome_only_costs_sum_to_the_same_return_at_the_last_token():
    enc = minirl.load_tokenizer()
    per_turn, outcome = tasks.tool_task(cost=0.25), tasks.tool_task(cost=0.25, per_turn=False)
    assert outcome.env.cost == 0.0  # the calculator rewards nothing; the outcome carries the cost
    pieces = [(" [47+38=", True), ("85]", False), (" 85", True)]
    a = tasks.training_rewards(per_turn, rollout_of(enc, "q: 47+38= a:", pieces, -0.25), enc)[0]
    b = tasks.training_rewards(outcome, rollout_of(enc, "q: 47+38= a:", pieces, 0.0), enc)[0]
    assert a.sum().item() == b.sum().item() == 0.75 and b.tolist()[-1] == 0.75 and int((b != 0).sum()) == 1


def reward_to_go_loop(rewards: list[float]) -> list[float]:
    return [sum(rewards[t:]) for t in range(len(rewards))]


@pytest.mark.parametrize("per_turn", [True, False])
def test_a_policy_gradient_step_counts_only_the_policys_tokens(monkeypatch, per_turn):
    """train_policy_gradient on episodes (reward_to_go, gamma 1): the surrogate it minimizes gets the
    policy's log-probs on the policy's tokens and zero on the calculator's, the action mask as its
    mask, and as advantages the returns-to-go of the per-token rewards, by a plain loop over each
    row's tokens (a call's cost on its token, or in the outcome)."""
    from minirl.train import pg
    seen = []
    real = pg.policy_gradient_loss
    monkeypatch.setattr(pg, "policy_gradient_loss", lambda lp, a, m: seen.append((lp.detach(), a, m)) or real(lp, a, m))
    batches = []
    real_batches = pg.training_batches
    monkeypatch.setattr(pg, "training_batches", lambda *a, **k: (batches.append(b) or b for b in real_batches(*a, **k)))
    task = tasks.tool_task(cost=0.3, per_turn=per_turn)
    train_policy_gradient(minirl.load_model("tool"), task, PGConfig(steps=1, prompts_per_step=4, group_size=4))
    (_, rollout), (logprobs, advantages, mask) = batches[0], seen[0]
    assert int(calls(rollout).sum()) > 0 and torch.equal(mask, rollout.action_mask)
    assert float((logprobs * (1 - rollout.action_mask)).abs().sum()) == 0
    right = tools.tool_reward(rollout.prompts, rollout.texts)
    for b in range(len(rollout.texts)):
        n, own = int(rollout.mask[b].sum()), rollout.action_mask[b].tolist()
        r = [0.0] * n
        for t in range(n - 1):
            if per_turn and own[t] == 1.0 and own[t + 1] == 0.0:  # the token that ended a call
                r[t] -= 0.3
        r[n - 1] += right[b] - (0.0 if per_turn else 0.3 * int(calls(rollout)[b]))
        assert torch.allclose(advantages[b, :n], torch.tensor(reward_to_go_loop(r)), atol=1e-6), b


def test_every_policy_trainer_trains_on_episodes():
    task = tasks.tool_task(cost=0.1)
    for train, config in ((train_grpo, GRPOConfig(steps=2, prompts_per_step=2, group_size=4)),
                          (train_policy_gradient, PGConfig(steps=2, prompts_per_step=2, group_size=4, estimator="gae")),
                          (train_ppo, PPOConfig(steps=2, prompts_per_step=2, group_size=4, minibatches=2))):
        history = train(minirl.load_model("base"), task, config)
        assert {"correct", "calls"} <= set(history[-1]) and all(math.isfinite(h["reward"]) for h in history)
    assert isinstance(task.env, tools.Calculator) and task.env.cost == 0.1


def test_ppo_on_episodes_penalizes_and_updates_the_policys_tokens_only(monkeypatch):
    """PPO's collection-time batch on calculator episodes, against a plain loop over each row's
    tokens: the reward is -beta * (log pi_old - log pi_ref) on the policy's tokens, 0 on the
    calculator's, and the score on the policy's last token; the advantages are whitened over the
    policy's tokens; the clipped surrogate gets the action mask."""
    from minirl.lm.sampling import completion_logprobs
    from minirl.train import ppo as ppo_module
    config = PPOConfig(steps=1, prompts_per_step=4, group_size=4, minibatches=1, beta=0.2)
    policy = minirl.load_model("tool")
    trainer = ppo_module.PPO(policy, config)
    trainer.reference = minirl.load_model("base")  # a reference that differs from the policy: the KL is not 0
    rollout = sample_episodes(policy, tasks.tool_task().test_prompts[:4], tools.Calculator(), max_new_tokens=20,
                              group_size=4, generator=torch.Generator().manual_seed(3))
    assert int(calls(rollout).sum()) > 0
    score = torch.arange(16, dtype=torch.float32) / 8
    batch = trainer.score_batch(rollout, score)
    ref = completion_logprobs(minirl.load_model("base"), rollout)
    for b in range(16):
        n, own = int(rollout.mask[b].sum()), rollout.action_mask[b].tolist()
        last = max(t for t in range(n) if own[t])
        want = [-0.2 * (float(rollout.logprobs[b, t]) - float(ref[b, t])) if own[t] else 0.0 for t in range(n)]
        want[last] += float(score[b])
        assert torch.allclose(batch["rewards"][b, :n], torch.tensor(want), atol=1e-5), b
    own = rollout.action_mask.bool()
    assert abs(float(batch["advantages"][own].mean())) < 1e-5 and abs(float(batch["advantages"][own].std()) - 1) < 1e-2
    seen = []
    real = ppo_module.ppo_clip_loss
    monkeypatch.setattr(ppo_module, "ppo_clip_loss", lambda lp, old, a, m, **k: seen.append(m) or real(lp, old, a, m, **k))
    trainer.update(rollout, batch, 0)  # one minibatch: every row, in a shuffled order

    def rows(x):
        return sorted(map(tuple, x.tolist()))
    assert rows(seen[0]) == rows(rollout.action_mask) != rows(rollout.mask)
