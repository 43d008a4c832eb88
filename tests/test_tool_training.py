"""Training on multi-turn episodes: the environment's tokens stay out of the policy loss, and each
call's reward lands on the token that ended it."""
import copy

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


def test_grpo_trains_on_episodes_and_the_others_refuse_them():
    task = tasks.tool_task(cost=0.1)
    policy = minirl.load_model("base")
    history = train_grpo(policy, task, GRPOConfig(steps=2, prompts_per_step=2, group_size=4))
    assert {"correct", "calls"} <= set(history[-1])
    for train, config in ((train_policy_gradient, PGConfig(steps=1)), (train_ppo, PPOConfig(steps=1))):
        with pytest.raises(ValueError, match="does not yet keep them out of its loss"):
            train(minirl.load_model("base"), task, config)
    assert isinstance(task.env, tools.Calculator) and task.env.cost == 0.1
