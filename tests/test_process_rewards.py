"""GRPO with process supervision and a reward model as RL's reward on the steps task: the step
advantages against a plain loop over groups and steps, each step's last token found by hand, and the
PRM's probabilities landing on those tokens."""
import pytest
import torch

import minirl
from minirl.core import advantages
from minirl.lm.process_head import from_policy, step_probabilities
from minirl.lm.sampling import sample
from minirl.lm.tokenizer import load_tokenizer
from minirl.train import process_rewards
from minirl.train.grpo import GRPOConfig, group_advantages

ENC = load_tokenizer()


def loop_process_advantages(rewards, ends, group_size, eps=1e-4):
    """The definition, a group and a step at a time."""
    B, T = rewards.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    for g in range(0, B, group_size):
        steps = [(i, t) for i in range(g, g + group_size) for t in range(T) if ends[i, t]]
        values = torch.tensor([float(rewards[i, t]) for i, t in steps], dtype=torch.float64)
        if len(steps) < 2:
            continue
        mean, std = values.mean(), values.std()
        for (i, t), v in zip(steps, values):
            out[i, :t + 1] += (v - mean) / (std + eps)  # every token at or before the step's end
    return out


def test_process_advantages_match_the_loop():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(6, 5, generator=gen, dtype=torch.float64)
    ends = torch.rand(6, 5, generator=gen) < 0.4
    ends[3] = False  # a completion with no step
    ends[4:] = False
    ends[4, 2] = True  # a group with one step: no baseline, advantage 0
    got = advantages.process_advantages(rewards * ends, ends, 2)
    assert torch.allclose(got, loop_process_advantages(rewards, ends, 2), atol=1e-12)
    assert bool((got[4:] == 0).all())


def test_grpo_process_mode_reads_nonzero_token_rewards_as_steps():
    rewards = torch.tensor([[0.0, 0.9, 0.0, 0.2], [0.0, 0.5, 0.0, 0.0], [0.7, 0.0, 0.1, 0.3], [0.0, 0.0, 0.0, 0.4]])
    got = group_advantages(rewards, GRPOConfig(group_size=2, advantage="process"))
    assert torch.allclose(got.double(), loop_process_advantages(rewards, rewards != 0, 2), atol=1e-6)


def test_process_advantages_refuse_bad_shapes():
    with pytest.raises(ValueError, match="bool tensor"):
        advantages.process_advantages(torch.zeros(4, 3), torch.zeros(4, 3), 2)
    with pytest.raises(ValueError, match="does not divide"):
        advantages.process_advantages(torch.zeros(3, 3), torch.zeros(3, 3, dtype=torch.bool), 2)


@pytest.mark.parametrize("text, ends", [(" 46 51", [1, 3]), (" 4  105 x", [0, 4, 6]), ("", []), (" 5", [0])])
def test_step_end_tokens(text, ends):
    """Tokens ' 4' '6' ' 5' '1': the steps end on '6' (1) and '1' (3); EOS and what follows are ignored."""
    assert process_rewards.step_end_tokens(ENC, ENC.encode_ordinary(text) + [ENC.eot_token, 7]) == ends


def test_prm_rewards_land_on_each_steps_last_token():
    policy = minirl.load_model("steps")
    prm = from_policy(policy)
    with torch.no_grad():
        prm.score.weight.normal_(generator=torch.Generator().manual_seed(1))
    rollout = sample(policy, ["q: 12+34+5= a:", "q: 1+2+3+4= a:"], max_new_tokens=10, group_size=4,
                     generator=torch.Generator().manual_seed(0))
    task = process_rewards.prm_task(prm, 3)
    rewards = task.token_rewards(rollout, ENC)
    probs = step_probabilities(prm, rollout.prompts, [[" " + w for w in t.split()] for t in rollout.texts])
    for i, (row, p) in enumerate(zip(rewards, probs)):
        nonzero = row.nonzero().flatten().tolist()
        assert nonzero == process_rewards.step_end_tokens(ENC, rollout.tokens[i].tolist())
        assert torch.allclose(row[nonzero].double(), torch.tensor(p, dtype=torch.float64), atol=1e-6)
    outcome = process_rewards.orm_task(prm, 3).token_rewards(rollout, ENC)
    assert bool(((outcome != 0).sum(dim=1) == 1).all())
    assert task.gold(rollout).keys() == minirl.world.steps.steps_task(3).gold(rollout).keys()
