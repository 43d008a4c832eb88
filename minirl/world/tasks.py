"""RL tasks on the tiny world: prompts, per-token rewards for training, gold metrics for judging.

A task turns a `Rollout` into a (B, T) tensor of per-token rewards (what the learner sees) and
into gold metrics (what we judge it by). Sequence-level rewards land on each row's last action
token (EOS, or the token that hit the length limit).

A trainer can instead learn from any reward function with TRL's signature,

    reward_fn(prompts: list[str], completions: list[str], **kwargs) -> list[float]

called with the keyword arguments `completion_ids` (each completion's token ids through EOS) and
`truncated` (True where a completion hit the length limit instead of ending with EOS), so a
learned reward model can tell the two apart; the task still gives the prompts and the gold
metrics. What the function returns is checked: one finite number per completion.

`custom_task` builds a task from your own prompts and such a function: the homework way to train
on a prompt list of your own.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch

from ..core import validate
from ..lm import multiturn
from ..lm.model import GPTConfig
from ..lm.sampling import Rollout
from ..lm.tokenizer import load_tokenizer
from . import datasets, grammar, rewards, tools

__all__ = ["RewardFn", "Task", "last_token_rewards", "REVIEW_STARTS", "reviews_task", "arithmetic_task",
           "orders_task", "plans_task", "tool_task", "custom_task", "reward_scores", "training_rewards"]

RewardFn = Callable[..., list]


@dataclass
class Task:
    """What a trainer trains on: prompts, the completion length, the rewards the learner sees and
    the gold metrics it is judged by. The builders below make the course's tasks; `custom_task`
    makes one from your own prompts and reward function. Every trainer that takes a task (GRPO,
    PPO, policy gradient, RAFT) reads it; their configs hold none of these settings.

    name            a short name, for error messages ("task 'arithmetic' gave non-finite rewards")
    train_prompts   list[str], the prompts training draws from, at random with replacement
                    (`minirl.train.training.training_batches`)
    test_prompts    list[str], held-out prompts, never trained on: `evaluate.heldout_report` samples
                    them
    max_new_tokens  the most tokens a completion may have: the sampler stops a row there and marks
                    it `truncated`; the longest prompt plus this must fit the model's context
                    (n_ctx). GRPO's 'constant' aggregation divides by it
    token_rewards   (rollout, tokenizer) -> (B, T) tensor, the reward of each completion token (0 on
                    padding): what the learner sees, through `training_rewards`, which checks its
                    shape and that it is finite; a trainer given a reward_fn uses that instead
    gold            rollout -> dict[str, float], named gold metrics (batch means): every trainer adds
                    them to each step's metrics, and `evaluate.heldout_report` to its report; names
                    other than the trainer's own ('reward', 'kl', ...), which would overwrite them
    env             None, or an environment that answers the policy's calls inside a completion
                    (`minirl.lm.multiturn`, `tools.Calculator`); GRPO, PPO and policy gradient train
                    on such a task, RAFT refuses it
    max_calls       the calls env answers per episode (0 without one)
    """
    name: str
    train_prompts: list[str]
    test_prompts: list[str]
    max_new_tokens: int
    token_rewards: Callable[[Rollout, object], torch.Tensor]
    gold: Callable[[Rollout], dict[str, float]]
    env: object | None = None
    max_calls: int = 0


def last_token_rewards(rollout: Rollout, scores) -> torch.Tensor:
    """(B, T) zeros with each row's score (a list or (B,) tensor) at its last action token."""
    out = torch.zeros_like(rollout.logprobs)
    if len(scores) != out.size(0):
        raise ValueError(f"{len(scores)} scores for {out.size(0)} completions: give one score per completion")
    last = rollout.mask.sum(dim=1).long() - 1  # (B,) index of the last action token
    out[torch.arange(out.size(0), device=out.device), last] = torch.as_tensor(scores, dtype=out.dtype, device=out.device)
    return out


def review_token_reward_tensor(rollout: Rollout, enc) -> torch.Tensor:
    rows = [rewards.review_token_rewards(enc, row) for row in rollout.tokens.tolist()]
    return torch.tensor(rows, dtype=rollout.logprobs.dtype, device=rollout.logprobs.device) * rollout.mask


def review_gold(rollout: Rollout) -> dict[str, float]:
    gold = rewards.review_gold_reward(rollout.prompts, rollout.texts)
    return {"gold": sum(gold) / len(gold), "gold_positive": sum(g > 0 for g in gold) / len(gold),
            "valid": sum(grammar.is_review(p + c) for p, c in zip(rollout.prompts, rollout.texts)) / len(gold)}


REVIEW_STARTS = ("negative", "positive")


def reviews_task(start: str = "negative") -> Task:
    """Make the review positive, however it starts (the task in Prithviraj Ammanabrolu's slides
    "RL for Language (Agents)"). Proxy: the lexicon, per token.
    start: the prompt set, reviews whose first clause is 'negative' or 'positive'."""
    validate.choice("prompt set (start)", start, REVIEW_STARTS)

    def prompts(split):
        return [r["prompt"] for r in datasets.load_prompts("reviews", split) if r["start"] == start]
    return Task("reviews", prompts("train"), prompts("test"), grammar.MAX_NEW_TOKENS["reviews"],
                review_token_reward_tensor, review_gold)


def arithmetic_task() -> Task:
    """Verifiable reward: 1 for the right sum, 0 otherwise, at the last token."""
    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        return last_token_rewards(rollout, rewards.arithmetic_reward(rollout.prompts, rollout.texts))

    def gold(rollout: Rollout) -> dict[str, float]:
        correct = rewards.arithmetic_reward(rollout.prompts, rollout.texts)
        return {"correct": sum(correct) / len(correct)}

    def prompts(split):
        return [r["prompt"] for r in datasets.load_prompts("arithmetic", split)]
    return Task("arithmetic", prompts("train"), prompts("test"), grammar.MAX_NEW_TOKENS["arithmetic"], token_rewards, gold)


def tool_task(cost: float = 0.0, max_calls: int = 1, per_turn: bool = True) -> Task:
    """Arithmetic with a calculator (`tools.Calculator`): the outcome, 1 for the right final answer,
    at the last token, and -cost for each call, on the token that ended it (the calculator's
    per-turn reward); with per_turn=False the calls' costs are summed into the outcome instead (the
    same return, all of it at the last token). Gold: the share right, and the calls per episode.
    max_calls: calls the calculator answers per episode; 0, none (the same prompts and outcome
    without the tool)."""
    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        outcome = tools.tool_reward(rollout.prompts, rollout.texts)
        if not per_turn:
            outcome = [r - cost * n for r, n in zip(outcome, multiturn.calls(rollout).tolist())]
        return last_token_rewards(rollout, outcome)

    def gold(rollout: Rollout) -> dict[str, float]:
        correct = tools.tool_reward(rollout.prompts, rollout.texts)
        return {"correct": sum(correct) / len(correct), "calls": multiturn.calls(rollout).float().mean().item()}

    validate.number("cost", cost)
    arithmetic = arithmetic_task()  # its prompts
    return Task("tool", arithmetic.train_prompts, arithmetic.test_prompts, tools.MAX_NEW_TOKENS, token_rewards, gold,
                env=tools.Calculator(cost if per_turn else 0.0),
                max_calls=validate.integer("max_calls", max_calls, minimum=0))


def orders_task() -> Task:
    """The hidden annotator's utility of the whole order (the matcha lover, after Alex Xie's lecture
    "RL for LLMs: From Parrots to Agents"), at the last token: the gold reward that lessons 08-11
    learn from preferences instead."""
    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        return last_token_rewards(rollout, rewards.order_gold_reward(rollout.prompts, rollout.texts))

    def gold(rollout: Rollout) -> dict[str, float]:
        utility = rewards.order_gold_reward(rollout.prompts, rollout.texts)
        valid = [grammar.is_order(p + c) for p, c in zip(rollout.prompts, rollout.texts)]
        return {"gold": sum(utility) / len(utility), "valid": sum(valid) / len(valid)}

    def prompts(split):
        return [r["prompt"] for r in datasets.load_prompts("orders", split)]
    return Task("orders", prompts("train"), prompts("test"), grammar.MAX_NEW_TOKENS["orders"], token_rewards, gold)


def plans_task() -> Task:
    """The plan expert's hidden reward R(plan) at the last token (INVALID_PLAN_REWARD for text that
    is not a plan): what imitation and IRL (lesson 12) never see and are judged by."""
    def token_rewards(rollout: Rollout, enc) -> torch.Tensor:
        return last_token_rewards(rollout, rewards.plan_true_reward(rollout.prompts, rollout.texts))

    def gold(rollout: Rollout) -> dict[str, float]:
        true = rewards.plan_true_reward(rollout.prompts, rollout.texts)
        valid = [grammar.is_plan(p + c) for p, c in zip(rollout.prompts, rollout.texts)]
        return {"true_reward": sum(true) / len(true), "valid": sum(valid) / len(valid)}

    prompts = [grammar.PROMPT_HEADS["plans"]]
    return Task("plans", prompts, prompts, grammar.MAX_NEW_TOKENS["plans"], token_rewards, gold)


def custom_task(name: str, prompts: list[str], reward_fn: RewardFn, test_prompts: list[str] | None = None,
                max_new_tokens: int = 16, gold: RewardFn | None = None, n_ctx: int = GPTConfig.n_ctx) -> Task:
    """A task from your own prompts and reward function, for any trainer that takes a task:
    `train_grpo(model, tasks.custom_task("kind", prompts, kindness), GRPOConfig())`.

    name            the task's name, for error messages
    prompts         the training prompts, a list of strings (in the tiny world's words: the model
                    knows no others)
    reward_fn       reward_fn(prompts, completions, **kwargs) -> list[float], the signature of every
                    reward function in the course (and TRL's); each completion's score lands on its
                    last token (`last_token_rewards`), checked: one finite number per completion
    test_prompts    held-out prompts for `evaluate.heldout_report`; None: the training prompts
    max_new_tokens  the most tokens a completion may have (16: an order's length)
    gold            a second function of the same signature, the one you judge by (exact
                    correctness, say, while training on a shaped reward): each step reports its
                    mean as 'gold'. None: no gold metric, the trainer's 'reward' is all there is
    n_ctx           the context window the longest prompt plus max_new_tokens must fit: the
                    course's models' (64); for a model of your own, its model.config.n_ctx
    Everything is checked here, before any training: bad input fails now, not at a later step.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, the task's name in messages; got {name!r}")
    reward_name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    check_signature(reward_fn, reward_name)
    if gold is not None:
        check_signature(gold, getattr(gold, "__name__", type(gold).__name__))
    max_new_tokens = validate.integer("max_new_tokens", max_new_tokens)
    enc = load_tokenizer()
    train = list_of_prompts("prompts", prompts)
    test = train if test_prompts is None else list_of_prompts("test_prompts", test_prompts)
    check_room(train + test, enc, max_new_tokens, validate.integer("n_ctx", n_ctx))

    def token_rewards(rollout: Rollout, tokenizer) -> torch.Tensor:
        return last_token_rewards(rollout, reward_scores(reward_fn, rollout))

    def gold_metrics(rollout: Rollout) -> dict[str, float]:
        return {} if gold is None else {"gold": reward_scores(gold, rollout).mean().item()}
    return Task(name, train, test, max_new_tokens, token_rewards, gold_metrics)


def list_of_prompts(what: str, prompts) -> list[str]:
    """`prompts` as a list, after checking it is a non-empty list (or tuple) of non-empty strings."""
    if isinstance(prompts, str):
        raise TypeError(f"{what} must be a list of strings, not one string: for a single prompt pass [{prompts!r}]")
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"{what} must be a list of strings, got {type(prompts).__name__}")
    if not prompts:
        raise ValueError(f"{what} is empty: give at least one prompt")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise TypeError(f"{what}[{i}] is {type(p).__name__} ({p!r:.60}), not a string; prompts must be strings "
                            "(from a dataset's records: [r['prompt'] for r in records])")
        if not p:
            raise ValueError(f"{what}[{i}] is the empty string: a prompt needs at least one token to condition on")
    return list(prompts)


def check_room(prompts: list[str], enc, max_new_tokens: int, n_ctx: int) -> None:
    """The longest prompt plus max_new_tokens fits the context window n_ctx (as the sampler requires)."""
    lengths = [len(ids) for ids in enc.encode_ordinary_batch(prompts)]
    longest = max(lengths)
    prompt = prompts[lengths.index(longest)]
    shown = repr(prompt if len(prompt) <= 40 else prompt[:40] + "...")
    if longest >= n_ctx:
        raise ValueError(f"prompt {shown} has {longest} tokens, leaving no room for a completion in the context "
                         f"window n_ctx={n_ctx}: shorten it")
    if longest + max_new_tokens > n_ctx:
        raise ValueError(f"the longest prompt ({longest} tokens, {shown}) plus max_new_tokens={max_new_tokens} "
                         f"exceeds the context window n_ctx={n_ctx}: ask for at most max_new_tokens={n_ctx - longest}, "
                         "or shorten the prompt")


def check_signature(reward_fn: RewardFn, name: str) -> None:
    """A reward function takes (prompts, completions) and the keyword arguments minirl passes."""
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be a function reward_fn(prompts, completions, **kwargs), got {name}")
    try:
        signature = inspect.signature(reward_fn)
    except (TypeError, ValueError):  # a builtin without a signature: let the call speak
        return
    params = signature.parameters.values()
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params)
    named = {p.name for p in params}
    if not takes_all and not {"completion_ids", "truncated"} <= named:
        raise TypeError(f"reward function {name} must accept the keyword arguments minirl passes (completion_ids, "
                        "truncated), as TRL's do: end its parameters with **kwargs")
    try:
        signature.bind([], [], completion_ids=[], truncated=[])
    except TypeError as e:
        raise TypeError(f"reward function {name}{signature} cannot be called as {name}(prompts, completions, "
                        f"completion_ids=..., truncated=...) ({e}): give it the parameters (prompts, completions, "
                        "**kwargs)") from None


def reward_scores(reward_fn: RewardFn, rollout: Rollout) -> torch.Tensor:
    """(B,) the scores `reward_fn` gives the rollout's completions, checked: one finite number each."""
    name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    check_signature(reward_fn, name)
    B = rollout.tokens.size(0)
    lengths = rollout.mask.sum(dim=1).long().tolist()
    ids = [row[:n] for row, n in zip(rollout.tokens.tolist(), lengths)]
    out = reward_fn(rollout.prompts, rollout.texts, completion_ids=ids, truncated=rollout.truncated.tolist())
    wanted = f"a list of {B} floats, one per completion"
    if isinstance(out, torch.Tensor):
        out = out.detach().cpu()  # a reward model's scores, on any device
    if isinstance(out, (int, float)) or (isinstance(out, torch.Tensor) and out.dim() == 0):
        raise TypeError(f"reward function {name} returned a single score ({float(out)}); it must return {wanted}")
    try:
        scores = torch.as_tensor(out, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"reward function {name} returned {type(out).__name__} holding something other than "
                        f"numbers (None?); it must return {wanted}") from None
    if scores.shape != (B,):
        got = f"{len(out)} scores" if scores.dim() == 1 else f"shape {tuple(scores.shape)}"
        raise ValueError(f"reward function {name} returned {got} for {B} completions; it must return {wanted}")
    bad = (~torch.isfinite(scores)).nonzero().flatten().tolist()
    if bad:
        i = bad[0]
        raise ValueError(f"reward function {name} returned non-finite scores for {len(bad)} of {B} completions, "
                         f"the first {scores[i].item()} for completion {i} ({rollout.texts[i]!r}); scores must be "
                         "finite numbers")
    return scores.to(rollout.logprobs.dtype).to(rollout.logprobs.device)  # cast on the CPU: MPS has no float64


def training_rewards(task: Task, rollout: Rollout, tokenizer, reward_fn: RewardFn | None = None) -> torch.Tensor:
    """(B, T) per-token rewards the learner sees: `reward_fn`'s score of each completion at its
    last action token when one is given, else the task's own rewards (checked: shape and finite);
    plus, in a multi-turn rollout, the environment's reward for each call on the token that ended it."""
    rewards = task_rewards(task, rollout, tokenizer, reward_fn)
    return rewards if rollout.env_rewards is None else rewards + rollout.env_rewards


def task_rewards(task: Task, rollout: Rollout, tokenizer, reward_fn: RewardFn | None) -> torch.Tensor:
    if reward_fn is not None:
        return last_token_rewards(rollout, reward_scores(reward_fn, rollout))
    rewards = task.token_rewards(rollout, tokenizer)
    if rewards.shape != rollout.logprobs.shape:
        raise ValueError(f"task {task.name!r} gave rewards of shape {tuple(rewards.shape)}, expected "
                         f"{tuple(rollout.logprobs.shape)} (one per completion token)")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError(f"task {task.name!r} gave non-finite rewards (NaN or inf); rewards must be finite")
    return rewards
