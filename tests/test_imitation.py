"""Behaviour cloning and DAgger on the micro world: state visitation against enumeration of the
completions, behaviour cloning on exact counts = the expert, DAgger closing the gap on the
learner's own states; MicroMDP's horizon argument."""
import pytest
import torch

from minirl.exact import imitation as im, micro
from minirl.exact.mdp import MicroMDP


@pytest.mark.parametrize("horizon", [1, 3, 5])
def test_horizon_sets_the_tree(horizon):
    mdp = MicroMDP(horizon=horizon)
    assert len(mdp.completions) == sum(3 ** n for n in range(horizon)) + 3 ** horizon
    assert len(mdp.states) == 2 * sum(3 ** n for n in range(horizon))
    logits = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(horizon), dtype=torch.float64)
    assert torch.allclose(mdp.completion_probs(logits, "x").sum(), torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize("horizon", [2, 4])
def test_state_visitation_matches_enumeration(horizon):
    mdp = MicroMDP(horizon=horizon)
    logits = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = torch.zeros(len(mdp.states), dtype=torch.float64)
    for prompt in mdp.prompts:  # a state is reached by every completion that passes through it
        for c, p in zip(mdp.completions, mdp.completion_probs(logits, prompt)):
            for t in range(len(c)):
                want[mdp.state_index[(prompt, c[:t])]] += p / len(mdp.prompts)
    assert torch.allclose(im.state_visitation(mdp, logits), want, atol=1e-12)


def test_expert_is_soft_optimal():
    mdp = MicroMDP()
    probs = mdp.completion_probs(im.expert_logits(mdp, 0.5), "y")
    assert torch.allclose(probs, torch.softmax(mdp.returns("y") / 0.5, 0), atol=1e-12)
    assert torch.allclose(im.reward_table(mdp)[mdp.state_index[("x", ("b",))], micro.ACTIONS.index(micro.EOS)],
                          torch.tensor(micro.GOAL_REWARD, dtype=torch.float64))


@pytest.mark.parametrize("horizon", [2, 4])
def test_greedy_expert_writes_a_best_completion(horizon):
    mdp = MicroMDP(horizon=horizon)
    expert = im.greedy_expert(mdp)
    for prompt in mdp.prompts:
        probs, returns = mdp.completion_probs(expert, prompt), mdp.returns(prompt)
        assert probs.max() == 1.0 and returns[probs.argmax()] == returns.max()  # checked by listing every completion


@pytest.mark.parametrize("horizon", [1, 3, 4])
def test_expected_return_is_the_sum_over_completions(horizon):
    mdp = MicroMDP(horizon=horizon)
    logits = torch.randn(mdp.shape, generator=torch.Generator().manual_seed(horizon), dtype=torch.float64)
    assert im.expected_return(mdp, logits).item() == pytest.approx(mdp.objective(logits).item(), abs=1e-12)
    expert = im.greedy_expert(mdp)
    assert im.expected_return(mdp, expert).item() == pytest.approx(max(mdp.returns(p).max().item() for p in mdp.prompts[:1])
                                                                   / 2 + mdp.returns(mdp.prompts[1]).max().item() / 2)


def test_cloning_exact_counts_recovers_the_expert_where_it_goes():
    mdp = MicroMDP()
    expert = im.expert_logits(mdp, 0.5)
    d = im.state_visitation(mdp, expert)
    counts = 1e9 * d[:, None] * torch.softmax(expert, -1)  # the expert's expected counts on a billion episodes
    learner = im.behaviour_cloning(counts)
    assert im.per_step_error(mdp, learner, expert, expert) < 1e-6


def test_dagger_lowers_the_error_on_the_learners_own_states():
    """Measured at horizon 4, expert temperature 0.05, 10 demonstrations: BC 0.242, DAgger after five
    rounds of 5 episodes 0.127 (seed 0); the return gap to the expert narrows too."""
    mdp = MicroMDP(horizon=4)
    expert = im.expert_logits(mdp, 0.05)
    g = torch.Generator().manual_seed(0)
    demos = mdp.sample(expert, 10, g)
    learners = im.dagger(mdp, expert, demos, rounds=5, episodes=5, generator=g)
    own = [im.per_step_error(mdp, learner, expert, learner) for learner in learners]
    assert own[-1] < 0.7 * own[0]
    assert mdp.objective(learners[-1]) > mdp.objective(learners[0])


def test_bad_input():
    with pytest.raises(ValueError, match="horizon"):
        MicroMDP(horizon=0)
    with pytest.raises(ValueError, match="alpha"):
        im.behaviour_cloning(torch.zeros(MicroMDP().shape), alpha=0.0)
    with pytest.raises(ValueError, match="temperature"):
        im.expert_logits(MicroMDP(), 0.0)
