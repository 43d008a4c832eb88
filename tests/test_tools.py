"""The calculator of the arithmetic family, against hand-written episodes."""
import pytest

import minirl
from minirl.world import datasets, tools


@pytest.mark.parametrize("episode, answer", [(" [47+38=", "85]"), (" [0+0=", "0]"), (" [99+99=", "198]"),
                                             (" [47+=", "?]"), (" [4+38+1=", "?]"), (" 85 [47+38=", "85]")])
def test_the_calculator_answers_the_call_at_the_end_of_the_episode(episode, answer):
    reply = tools.Calculator(cost=0.1).respond("q: 47+38= a:", episode)
    assert reply.text == answer and reply.reward == -0.1


@pytest.mark.parametrize("completion, parsed", [
    (" 85", (None, 85)), (" [47+38=85] 85", ("47+38", 85)), (" [47+3=50] 50", ("47+3", 50)),
    (" [47+=?] 85", ("47+", 85)), (" 85 85", None), (" [47+38=85]", None), (" [47+38=85] 8a", None), ("", None)])
def test_episodes_parse_into_the_call_and_the_final_answer(completion, parsed):
    assert tools.parse_episode(completion) == parsed


def test_the_reward_is_the_final_answer_not_the_calculators():
    prompts = ["q: 47+38= a:"] * 4
    completions = [" [47+38=85] 85", " [47+38=85] 84", " 85", " [47+3=50] 50"]
    assert tools.tool_reward(prompts, completions) == [1.0, 0.0, 1.0, 0.0]
    # the final answer is judged as plain arithmetic judges it: no leading zero, nothing after it
    assert tools.tool_reward(prompts[:3], [" [47+38=85] 085", " [47+38=85] 85 .", "85"]) == [0.0, 0.0, 0.0]


def test_demonstrations_are_right_and_call_on_about_the_share_asked():
    prompts = [r["prompt"] for r in datasets.load_prompts("arithmetic", "train")]
    demos = tools.tool_demos(prompts, call_share=0.5, seed=0)
    assert tools.tool_reward([d["prompt"] for d in demos], [d["completion"] for d in demos]) == [1.0] * len(demos)
    calls = sum(tools.parse_episode(d["completion"])[0] is not None for d in demos)
    assert abs(calls / len(demos) - 0.5) < 0.05
    assert tools.tool_demos(prompts[:50], seed=0) == tools.tool_demos(prompts[:50], seed=0)


def test_demonstrations_without_a_call_take_the_completion_given():
    prompts = ["q: 47+38= a:", "q: 5+9= a:"] * 20
    direct = [" 84", " 14"] * 20
    demos = tools.tool_demos(prompts, direct=direct, call_share=0.5, seed=1)
    for d, own in zip(demos, direct):
        call, answer = tools.parse_episode(d["completion"])
        assert (d["completion"] == own) if call is None else (answer == sum(tools.operands(d["prompt"])))
    assert {d["completion"] for d in demos} >= {" 84", " 14", " [47+38=85] 85", " [5+9=14] 14"}
    with pytest.raises(ValueError, match="one per prompt"):
        tools.tool_demos(prompts, direct=direct[:3])


def test_a_demonstration_replayed_through_the_sampler_gets_the_calculators_answer():
    """The episode a demonstration writes, split where the sampler would split it: what the
    calculator writes after the call is exactly the demonstration's text between '=' and ' '."""
    enc, calc = minirl.load_tokenizer(), tools.Calculator()
    for a, b in [(47, 38), (5, 9), (99, 1)]:
        episode = tools.tool_episode(a, b, call=True)
        call = episode[: episode.index("=") + 1]
        assert enc.encode_ordinary(tools.CALL_END) == [enc.encode_ordinary(call)[-1]]  # '=' closes the call as one token
        assert call + calc.respond(f"q: {a}+{b}= a:", call).text + f" {a + b}" == episode



def test_demo_tokens_are_the_sampled_episodes_tokens_with_the_calculators_marked():
    """A demonstration's items are the tokens `sample_episodes` feeds for the same episode (the
    calculator's answer encoded alone), and the positions marked are exactly those tokens."""
    enc = minirl.load_tokenizer()
    demos = [{"prompt": "q: 47+38= a:", "completion": " [47+38=85] 85"}, {"prompt": "q: 5+9= a:", "completion": " 14"},
             {"prompt": "q: 5+9= a:", "completion": " [5+=?] 14"}]
    items = tools.demo_tokens(demos, enc)
    for d, (ids, prompt_len, env) in zip(demos, items):
        prompt = enc.encode_ordinary(d["prompt"])
        assert ids[:prompt_len] == prompt and ids[-1] == enc.eot_token
        if "[" not in d["completion"]:
            assert env == [] and ids[prompt_len:-1] == enc.encode_ordinary(d["completion"])
            continue
        call, rest = d["completion"].split("=", 1)
        answer, after = rest.split("]", 1)
        want = [enc.encode_ordinary(call + "="), enc.encode_ordinary(answer + "]"), enc.encode_ordinary(after)]
        assert ids[prompt_len:-1] == [t for part in want for t in part]
        start = prompt_len + len(want[0])
        assert env == list(range(start, start + len(want[1])))
        assert enc.decode([ids[i] for i in env]) == answer + "]"
