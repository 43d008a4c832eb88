"""The course's arithmetic task for any causal LM: its prompts rendered for the model, and the course's
verifier (`minirl.world.rewards.arithmetic_reward`, unchanged) scoring the replies.

A model whose tokenizer has no chat template of its own (the course's export carries one that returns
the text unchanged) reads the course's line as it is, "q: 68+87= a:", and its completion is scored
exactly as in lesson 06. A chat model reads one user message, `INSTRUCTION` and the same line, through
its own chat template (TRL applies it); its reply is scored on the course's line and the reply after
one space: the chat turn stands where the course's format has the space between "a:" and the answer,
so "155", " 155" and "155\n" all read as " 155", and "The sum is 155." is wrong, as in the course.
"""
from minirl.lm.export import PLAIN_CHAT_TEMPLATE
from minirl.world import datasets, rewards

__all__ = ["INSTRUCTION", "is_chat", "render", "questions", "columns", "chat_answer", "arithmetic_chat_reward",
           "reward_function", "prompt_texts", "score"]

INSTRUCTION = "Complete the line with the sum only, a number."


def is_chat(tokenizer) -> bool:
    """True if the tokenizer has a chat template other than the course export's plain one."""
    return tokenizer.chat_template not in (None, PLAIN_CHAT_TEMPLATE)


def render(question: str, chat: bool):
    """The prompt as TRL's dataset holds it: the course's line, or a one-message conversation."""
    return [{"role": "user", "content": f"{INSTRUCTION}\n{question}"}] if chat else question


def questions(split: str) -> list[str]:
    """The course's lines of one split ("train": 2,000; "test": 300 whose operand pairs the corpus never has)."""
    return [r["prompt"] for r in datasets.load_prompts("arithmetic", split)]


def columns(split: str, chat: bool) -> dict[str, list]:
    """TRL's dataset columns: `prompt` rendered for the model, and `question`, the course's line,
    which TRL hands the reward function as a keyword argument."""
    lines = questions(split)
    return {"prompt": [render(q, chat) for q in lines], "question": lines}


def chat_answer(reply: str) -> str:
    """A chat reply in the course's format: one space, then the reply without surrounding whitespace."""
    return " " + reply.strip()


def arithmetic_chat_reward(prompts, completions, question, **kwargs) -> list[float]:
    """The course's verifier on TRL's conversational rows: `completions` are lists of messages, the
    last one the model's reply; `question` is the course's line of each row."""
    return rewards.arithmetic_reward(list(question), [chat_answer(c[-1]["content"]) for c in completions])


def reward_function(chat: bool):
    """What TRL is given: the course's reward itself, or its conversational form for chat models."""
    return arithmetic_chat_reward if chat else rewards.arithmetic_reward


def prompt_texts(tokenizer, lines: list[str], chat: bool, template_kwargs: dict | None = None) -> list[str]:
    """The text the model reads for each line (for a chat model, its template with the generation prompt and
    GRPOConfig's `chat_template_kwargs`, as TRL renders it); tokenize it without adding special tokens
    when `chat`, as TRL does."""
    if not chat:
        return list(lines)
    return [tokenizer.apply_chat_template(render(q, True), add_generation_prompt=True, tokenize=False, **(template_kwargs or {}))
            for q in lines]


def score(lines: list[str], replies: list[str], chat: bool) -> list[float]:
    """The course's verifier on decoded replies (special tokens skipped), as in training."""
    return rewards.arithmetic_reward(lines, [chat_answer(r) for r in replies] if chat else replies)
