"""The micro world with an environment turn: the world's tokens are transitions, not actions.

References are plain loops written here: every episode by nested loops, P(tau) as a product token by
token with softmax(theta[h] + w) written out, R(tau) from the world's tables, J and its autograd
gradient on theta and on the shared w, the as-if term as autograd of a plain surrogate loss (the
world's tokens left in the loss mask), Q as the probability-weighted return after each (history,
token), and Q* by recursion."""
import math

import pytest
import torch

from minirl.exact import micro
from minirl.exact.micro_env import ENV_PROBS, GOAL, OBSERVATIONS, VOCAB, Gradient, MicroEnvMDP

EOS = micro.EOS
WORDS = [w for w in VOCAB if w != EOS]  # what the policy can write without ending


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Every tensor here is tiny: one torch thread, as under xdist (two threads on a busy two-core
    machine made the training steps 70x slower), and the old count back afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def world():
    return MicroEnvMDP()


def theta_at(world, seed):
    """Zero logits, or standard normal ones from a seed."""
    if seed is None:
        return torch.zeros(world.shape, dtype=torch.float64)
    return torch.randn(world.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def w_at(seed):
    """No shared bias (the tabular model, w = None), or a standard normal one from a seed."""
    if seed is None:
        return None
    return torch.randn(len(VOCAB), generator=torch.Generator().manual_seed(1000 + seed), dtype=torch.float64)


def zeros_if_none(w):
    return torch.zeros(len(VOCAB), dtype=torch.float64) if w is None else w


SEEDS = [None, 0, 1, 2]


def plain_episodes():
    """Every (prompt, tokens): EOS at once, or t1, the world's o, then EOS or two more tokens."""
    out = []
    for p in micro.PROMPTS:
        out.append((p, (EOS,)))
        for t1 in WORDS:
            for o in OBSERVATIONS:
                out.append((p, (t1, o, EOS)))
                for t2 in WORDS:
                    for t3 in VOCAB:
                        out.append((p, (t1, o, t2, t3)))
    return out


def plain_model_prob(world, theta, w, p, prefix, token):
    """The model's softmax(theta[history] + w)[token], w None for none."""
    logits = theta[world.history_index[(p, prefix)]] + (0.0 if w is None else w)
    return torch.softmax(logits, dim=0)[VOCAB.index(token)]


def plain_token_probs(world, theta, p, tokens, w=None):
    """[P(token t | history)]: the world's table at position 1, softmax(theta[history] + w) elsewhere."""
    probs = []
    for t, token in enumerate(tokens):
        if t == 1:
            probs.append(torch.tensor(ENV_PROBS[p][tokens[0]][OBSERVATIONS.index(token)], dtype=torch.float64))
        else:
            probs.append(plain_model_prob(world, theta, w, p, tokens[:t], token))
    return probs


def plain_terminal(p, tokens):
    """The goal reward: ended by EOS, the goal for the world's reply written after it."""
    return micro.GOAL_REWARD if tokens[-1] == EOS and len(tokens) >= 3 and GOAL[p][tokens[1]] in tokens[2:] else 0.0


def plain_rewards(p, tokens):
    """[r_t]: the policy's step rewards (the world's token earns 0), the goal reward on the last."""
    rewards = [0.0 if t == 1 else micro.STEP_REWARD[p].get(w, 0.0) for t, w in enumerate(tokens)]
    rewards[-1] += plain_terminal(p, tokens)
    return rewards


def plain_j(world, theta, w=None):
    total = 0.0
    for p, tokens in plain_episodes():
        prob = 1.0
        for q in plain_token_probs(world, theta, p, tokens, w):
            prob = prob * q
        total = total + prob * sum(plain_rewards(p, tokens)) / len(micro.PROMPTS)
    return total


def test_every_episode_once_the_worlds_tokens_marked_and_probabilities_sum_to_one(world):
    assert len(world.episodes) == len(plain_episodes()) == 2 * (1 + 5 * 2 * (1 + 5 * 6))
    assert {(e.prompt, e.tokens) for e in world.episodes} == set(plain_episodes())
    for e in world.episodes:
        assert e.by_env == tuple(t == 1 for t in range(len(e.tokens)))
    assert torch.allclose(world.returns(), torch.tensor([sum(plain_rewards(e.prompt, e.tokens)) for e in world.episodes],
                                                        dtype=torch.float64), atol=1e-15)
    for seed in SEEDS:
        theta, w = theta_at(world, seed), w_at(seed)
        probs = world.episode_probs(theta, w)
        for i in range(len(micro.PROMPTS)):
            assert probs[world.prompt_of == i].sum().item() == pytest.approx(1.0, abs=1e-12)
        for n in range(0, len(world.episodes), 37):
            e = world.episodes[n]
            plain = math.prod(q.item() for q in plain_token_probs(world, theta, e.prompt, e.tokens, w))
            assert probs[n].item() == pytest.approx(plain, rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_correct_score_function_gradient_is_autograd_of_a_plain_j(world, seed):
    """E[R(tau) sum_policy grad log pi(a_t|h_t)] = grad J on theta and on the shared w: the world's P_env
    carries no parameter."""
    theta, w = theta_at(world, seed).requires_grad_(True), zeros_if_none(w_at(seed)).requires_grad_(True)
    j = plain_j(world, theta, w)
    w_arg = None if seed is None else w.detach()  # None: the tabular model's default, w = 0
    assert world.objective(theta.detach(), w_arg).item() == pytest.approx(j.item(), abs=1e-12)
    truth = torch.autograd.grad(j, (theta, w))
    for got in (world.expected_estimate(theta.detach(), "policy", w_arg), world.exact_gradient(theta.detach(), w_arg)):
        assert torch.allclose(got.theta, truth[0], atol=1e-12) and torch.allclose(got.w, truth[1], atol=1e-12)
    assert truth[0][world.env_rows].abs().max().item() == 0.0  # J never reads the world's rows
    assert truth[1].abs().max().item() > 1e-3  # w is read at every one of the policy's decisions


def plain_as_if_term(world, theta, w):
    """Autograd, on theta and w, of the loss a trainer adds by leaving the world's tokens in the mask:
    sum_tau P(tau) R(tau) log softmax(theta[h] + w)[o] over the world's token o, P(tau) held fixed."""
    theta, w = theta.clone().requires_grad_(True), zeros_if_none(w).clone().requires_grad_(True)
    surrogate = 0.0
    for p, tokens in plain_episodes():
        if len(tokens) > 1:  # the world writes tokens[1] after the policy's first token
            prob = math.prod(q.item() for q in plain_token_probs(world, theta.detach(), p, tokens, w.detach()))
            weight = prob / len(micro.PROMPTS) * sum(plain_rewards(p, tokens))
            surrogate = surrogate + weight * plain_model_prob(world, theta, w, p, tokens[:1], tokens[1]).log()
    return torch.autograd.grad(surrogate, (theta, w))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_as_if_estimator_is_biased_by_the_plain_env_token_term_and_the_shared_w_carries_it(world, seed):
    """Scoring the world's tokens as the policy's adds the gradient of a plain surrogate loss: on theta
    it sits on the world's rows only, but w sums every row, so it moves every decision of the policy."""
    theta, w = theta_at(world, seed), w_at(seed)
    term = plain_as_if_term(world, theta, w)
    grad = world.exact_gradient(theta, w)
    as_if = world.expected_estimate(theta, "all", w)
    env = world.expected_estimate(theta, "env", w)
    for got in (Gradient(as_if.theta - grad.theta, as_if.w - grad.w), env):
        assert torch.allclose(got.theta, term[0], atol=1e-12) and torch.allclose(got.w, term[1], atol=1e-12)
    assert term[0][world.policy_rows].abs().max().item() == 0.0 and term[0].norm().item() > 1e-3
    assert term[1].norm().item() > 1e-2
    report = world.estimator_bias(theta, w)
    assert report.correct_bias < 1e-12 and report.policy_rows_bias < 1e-12  # theta's policy rows are untouched
    assert report.shared_bias == pytest.approx(term[1].norm().item(), rel=1e-9)  # ... but w is not
    both = torch.cat([term[0].flatten(), term[1]])
    assert report.as_if_bias == pytest.approx(both.norm().item(), rel=1e-9)
    flat_as_if, flat_grad = torch.cat([as_if.theta.flatten(), as_if.w]), torch.cat([grad.theta.flatten(), grad.w])
    cosine = (flat_as_if * flat_grad).sum() / (flat_as_if.norm() * flat_grad.norm())
    assert report.cosine == pytest.approx(cosine.item(), rel=1e-9) and report.cosine < 0.95
    shared_cosine = (as_if.w * grad.w).sum() / (as_if.w.norm() * grad.w.norm())
    assert report.shared_cosine == pytest.approx(shared_cosine.item(), rel=1e-9) and report.shared_cosine < 0.95


def test_monte_carlo_correct_estimate_is_within_its_standard_error_and_the_as_if_estimate_is_not(world):
    theta, w = theta_at(world, 0), w_at(0)
    theta_g, w_g = theta.clone().requires_grad_(True), w.clone().requires_grad_(True)
    truth = torch.cat([g.flatten() for g in torch.autograd.grad(plain_j(world, theta_g, w_g), (theta_g, w_g))])
    n = 8000
    episodes = world.sample(theta, n, torch.Generator().manual_seed(1), w)
    counts = torch.zeros(len(world.episodes), dtype=torch.float64)
    for e in episodes:
        counts[world.episode_index[(e.prompt, e.tokens)]] += 1
    # the world's replies come at its own rates: u after ("x", "a") at 0.7
    after = [e for e in episodes if e.prompt == "x" and e.tokens[0] == "a"]
    share = sum(e.tokens[1] == "u" for e in after) / len(after)
    assert abs(share - ENV_PROBS["x"]["a"][0]) < 4 * math.sqrt(0.21 / len(after))
    errors = {}
    for which in ("policy", "all"):
        terms = world.estimator_terms(theta, which, w).flat()  # (N, H * V + V): the estimate each episode gives
        mean = (counts / n) @ terms
        var = (counts / n) @ terms**2 - mean**2
        stderr = (var.sum() / n).sqrt().item()  # of the whole vector: E|mean - E g|^2 = sum of variances / n
        errors[which] = ((mean - truth).norm().item(), stderr)
    correct, as_if = errors["policy"], errors["all"]
    assert correct[0] < 3 * correct[1]
    assert as_if[0] > 5 * as_if[1]


@pytest.mark.parametrize("seed", [None, 0])
def test_q_and_v_by_a_plain_loop(world, seed):
    """Q(h, a) = sum over the episodes through (h, a) of P(what follows | h, a) * (the rewards from a on)."""
    theta, w = theta_at(world, seed), w_at(seed)
    plain = torch.zeros(world.shape, dtype=torch.float64)
    for p, tokens in plain_episodes():
        probs = [q.item() for q in plain_token_probs(world, theta, p, tokens, w)]
        rewards = plain_rewards(p, tokens)
        for t in range(len(tokens)):
            if t == 1:
                continue  # the world's token is no action
            row = world.history_index[(p, tokens[:t])]
            plain[row, VOCAB.index(tokens[t])] += math.prod(probs[t + 1:]) * sum(rewards[t:])
    q = world.q_values(theta, w)
    assert torch.allclose(q[world.policy_rows], plain[world.policy_rows], atol=1e-12)
    v = world.values(theta, w)
    pi = torch.softmax(theta + zeros_if_none(w), dim=-1)
    assert torch.allclose(v[world.policy_rows], (pi * plain).sum(-1)[world.policy_rows], atol=1e-12)
    roots = [world.history_index[(p, ())] for p in micro.PROMPTS]
    assert v[roots].mean().item() == pytest.approx(world.objective(theta, w).item(), abs=1e-12)
    for row in world.env_rows.tolist():  # the world's rows: V(h) = sum_o P_env(o | h) V(h + o)
        p, prefix = world.histories[row]
        after = [v[world.history_index[(p, prefix + (o,))]] for o in OBSERVATIONS]
        assert v[row].item() == pytest.approx(sum(pr * x.item() for pr, x in zip(ENV_PROBS[p][prefix[0]], after)), abs=1e-12)


def plain_optimal_q(p, prefix, token):
    """Q*(h, token) by recursion: the reward, then the best continuation (the world's reply averaged)."""
    tokens = prefix + (token,)
    r = micro.STEP_REWARD[p].get(token, 0.0)
    if token == EOS or len(tokens) == micro.HORIZON + 1:  # EOS, or the policy's third token after the reply
        return r + plain_terminal(p, tokens)
    if len(tokens) == 1:
        return r + sum(pr * max(plain_optimal_q(p, tokens + (o,), w) for w in VOCAB)
                       for pr, o in zip(ENV_PROBS[p][token], OBSERVATIONS))
    return r + max(plain_optimal_q(p, tokens, w) for w in VOCAB)


def test_the_history_is_the_state(world):
    """After the world's reply the best token depends on what it said: Q* by a plain recursion, and
    Q^pi's rows after "u" and after "v" differ, for every prompt and first token."""
    q_star = world.optimal_q_values()
    for row in world.policy_rows.tolist():
        p, prefix = world.histories[row]
        for w, token in enumerate(VOCAB):
            assert q_star[row, w].item() == pytest.approx(plain_optimal_q(p, prefix, token), abs=1e-12)
    q_pi = world.q_values(theta_at(world, 0))
    for p in micro.PROMPTS:
        for first in WORDS:
            star = world.q_by_observation(q_star, p, first)  # (2, V): after u, after v
            assert [VOCAB[i] for i in star.argmax(-1).tolist()] == [GOAL[p][o] for o in OBSERVATIONS]
            assert (world.q_by_observation(q_pi, p, first)[0] - world.q_by_observation(q_pi, p, first)[1]).abs().max() > 0.1


def test_following_the_as_if_gradient_teaches_the_policy_the_worlds_tokens_and_costs_return(world):
    """Exact gradient ascent (each step the estimator's expectation, no sampling), same lr and steps.
    With the shared w, the as-if run learns to write u and v itself, where they earn nothing, and ends
    with a lower J (measured: 0.157 lower from zeros and 0.184 from the random start here, 0.044 to
    0.287 over 31 starts; u and v 0.132 and 0.189 of the policy's own tokens, against 0.010 and 0.020).
    Tabular (w left at 0), the two runs move the policy identically."""
    lr, steps = 4.0, 25
    theta0, w0 = 0.5 * theta_at(world, 0), 0.5 * w_at(0)
    for start in ((None, None), (theta0, w0)):
        correct = world.train("policy", lr, steps, theta=start[0], w=start[1])
        as_if = world.train("all", lr, steps, theta=start[0], w=start[1])
        assert correct.objectives[-1] - as_if.objectives[-1] > 0.1
        shares = [world.world_token_share(r.theta, r.w) for r in (correct, as_if)]
        assert shares[0] < 0.05 and shares[1] > 0.1
        assert correct.objectives[-1] > 3 * correct.objectives[0]  # both learn; the as-if run learns less
        assert as_if.objectives[-1] > 3 * as_if.objectives[0]
    step = world.exact_gradient(torch.zeros(world.shape, dtype=torch.float64))  # one step from zeros, by autograd
    one = world.train("policy", lr, 1)
    assert torch.allclose(one.theta, lr * step.theta, atol=1e-15) and torch.allclose(one.w, lr * step.w, atol=1e-15)
    tabular = [world.train(which, lr, steps, shared=False) for which in ("policy", "all")]
    assert torch.allclose(tabular[0].objectives, tabular[1].objectives, atol=1e-12)
    assert torch.allclose(tabular[0].theta[world.policy_rows], tabular[1].theta[world.policy_rows], atol=1e-12)
    assert tabular[0].w.abs().max().item() == 0.0 and tabular[1].w.abs().max().item() == 0.0
    assert tabular[1].objectives[-1] > 3 * tabular[1].objectives[0]


def test_bad_input_is_a_clear_error(world):
    with pytest.raises(ValueError, match="histories x vocabulary"):
        world.objective(torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating-point"):
        world.objective(torch.zeros(world.shape, dtype=torch.long))
    with pytest.raises(ValueError, match="one bias per vocabulary token"):
        world.objective(torch.zeros(world.shape, dtype=torch.float64), torch.zeros(len(VOCAB) - 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="lr"):
        world.train("policy", 0.0, 3)
    with pytest.raises(ValueError, match="which"):
        world.scores(torch.zeros(world.shape, dtype=torch.float64), "everything")
    with pytest.raises(ValueError, match="first token"):
        world.q_by_observation(world.optimal_q_values(), "x", EOS)
