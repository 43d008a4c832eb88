"""Multi-turn episodes: resuming from the KV cache against starting over at every turn, in one run.

    python benchmarks/multiturn.py [--threads N] [--out DIR]   # writes DIR/multiturn_cpu.json

`minirl.lm.multiturn.sample_episodes` decodes every row in lock-step from one KV cache: when a row
writes the environment's call end, the environment's reply is fed through the same cache, one
token per step, and the policy resumes; nothing is computed twice. The two others go turn by turn:
each turn runs every unfinished episode's whole history (prompt and everything so far) through a
fresh prefill into a fresh cache and decodes until the next call end or EOS; the reply is appended
and the next turn starts over, so the history is computed again at every turn:

- naive: that loop on our own model (`sampling.prefill`, then `DecodeState.feed`, batched);
- HF: `generate()` once per turn, on the same weights exported with `minirl.lm.export.to_hf_gpt2`.

Settings pinned: the shipped base model (d=128, 6 layers, 4 heads, vocabulary 506, n_ctx 64,
fp32); the first 64 review test prompts; an environment that ends a call at every full stop " ."
and answers " the", so the policy writes one more clause (about 5 tokens) per call; max_calls 1,
2, 4 and 8; max_new_tokens up to the context window; greedy decoding, so that all three write the
same episodes, which the script asserts (tokens, who wrote each, what the environment saw) before
it times anything; one thread unless told; median of 11 alternating timed runs after 2 of warm-up.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
import transformers
from transformers import StoppingCriteria, StoppingCriteriaList

sys.path.insert(0, str(Path(__file__).parent))
from sampler_vs_hf import cpu_name  # noqa: E402

import minirl  # noqa: E402
from minirl.lm.export import to_hf_gpt2  # noqa: E402
from minirl.lm.multiturn import Reply, calls, sample_episodes  # noqa: E402
from minirl.lm.sampling import left_pad, prefill  # noqa: E402
from minirl.lm.tokenizer import PAD  # noqa: E402
from minirl.world import datasets  # noqa: E402

BATCH, MAX_CALLS = 64, (1, 2, 4, 8)
WARMUP, REPEATS = 2, 11


class GoOn:
    """Ends a call at every full stop and answers " the": the policy writes one more clause of its
    review per call. Keeps what it saw, (prompt, episode so far), to compare the methods by."""
    call_end = " ."

    def __init__(self):
        self.seen = []

    def respond(self, prompt: str, episode: str) -> Reply:
        self.seen.append((prompt, episode))
        return Reply(" the")


class Job:
    """What every method is given: the prompts, the tokenizer's ids, the token budget."""

    def __init__(self, model, max_calls: int):
        self.enc = minirl.load_tokenizer()
        self.prompts = [r["prompt"] for r in datasets.load_prompts("reviews", "test")][:BATCH]
        self.prompt_ids = self.enc.encode_ordinary_batch(self.prompts)
        self.n_ctx, self.max_calls = model.config.n_ctx, max_calls
        self.max_new_tokens = self.n_ctx - max(len(p) for p in self.prompt_ids)
        self.eos, self.pad = self.enc.eot_token, self.enc.encode_single_token(PAD)
        self.call_end = self.enc.encode_single_token(GoOn.call_end)


def ours(model, job: Job, env: GoOn) -> tuple[list[list[int]], list[list[bool]]]:
    """Each row's episode tokens through EOS, and whether the policy wrote each, by `sample_episodes`."""
    r = sample_episodes(model, job.prompts, env, max_new_tokens=job.max_new_tokens, max_calls=job.max_calls,
                        temperature=0.0)
    lengths = r.mask.sum(dim=1).long().tolist()
    return ([row[:n] for row, n in zip(r.tokens.tolist(), lengths)],
            [[bool(a) for a in row[:n]] for row, n in zip(r.action_mask.tolist(), lengths)])


def by_turns(continue_rows, job: Job, env: GoOn) -> tuple[list[list[int]], list[list[bool]]]:
    """The episodes turn by turn: every unfinished row's history encoded afresh, the policy's next
    turn decoded by `continue_rows(histories, steps, can_call)` (each row's new tokens up to its
    first stop), the reply appended. A row whose turn did not fit in `steps` (the cache must fit
    the context window) goes on in the next round; `sample_episodes`' budget rules apply."""
    B = len(job.prompts)
    tokens, policy = [[] for _ in range(B)], [[] for _ in range(B)]
    n_calls, done = [0] * B, [False] * B
    while active := [b for b in range(B) if not done[b] and len(tokens[b]) < job.max_new_tokens]:
        histories = [job.prompt_ids[b] + tokens[b] for b in active]
        steps = min(max(job.max_new_tokens - len(tokens[b]) for b in active), job.n_ctx - max(map(len, histories)))
        turns = continue_rows(histories, steps, [n_calls[b] < job.max_calls for b in active])
        for b, turn in zip(active, turns):
            turn = turn[: job.max_new_tokens - len(tokens[b])]
            tokens[b], policy[b] = tokens[b] + turn, policy[b] + [True] * len(turn)
            done[b] = turn[-1] == job.eos
            if turn[-1] == job.call_end and n_calls[b] < job.max_calls and len(tokens[b]) < job.max_new_tokens:
                reply = job.enc.encode_ordinary(env.respond(job.prompts[b], job.enc.decode(tokens[b])).text)
                reply = reply[: job.max_new_tokens - len(tokens[b])]
                tokens[b], policy[b] = tokens[b] + reply, policy[b] + [False] * len(reply)
                n_calls[b] += 1
    return tokens, policy


def until_stop(row: list[int], job: Job, can_call: bool) -> list[int]:
    """The row's tokens through its first EOS (or call end, if it may still call)."""
    stops = {job.eos, job.call_end} if can_call else {job.eos}
    return next((row[: i + 1] for i, t in enumerate(row) if t in stops), row)


@torch.no_grad()
def naive_turn(model, job: Job, histories: list[list[int]], steps: int, can_call: list[bool]) -> list[list[int]]:
    """One turn for every row: a fresh prefill of its history (B, L), then greedy decoding from a
    fresh cache until every row has stopped or `steps` tokens."""
    ids, mask = left_pad(histories, job.pad, "cpu")  # (B, L)
    state = prefill(model, ids, mask, steps, 1)
    may_call = torch.tensor(can_call)  # (B,)
    new = torch.full((len(histories), steps), job.pad, dtype=torch.long)  # (B, steps)
    stopped = torch.zeros(len(histories), dtype=torch.bool)  # (B,)
    for t in range(steps):
        new[:, t] = tok = state.logits.argmax(dim=-1)
        stopped |= (tok == job.eos) | ((tok == job.call_end) & may_call)
        if bool(stopped.all()):
            break
        if t + 1 < steps:
            state.feed(model, tok)
    return [until_stop(row, job, c) for row, c in zip(new.tolist(), can_call)]


class StopAtCall(StoppingCriteria):
    """Stops the rows that may still call at their call end (EOS stops every row)."""

    def __init__(self, call_end: int, can_call: list[bool]):
        self.call_end, self.can_call = call_end, torch.tensor(can_call)  # (B,)

    def __call__(self, input_ids, scores, **kwargs):
        return (input_ids[:, -1] == self.call_end) & self.can_call


@torch.no_grad()
def hf_turn(hf, job: Job, histories: list[list[int]], steps: int, can_call: list[bool]) -> list[list[int]]:
    """One turn for every row by `generate()`, greedy, from the whole history (B, L)."""
    ids, mask = left_pad(histories, job.pad, "cpu")  # (B, L)
    out = hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=steps, eos_token_id=job.eos,
                      pad_token_id=job.pad, stopping_criteria=StoppingCriteriaList([StopAtCall(job.call_end, can_call)]))
    return [until_stop(row, job, c) for row, c in zip(out[:, ids.size(1):].tolist(), can_call)]


def methods(model, hf, job: Job) -> dict:
    """name -> a function writing the job's episodes for an environment: (tokens, policy)."""
    return {
        "ours": partial(ours, model, job),
        "naive": partial(by_turns, partial(naive_turn, model, job), job),
        "hf": partial(by_turns, partial(hf_turn, hf, job), job),
    }


def write_episodes(method) -> tuple:
    """(tokens, policy, env): what `method` writes with a fresh environment, and the environment."""
    env = GoOn()
    return (*method(env), env)


def check_same_episodes(results: dict) -> None:
    """Every method wrote the same tokens, the same tokens were the environment's, and the
    environment saw the same calls."""
    tokens, policy, env = results["ours"]
    for name, (t, p, e) in results.items():
        assert t == tokens, f"{name} wrote other tokens than sample_episodes"
        assert p == policy, f"{name}'s episodes have the environment's tokens elsewhere"
        assert sorted(e.seen) == sorted(env.seen), f"the environment saw other calls under {name}"


def median_seconds(fns: dict) -> dict:
    """Median wall time of each method; they alternate within every repeat, so a slow spell of the
    machine hits all of them alike."""
    times = {name: [] for name in fns}
    for repeat in range(WARMUP + REPEATS):
        for name, fn in fns.items():
            start = time.perf_counter()
            write_episodes(fn)
            if repeat >= WARMUP:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def run(model, hf, max_calls: int) -> dict:
    job = Job(model, max_calls)
    fns = methods(model, hf, job)
    check_same_episodes({name: write_episodes(fn) for name, fn in fns.items()})
    r = sample_episodes(model, job.prompts, GoOn(), max_new_tokens=job.max_new_tokens, max_calls=max_calls,
                        temperature=0.0)
    episode_tokens = int(r.mask.sum())
    seconds = median_seconds(fns)
    return {
        "max_calls": max_calls,
        "calls_per_episode": round(calls(r).float().mean().item(), 2),
        "episode_tokens": episode_tokens,
        "longest_episode": r.tokens.size(1),  # lock-step decoding runs until the longest row ends
        "seconds": {name: round(s, 4) for name, s in seconds.items()},
        "tokens_per_s": {name: round(episode_tokens / s) for name, s in seconds.items()},
        "naive_over_ours": round(seconds["naive"] / seconds["ours"], 2),
        "hf_over_ours": round(seconds["hf"] / seconds["ours"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    model = minirl.load_model("base")
    hf = to_hf_gpt2(model)
    results = {
        "benchmark": f"multi-turn episodes, same greedy episodes three ways: sample_episodes (KV-cached resume), "
                     f"re-encoding the history every turn (our model; HF generate() per turn); base model "
                     f"(d=128, 6 layers, vocab 506, n_ctx 64, fp32), batch {BATCH} review prompts, call end ' .', "
                     f"reply ' the', median of {REPEATS} alternating runs",
        "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__},
        "runs": [],
    }
    for max_calls in MAX_CALLS:
        results["runs"].append(run(model, hf, max_calls))
        print(json.dumps(results["runs"][-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "multiturn_cpu.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
