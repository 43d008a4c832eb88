"""Multi-turn sampling against a plain second implementation: one row at a time, the whole history
run through the model afresh at every step (no cache, no batch), the same uniform numbers, the
environment's answer appended the same way."""
import pytest
import torch

import minirl
from minirl.lm import multiturn
from minirl.lm.multiturn import Reply, calls, sample_episodes, turns
from minirl.lm.sampling import completion_logprobs, sampling_logprobs

PROMPTS = ["q: 7+5= a:", "q: 38+47= a:", "q: 40+15= a:"]  # of different lengths: the batch is left-padded


class Echo:
    """Calls end with the digit 5 (the second digit of many answers); answers " is" and the
    episode's length in characters, and rewards the call with that length."""
    call_end = "5"

    def __init__(self):
        self.seen = []

    def respond(self, prompt, episode):
        self.seen.append((prompt, episode))
        return Reply(f" is {len(episode)}", reward=float(len(episode)))


@pytest.fixture(scope="module")
def model():
    return minirl.load_model("base")


@pytest.fixture(scope="module")
def enc():
    return minirl.load_tokenizer()


@torch.no_grad()
def plain_episodes(model, enc, prompts, env, max_new_tokens, max_calls, group_size, temperature, top_k, seed):
    """Per row: (tokens, log-probs, who wrote each token), sampling from a fresh forward over the
    row's whole history at each step with the uniform number the batched sampler gives that row."""
    rows = [p for p in prompts for _ in range(group_size)]
    g = torch.Generator().manual_seed(seed)
    uniforms = [torch.rand(len(rows), 1, generator=g) for _ in range(max_new_tokens)]  # one per row per step
    end, eos = enc.encode_ordinary(env.call_end)[0], enc.eot_token
    out = []
    for b, prompt in enumerate(rows):
        history, tokens, logps, policy, pending, calls = enc.encode_ordinary(prompt), [], [], [], [], 0
        for t in range(max_new_tokens):
            if pending:
                tok, logp, wrote = pending.pop(0), 0.0, False
            else:
                logits = model(torch.tensor([history]))[0, -1]
                probs = sampling_logprobs(logits[None], temperature, top_k).exp()
                cdf = probs.cumsum(-1)
                tok = int(torch.searchsorted(cdf, uniforms[t][b : b + 1] * cdf[:, -1:], right=True))
                logp, wrote = float(probs[0, tok].log()), True
            history, tokens, logps, policy = history + [tok], tokens + [tok], logps + [logp], policy + [wrote]
            if wrote and tok == end and calls < max_calls:
                pending, calls = enc.encode_ordinary(env.respond(prompt, enc.decode(tokens)).text), calls + 1
            if wrote and tok == eos:
                break
        out.append((tokens, logps, policy))
    return out


@pytest.mark.parametrize("temperature, top_k, group_size", [(1.0, None, 2), (0.8, 20, 3)])
def test_batched_cached_episodes_equal_a_plain_loop_with_fresh_forwards(model, enc, temperature, top_k, group_size):
    kw = dict(max_new_tokens=24, max_calls=2, group_size=group_size, temperature=temperature, top_k=top_k)
    r = sample_episodes(model, PROMPTS, Echo(), generator=torch.Generator().manual_seed(5), **kw)
    want = plain_episodes(model, enc, PROMPTS, Echo(), seed=5, **kw)
    assert int(calls(r).sum()) > 0 and bool((calls(r) == 0).any())  # calls happened, in some rows only
    for b, (tokens, logps, policy) in enumerate(want):
        n = len(tokens)
        assert r.tokens[b, :n].tolist() == tokens
        assert r.action_mask[b, :n].tolist() == [float(w) for w in policy]
        assert float((r.action_mask[b, n:]).abs().sum()) == 0 and float(r.mask[b].sum()) == n
        assert torch.allclose(r.logprobs[b, :n], torch.tensor(logps), atol=1e-5)
        assert bool(r.truncated[b]) == (tokens[-1] != enc.eot_token)


def test_resumed_log_probs_equal_a_fresh_forward_over_the_whole_episode(model, enc):
    """What the sampler recorded for the policy's tokens, after answers fed through the cache, is
    what one forward pass over prompt + episode gives (`completion_logprobs`, no cache)."""
    r = sample_episodes(model, PROMPTS, Echo(), max_new_tokens=24, max_calls=3, group_size=4,
                        generator=torch.Generator().manual_seed(1))
    fresh = completion_logprobs(model, r.select(range(r.tokens.size(0))))
    assert torch.allclose(r.logprobs, fresh * r.action_mask, atol=1e-5)
    assert float(((r.mask - r.action_mask) * r.mask).sum()) > 0  # answers were fed


def test_turns_rewards_and_what_the_environment_saw(model, enc):
    """Walking each episode: every policy '5' before the last allowed call (with a step left) is
    followed by the answer to its episode so far, marked the environment's and given the call's
    turn, its reward on the '5'; the policy's next token opens the next turn; the environment saw
    exactly those calls."""
    env, max_calls, max_new_tokens = Echo(), 2, 24
    r = sample_episodes(model, PROMPTS, env, max_new_tokens=max_new_tokens, max_calls=max_calls, group_size=8,
                        generator=torch.Generator().manual_seed(2))
    end, T = enc.encode_ordinary(Echo.call_end)[0], r.tokens.size(1)
    seen = []
    for b in range(r.tokens.size(0)):
        tokens, n = r.tokens[b].tolist(), int(r.mask[b].sum())
        turn, act, reward, k, t = [], [], [], 0, 0
        while t < n:
            turn, act, reward = turn + [k], act + [1.0], reward + [0.0]
            if tokens[t] == end and k < max_calls and t + 1 < max_new_tokens:
                episode = enc.decode(tokens[: t + 1])
                seen.append((r.prompts[b], episode))
                reward[-1] = float(len(episode))
                answer = enc.encode_ordinary(f" is {len(episode)}")[: n - t - 1]
                assert tokens[t + 1 : t + 1 + len(answer)] == answer
                turn, act, reward = turn + [k] * len(answer), act + [0.0] * len(answer), reward + [0.0] * len(answer)
                k, t = k + 1, t + len(answer)
            t += 1
        assert turns(r)[b].tolist() == turn + [-1] * (T - n)
        assert r.action_mask[b].tolist() == act + [0.0] * (T - n)
        assert r.env_rewards[b].tolist() == reward + [0.0] * (T - n)
        assert int(calls(r)[b]) == k
    assert sorted(env.seen) == sorted(seen) and len(seen) > 0
    assert bool((calls(r) == max_calls).any()) and bool((calls(r) == 0).any())


def test_no_calls_is_plain_sampling(model, enc):
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    got = sample_episodes(model, PROMPTS, Echo(), max_new_tokens=12, max_calls=0, group_size=2, generator=g())
    plain = minirl.sample(model, PROMPTS, max_new_tokens=12, group_size=2, generator=g())
    assert torch.equal(got.tokens, plain.tokens) and torch.equal(got.logprobs, plain.logprobs)
    assert torch.equal(got.action_mask, plain.mask) and got.texts == plain.texts
    assert int(calls(got).sum()) == 0 and bool((turns(got)[plain.mask.bool()] == 0).all())
    assert float(got.env_rewards.abs().sum()) == 0
    with pytest.raises(ValueError, match="multi-turn rollout"):
        calls(plain)


def test_bad_environments_are_named(model):
    class TwoTokens(Echo):
        call_end = " calc"  # three tokens

    class Silent(Echo):
        def respond(self, prompt, episode):
            return " 5"

    with pytest.raises(ValueError, match="exactly one token"):
        sample_episodes(model, PROMPTS, TwoTokens(), max_new_tokens=8)
    with pytest.raises(TypeError, match="call_end string"):
        sample_episodes(model, PROMPTS, object(), max_new_tokens=8)
    with pytest.raises(TypeError, match="must return a minirl Reply"):
        sample_episodes(model, PROMPTS, Silent(), max_new_tokens=24, max_calls=2, group_size=8,
                        generator=torch.Generator().manual_seed(0))
    class Mute(Echo):
        def respond(self, prompt, episode):
            return Reply("")

    with pytest.raises(ValueError, match="answer is empty"):
        sample_episodes(model, PROMPTS, Mute(), max_new_tokens=24, max_calls=2, group_size=8,
                        generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="context window"):
        sample_episodes(model, PROMPTS, Echo(), max_new_tokens=100)


def test_the_module_names_its_exports():
    assert set(multiturn.__all__) == {"Reply", "Environment", "sample_episodes", "turns", "calls"}
