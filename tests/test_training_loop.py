"""The write-the-loop checker: a right loop passes; each planted mistake is caught and named."""
import pytest
import torch

from minirl import check
from minirl.lm.sampling import completion_logits, completion_logprobs
from minirl.ops import token_logprobs
from minirl.train.training import training_batches

pytestmark = pytest.mark.slow  # each check trains the tiny GPT for a few seconds


def loop(policy, reference, task, config, tokenizer, *, detach=True, mask_advantages=True, group_mean=True,
         zero="before", sign=1.0):
    """REINFORCE with KL-shaped rewards and a per-prompt mean baseline, written apart from minirl's
    trainer; each keyword plants one mistake."""
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    parts = []
    for _, rollout in training_batches(policy, task, config, generator, tokenizer, desc="test"):
        mask = rollout.mask
        logp = token_logprobs(completion_logits(policy, rollout), rollout.tokens) * mask  # (B, T)
        with torch.no_grad():
            ref = completion_logprobs(reference, rollout)
        kl = ((logp.detach() if detach else logp) - ref) * mask
        rewards = task.token_rewards(rollout, tokenizer) - sign * config.beta * kl  # (B, T)
        totals, G = rewards.sum(1), config.group_size
        baseline = totals.view(-1, G).mean(1).repeat_interleave(G) if group_mean else totals.mean()
        advantages = (totals - baseline)[:, None] * (mask if mask_advantages else torch.ones_like(logp))
        loss = -(advantages * (logp if mask_advantages else
                               token_logprobs(completion_logits(policy, rollout), rollout.tokens))).sum() / len(totals)
        if zero == "before":
            opt.zero_grad()
        loss.backward()
        if zero == "between":
            opt.zero_grad()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        opt.step()
        parts.append({"rollout": rollout, "rewards": rewards, "advantages": advantages, "loss": loss})
    return parts


def verdict(capsys, fn) -> str:
    check.reinforce_loop(fn)
    return capsys.readouterr().out


def test_a_right_loop_passes(capsys):
    assert verdict(capsys, loop).startswith("PASS reinforce_loop: the first batch")


@pytest.mark.parametrize("planted, part, says", [
    ({"detach": False}, "advantages", "carry a gradient"),
    ({"mask_advantages": False}, "advantages", "mask forgotten"),
    ({"group_mean": False}, "advantages", "mean over the whole batch"),
    ({"zero": "between"}, "the optimiser step", "did not move"),
    ({"zero": "never"}, "the optimiser step", "after 2 steps"),
    ({"sign": -1.0}, "rewards", "wrong sign"),
])
def test_each_planted_mistake_is_named(capsys, planted, part, says):
    out = verdict(capsys, lambda *args: loop(*args, **planted))
    assert out.startswith(f"FAIL reinforce_loop: {part}:") and says in out, out


def test_an_unfinished_or_crashing_loop(capsys):
    def unfinished(*args):
        raise NotImplementedError("exercise: write your solution here")
    assert "not implemented yet" in verdict(capsys, unfinished)
    assert "the loop raised ZeroDivisionError" in verdict(capsys, lambda *args: 1 / 0)
    assert "return a list with one dict per step" in verdict(capsys, lambda *args: None)
