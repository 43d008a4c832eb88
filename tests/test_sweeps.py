"""Recorded sweeps: the committed CSVs cover every job of the script, with the learning rates its
tuning chose, and the script re-runs one point of them and lands near it."""
import csv
import importlib.util
from pathlib import Path

import pytest

SWEEPS = Path(__file__).parents[1] / "lessons" / "sweeps"


def load_script(name: str = "ppo_vs_reinforce"):
    spec = importlib.util.spec_from_file_location(name, SWEEPS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_csvs_cover_every_job():
    script = load_script()
    steps = list(range(0, script.STEPS + 1, script.EVAL_EVERY))
    tuning = script.read_rows("lr_tuning")
    for name, jobs in [("lr_tuning", script.tuning_jobs()), *script.jobs(script.tuned_rates(tuning)).items()]:
        runs = script.per_run(script.read_rows(name))
        assert list(runs) == jobs and all([r["step"] for r in rows] == steps for rows in runs.values())
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == script.FIELDS


@pytest.mark.slow
def test_rerunning_one_point_reproduces_its_row():
    """Same command, same seed: on the machine that wrote the CSV the row is identical; elsewhere
    float reorderings can change a few samples, so compare within a tolerance."""
    script = load_script()
    rate = script.tuned_rates(script.read_rows("lr_tuning"))["reinforce"]
    recorded = script.per_run(script.read_rows("beta_sweep"))["reinforce", 0.3, 1, rate][-1]  # its evaluation at step 24
    row = script.run("reinforce", 0.3, 1, rate)[-1]
    assert row["gold_positive"] == pytest.approx(recorded["gold_positive"], abs=0.15)
    assert row["gold"] == pytest.approx(recorded["gold"], abs=0.15)


def test_reward_model_csv_covers_every_job():
    script = load_script("reward_models")
    rows = script.read_rows()
    assert [(r["kind"], r["labels"], r["seed"], r["imitation"]) for r in rows] == script.jobs()
    with open(SWEEPS / "reward_models.csv") as f:
        assert next(csv.reader(f)) == script.FIELDS


@pytest.mark.slow
def test_rerunning_one_reward_model_point_reproduces_its_row():
    """Lesson 08 re-runs (pairs, 250, seed 0); this re-runs another: scores at 500 labels, seed 1."""
    script = load_script("reward_models")
    recorded = next(r for r in script.read_rows() if r["kind"] == "scores" and r["labels"] == 500 and r["seed"] == 1)
    row = script.run("scores", 500, 1, 0.0)
    assert row["expected_accuracy"] == pytest.approx(recorded["expected_accuracy"], abs=0.02)
    assert row["correlation"] == pytest.approx(recorded["correlation"], abs=0.05)


def test_rlhf_csvs_cover_every_job():
    """Lesson 09's sweep: every job of the script has its rows, evaluated at the steps it promises."""
    script = load_script("rlhf")
    tuning = script.read_rows("rlhf_tuning")
    assert [(r["method"], r["lr"], r["seed"]) for r in tuning] == script.tuning_jobs()
    rates = script.tuned_rates(tuning)
    evals, steps = script.read_rows("rlhf_evals"), script.read_rows("rlhf_steps")
    for run, beta, seed, lr, *rest in script.ppo_jobs(rates):
        n_steps, every = rest or (script.STEPS, script.EVAL_EVERY)
        key = (run, beta, seed, lr)
        assert [r["step"] for r in evals if (r["run"], r["beta"], r["seed"], r["lr"]) == key] == list(range(0, n_steps + 1, every))
        assert [r["step"] for r in steps if (r["run"], r["beta"], r["seed"], r["lr"]) == key] == list(range(1, n_steps + 1))
    for seed in script.SEEDS:
        raft = [r for r in evals if r["run"] == "raft" and r["seed"] == seed and r["lr"] == rates["raft"]]
        assert [r["step"] for r in raft] == list(range(script.RAFT_ROUNDS + 1))
    assert [(r["n"], r["seed"]) for r in script.read_rows("best_of_n")] == [(n, s) for n in script.N_VALUES for s in script.SEEDS]
    with open(SWEEPS / "rm_scores.csv") as f:
        header = next(csv.reader(f))
    assert header == ["order", "gold"] + [f"rm_{n}_{s}" for n in script.LABELS for s in script.SEEDS]
    for name, fields in (("rlhf_evals", script.EVAL_FIELDS), ("rlhf_steps", script.STEP_FIELDS),
                         ("rlhf_tuning", script.TUNING_FIELDS), ("best_of_n", script.BON_FIELDS)):
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == fields


@pytest.mark.slow
@pytest.mark.minutes
@pytest.mark.parametrize("seed", [1, *(pytest.param(s, marks=pytest.mark.seeds) for s in range(2, 6))])
def test_rlhf_pipeline_holds_on_more_seeds(seed):
    """Lesson 09 runs PPO against rm_all from the SFT model live with seed 0, evaluates the policy after
    updates 12, 14, ..., 20 and asserts, over that window, a median gold at least 0.15 above SFT's and a
    median valid share of at least 0.7 (bounds below the worst of nine runs tried over seeds and two
    instruction sets: a PPO run here can dip for one update, or sag for several). This re-runs seed 1 of
    the sweep (rows 'ppo', beta 0.3 of rlhf_evals.csv) and asserts the same, and seeds 2-5 under the
    `seeds` mark (`make seeds`; seed 2 left `make test` to keep CI under 30 minutes). A run's own path
    changes with the CPU, so it is not compared with its recorded row."""
    import statistics

    import minirl
    from minirl.lm import reward_head
    from minirl.train import reward_model as rmod
    from minirl.train import rlhf
    from minirl.world import tasks
    from minirl.train.ppo import PPOConfig, train_ppo

    script = load_script("rlhf")
    lr = script.tuned_rates(script.read_rows("rlhf_tuning"))["ppo"]
    policy, sft = minirl.load_model("sft"), minirl.load_model("sft")
    rm_fn = rmod.as_reward_fn(reward_head.load_reward_model("rm_all"))
    config = PPOConfig(steps=script.PIPELINE_STEPS, prompts_per_step=16, group_size=4, beta=script.PIPELINE_BETA, lr=lr,
                       seed=seed)
    window = []

    def evaluate(metrics, model):
        done = metrics["step"] + 1
        if done % 2 == 0 and done > config.steps - 10:
            window.append(rlhf.policy_report(model, sft, samples=256))

    train_ppo(policy, tasks.orders_task(), config, reward_fn=rm_fn, callback=evaluate)
    before = rlhf.policy_report(sft, sft, samples=1024)
    assert len(window) == 5
    assert statistics.median(r["gold"] for r in window) >= before["gold"] + 0.15
    assert statistics.median(r["valid"] for r in window) >= 0.7


@pytest.mark.slow
@pytest.mark.minutes
def test_retraining_the_weakest_reward_model_reproduces_its_column():
    """Lesson 10 reads, exactly and from rm_scores.csv, that the weakest reward model (rm_50_1) turns
    over by at least 0.3 inside the valid orders. This retrains it with the script: on the machine that
    wrote the CSV the scores come back identical; on another CPU a model fitted to 50 pairs takes
    another path (on an AMD EPYC without AVX-512: correlation 0.86 with the recorded column, expected
    accuracy 0.536 against 0.526, a different favourite order and no turnover). So this asserts what
    holds on any machine, the accuracy and a correlation with the recorded column, not the turnover,
    which the lesson states as the recorded model's."""
    import torch

    import minirl
    from minirl.world import generate
    from minirl.core import preferences
    from minirl.train import rlhf
    from minirl.world import rewards

    script = load_script("rlhf")
    _, live = script.rm_scores_run(50, 1, str(SWEEPS))  # 50 pairs: nothing is saved (only all-pair models are)
    live = torch.tensor(live, dtype=torch.float64)
    recorded = torch.tensor([r["rm_50_1"] for r in script.read_rows("rm_scores")], dtype=torch.float64)
    texts, _, _ = rlhf.valid_order_distribution(minirl.load_model("sft"))
    gold = torch.tensor([rewards.order_utility(t) for t in texts], dtype=torch.float64)
    probs = torch.tensor(generate.order_distribution()[1], dtype=torch.float64)
    assert preferences.expected_accuracy(live, gold, probs) == pytest.approx(
        preferences.expected_accuracy(recorded, gold, probs), abs=0.02)
    assert torch.corrcoef(torch.stack([live, recorded]))[0, 1] > 0.7


def test_dpo_csvs_cover_every_job():
    """Lesson 11's sweep: every job has its rows, evaluated at the steps it promises."""
    script = load_script("dpo")
    tuning = script.read_rows("dpo_tuning")
    assert [(r["method"], r["lr"], r["seed"]) for r in tuning] == script.tuning_jobs()
    evals, steps = script.read_rows("dpo_evals"), script.read_rows("dpo_steps")
    for run, beta, seed, lr in script.jobs(script.tuned_rates(tuning)):
        key = (run, beta, seed, lr)
        n_steps = script.config_for(run, beta, seed, lr).steps
        assert [r["step"] for r in evals if (r["run"], r["beta"], r["seed"], r["lr"]) == key] == \
            list(range(0, n_steps + 1, script.EVAL_EVERY))
        assert [r["step"] for r in steps if (r["run"], r["beta"], r["seed"], r["lr"]) == key] == list(range(1, n_steps + 1))
    for name, fields in (("dpo_evals", script.EVAL_FIELDS), ("dpo_steps", script.STEP_FIELDS),
                         ("dpo_tuning", script.TUNING_FIELDS)):
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == fields


@pytest.mark.slow
@pytest.mark.minutes
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.seeds)])
def test_dpo_holds_on_more_seeds(seed):
    """Lesson 11 runs DPO at beta = 1 from the SFT model live with seed 0 and asserts, over its last five
    evaluations (DPO runs dip and recover), a median gold at least 0.5 above the base model's and a
    median valid share of at least 90%, and that the chosen responses' log-prob falls while the margin
    grows; this re-runs seed 1 of the sweep (rows 'dpo', beta 1 of dpo_evals.csv; seed 2 under `make
    seeds`) with the script and asserts the same on its evaluations, and that the late median lands
    near the recorded run's (within the spread between seeds: runs drift apart across machines and
    thread counts)."""
    import statistics

    import minirl
    from minirl.train import rlhf

    script = load_script("dpo")
    lr = script.tuned_rates(script.read_rows("dpo_tuning"))["dpo"]
    rows, _ = script.dpo_run("dpo", script.MAIN_BETA, seed, lr)
    base = rlhf.policy_report(minirl.load_model("base"), minirl.load_model("sft"), samples=1024)
    late_gold = statistics.median(r["gold"] for r in rows[-5:])
    assert late_gold >= base["gold"] + 0.5
    assert statistics.median(r["valid"] for r in rows[-5:]) >= 0.9
    start, end = rows[0], rows[-1]
    assert end["probe_chosen_logp"] < start["probe_chosen_logp"] and end["probe_margin"] > 0.4
    recorded = [r for r in script.read_rows("dpo_evals") if r["run"] == "dpo" and r["beta"] == script.MAIN_BETA
                and r["seed"] == seed][-5:]
    assert late_gold == pytest.approx(statistics.median(r["gold"] for r in recorded), abs=0.3)


def test_gail_csvs_cover_every_job():
    """Lesson 12's sweep: every job has its rows, evaluated at the steps it promises; the
    discriminators' logits cover every plan."""
    from minirl.world import generate
    script = load_script("gail")
    tuning = script.read_rows("gail_tuning")
    assert [(r["run"], r["lr"], r["seed"]) for r in tuning] == [(run, lr, s) for run, _, s, lr in script.tuning_jobs()]
    evals = script.read_rows("gail_evals")
    for run, n, seed, lr in script.jobs(script.tuned_rates(tuning)):
        every, steps = ((script.BC_EVAL_EVERY, script.BC_CONFIG["steps"]) if run == "bc"
                        else (script.EVAL_EVERY, script.GRPO_CONFIG["steps"]))
        assert [r["step"] for r in evals if (r["run"], r["demos"], r["seed"], r["lr"]) == (run, n, seed, lr)] == \
            list(range(0, steps + 1, every))
    plans, _ = generate.expert_plan_distribution()
    disc = script.read_rows("gail_disc")
    assert [r["plan"] for r in disc] == [" ".join(p) for p in plans]
    assert all(isinstance(r["logit"], float) and isinstance(r["f"], float) for r in disc)
    for name, fields in (("gail_evals", script.EVAL_FIELDS), ("gail_disc", script.DISC_FIELDS),
                         ("gail_tuning", script.TUNING_FIELDS)):
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == fields


@pytest.mark.slow
@pytest.mark.minutes
@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.seeds) for s in range(6)])
def test_gail_meets_its_target_on_every_seed(seed):
    """Lesson 12 reads GAIL's runs from gail_evals.csv and says that on each of its six seeds GAIL
    (2,000 demonstrations) ends with KL(expert || policy) at least 40% below the base's and a true
    reward within 0.3 of the expert's. This re-runs each seed with the script and asserts exactly that,
    and that at least 95% of the final policy's mass is on plans. Every seed is marked `seeds` and runs
    with `make seeds` (5 to 10 minutes of one core each): seed 0 alone was a third of `make test`'s
    slow stage, and CI must stay under 30 minutes; `make test` trains GAIL only in test_gail.py's short
    runs."""
    from minirl.train import gail
    script = load_script("gail")
    lr = script.tuned_rates(script.read_rows("gail_tuning"))["gail"]
    rows, _ = script.gail_run(max(script.DEMOS), seed, lr)
    assert rows[0]["kl"] == pytest.approx(0.472, abs=0.002)
    final = rows[-1]
    assert final["kl"] <= 0.6 * rows[0]["kl"] and final["reward"] >= gail.expert_true_reward() - 0.3
    assert final["plan_mass"] >= 0.95


def test_trl_csvs_cover_every_job():
    script = load_script("trl_grpo")
    jobs = [(v, s) for v in script.VARIANTS for s in script.SEEDS]
    with open(SWEEPS / "trl_grpo.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["variant"], int(r["seed"])) for r in rows] == jobs
    assert tuple(rows[0]) == script.COLUMNS
    with open(SWEEPS / "trl_grpo_steps.csv") as f:
        steps = list(csv.DictReader(f))
    assert sorted({(r["variant"], int(r["seed"])) for r in steps}) == sorted(jobs)
    assert all(sum(1 for r in steps if (r["variant"], int(r["seed"])) == job) == 60 for job in jobs)


def test_estimators_csv_covers_every_job():
    """Lesson 04 reads estimators.csv seed by seed: one row per (estimator, seed) of the script's plan,
    in its fields, at its one shared rate."""
    script = load_script("estimators")
    with open(SWEEPS / "estimators.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == script.FIELDS
    assert [(r["estimator"], int(r["seed"])) for r in rows] == script.jobs()
    assert {float(r["lr"]) for r in rows} == {script.LR}


def test_stale_csvs_cover_every_job():
    """Lesson 07's sweep: every tuning job and every reported job, at the rates the tuning chose."""
    script = load_script("stale")
    tuning = script.read_rows("stale_tuning")
    assert [(r["run"], r["seed"], r["lr"]) for r in tuning] == script.tuning_jobs()
    rows = script.read_rows("stale")
    assert [(r["run"], r["seed"], r["lr"]) for r in rows] == script.jobs(script.tuned_rates(tuning))
    for name in ("stale_tuning", "stale"):
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == script.FIELDS


@pytest.mark.slow
def test_rerunning_one_stale_point_reproduces_its_row():
    """Lesson 07 re-runs (stale-2-tis, seed 0) live; this re-runs another: no correction, 1 stale, seed 2."""
    script = load_script("stale")
    rate = script.tuned_rates(script.read_rows("stale_tuning"))["stale-1-none"]
    recorded = next(r for r in script.read_rows("stale") if r["run"] == "stale-1-none" and r["seed"] == 2)
    row = script.run("stale-1-none", 2, rate)
    assert row["pass1"] == pytest.approx(recorded["pass1"], abs=0.04)  # identical on the machine that wrote it
    assert row["sampler_kl"] > 0 and row["clip_fraction"] == 0.0


def test_clip_higher_csvs_cover_every_job():
    """Lesson 13's sweep: every tuning job and every reported job (the base model's evaluations
    included), at the rates the tuning chose, and every trained run's entropy path."""
    script = load_script("clip_higher")
    tuning = script.read_rows("clip_higher_tuning")
    assert [(r["run"], r["seed"], r["lr"]) for r in tuning] == script.tuning_jobs()
    rows = script.read_rows("clip_higher")
    assert [(r["run"], r["seed"], r["lr"]) for r in rows] == script.jobs(script.tuned_rates(tuning))
    steps = script.read_rows("clip_higher_steps")
    assert sorted({(r["run"], r["seed"]) for r in steps}) == sorted((n, s) for n in script.RUNS for s in script.SEEDS)
    for name, fields in (("clip_higher_tuning", script.FIELDS), ("clip_higher", script.FIELDS),
                         ("clip_higher_steps", script.STEP_FIELDS)):
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == fields


@pytest.mark.slow
def test_rerunning_one_clip_higher_point_holds_the_lessons_claims():
    """Lesson 13 re-runs the base model's row live; this re-runs a GRPO run (clip 0.2, seed 1, about a
    minute) and checks what the lesson says of every run: held-out pass@1 at least 0.15 above the
    base model's, the base model ahead at k = 8, and the entropy below 0.4 nats per token (it starts
    near 0.5)."""
    script = load_script("clip_higher")
    rate = script.tuned_rates(script.read_rows("clip_higher_tuning"))["clip-0.2"]
    rows = script.read_rows("clip_higher")
    recorded = next(r for r in rows if r["run"] == "clip-0.2" and r["seed"] == 1)
    base = next(r for r in rows if r["run"] == "base" and r["seed"] == 1)
    row, steps = script.run("clip-0.2", 1, rate)
    assert row["pass1"] == pytest.approx(recorded["pass1"], abs=0.04)  # identical on the machine that wrote it
    assert row["pass1"] >= base["pass1"] + 0.15 and row["pass8"] < base["pass8"]
    assert steps[0]["entropy"] > 0.45 and row["entropy"] < 0.4


def test_format_reward_csv_covers_every_job():
    """Lesson 13's format-reward runs: every run and seed, evaluated every EVAL_EVERY steps from 0."""
    script = load_script("format_reward")
    evaluations = range(0, script.STEPS + 1, script.EVAL_EVERY)
    assert [(r["run"], r["seed"], r["step"]) for r in script.read_rows()] == [
        (name, seed, step) for name, seed in script.jobs() for step in evaluations]
    with open(SWEEPS / "format_reward.csv") as f:
        assert next(csv.reader(f)) == script.FIELDS


@pytest.mark.slow
def test_rerunning_one_format_reward_point_holds_the_lessons_claims():
    """Lesson 13 re-runs (format-1, seed 0) live; this re-runs seed 2 (about 40 s) and checks what the
    lesson says of every seed with the bonus at weight 1: at least 85% brief answers after 60 steps,
    held-out accuracy at least 0.1 below where it started, and almost no sum of 100 or more right."""
    script = load_script("format_reward")
    rows = script.run("format-1", 2)
    recorded = [r for r in script.read_rows() if r["run"] == "format-1" and r["seed"] == 2]
    assert rows[0]["correct"] == pytest.approx(recorded[0]["correct"], abs=0.03)  # identical on the machine that wrote it
    assert rows[-1]["brief"] >= 0.85 and rows[-1]["correct"] <= rows[0]["correct"] - 0.1
    assert rows[-1]["correct_long"] <= 0.05


def test_broken_runs_csv_covers_every_job():
    """Lesson 05's broken runs: the healthy run and each cause, both seeds, every step, labelled as the lesson shows them."""
    script = load_script("broken_runs")
    assert [(r["cause"], r["seed"], r["step"]) for r in script.read_rows()] == [
        (cause, seed, step) for cause, seed in script.jobs() for step in range(script.STEPS)]
    assert all(r["run"] == script.LABELS[r["cause"]] for r in script.read_rows())
    with open(SWEEPS / "broken_runs.csv") as f:
        assert next(csv.reader(f)) == script.FIELDS


@pytest.mark.slow
def test_rerunning_one_broken_run_shows_its_signature():
    """The critic that never learns, re-run live on seed 1 (about 30 s): its explained variance stays
    near 0 at every step, the signal lesson 05 reads it by, and its first row is the recorded one."""
    script = load_script("broken_runs")
    rows = script.run("critic", 1)
    recorded = [r for r in script.read_rows() if r["cause"] == "critic" and r["seed"] == 1]
    assert rows[0]["reward"] == pytest.approx(recorded[0]["reward"], abs=0.05)  # identical on the machine that wrote it
    assert max(abs(r["explained_variance"]) for r in rows) < 0.05


def test_forgetting_csvs_cover_every_job():
    """Lesson 13's forgetting runs: every tuning and reported run, at the rates the tuning chose,
    evaluated every EVAL_EVERY steps from 0."""
    script = load_script("forgetting")
    tuning = script.read_rows("forgetting_tuning")
    evaluations = range(0, script.STEPS_RL + 1, script.EVAL_EVERY)  # STEPS_SFT is the same
    assert script.STEPS_SFT == script.STEPS_RL
    assert [(r["run"], r["seed"], r["lr"], r["step"]) for r in tuning] == [
        (*job, step) for job in script.tuning_jobs() for step in evaluations]
    rows = script.read_rows("forgetting")
    assert [(r["run"], r["seed"], r["lr"], r["step"]) for r in rows] == [
        (*job, step) for job in script.jobs(script.tuned_rates(tuning)) for step in evaluations]
    for name in ("forgetting_tuning", "forgetting"):
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == script.FIELDS


@pytest.mark.slow
def test_rerunning_one_forgetting_point_holds_the_lessons_claims():
    """Lesson 13 re-runs (SFT, seed 0) live; this re-runs (RL, seed 1, about 40 s) and checks what the
    lesson says of every RL run: where its pass@1 first reaches 0.60 it is further from the base on
    arithmetic (KL) than any recorded SFT run at that level, and where it reaches 0.55 and 0.60
    it still writes valid reviews, orders and plans at least 95% of the time."""
    from minirl.core import compare
    script = load_script("forgetting")
    rows = script.run("rl", 1, script.tuned_rates(script.read_rows("forgetting_tuning"))["rl"])

    def kl_at_060(path):
        return compare.at_kl([r["pass1"] for r in path], [r["kl_arithmetic"] for r in path], [0.60])[0]

    recorded = script.read_rows("forgetting")
    sft = [kl_at_060([r for r in recorded if r["run"] == "sft" and r["seed"] == s]) for s in script.SEEDS]
    assert kl_at_060(rows) > max(sft)
    for family in script.OTHERS:
        valid = compare.at_kl([r["pass1"] for r in rows], [r[f"valid_{family}"] for r in rows], [0.55, 0.60])
        assert min(valid) >= 0.95, (family, valid)


def test_tools_csvs_cover_every_job():
    """Lesson 15's runs with the calculator: every tuning and reported run, at the rates the tuning
    chose, evaluated every EVAL_EVERY steps from 0."""
    script = load_script("tools")
    tuning = script.read_rows("tools_tuning")
    evaluations = range(0, script.STEPS + 1, script.EVAL_EVERY)
    assert [(r["run"], r["seed"], r["lr"], r["step"]) for r in tuning] == [
        (*job, step) for job in script.tuning_jobs() for step in evaluations]
    rows = script.read_rows("tools")
    assert [(r["run"], r["seed"], r["lr"], r["step"]) for r in rows] == [
        (*job, step) for job in script.jobs(script.tuned_rates(tuning)) for step in evaluations]
    for name in ("tools_tuning", "tools"):
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == script.FIELDS


def test_tools_variants_rerun_merges_rows_back_in_a_full_runs_order():
    """`tools.py --variants` keeps the other variants' rows and puts the re-run ones where a run of
    every variant writes them."""
    script = load_script("tools")
    rows = script.read_rows("tools")
    for name in ("cost-0", "pg-outcome"):
        kept, new = [r for r in rows if r["run"] != name], [r for r in rows if r["run"] == name]
        assert script.merged(kept, new) == rows


@pytest.mark.slow
def test_rerunning_one_tools_point_holds_the_lessons_claims():
    """Lesson 15 re-runs (cost-0.2, seed 0) live; this re-runs (cost-0.05, seed 2, about 60 s) and
    checks what the lesson says of every run with a cost per call: the calls fall from about 0.6
    per episode to at most 0.1 within 60 steps, and held-out accuracy ends at 0.7 or more (the
    policy learned to add instead)."""
    script = load_script("tools")
    rows = script.run("cost-0.05", 2, script.tuned_rates(script.read_rows("tools_tuning"))["cost-0.05"])
    recorded = [r for r in script.read_rows() if r["run"] == "cost-0.05" and r["seed"] == 2]
    assert rows[0]["correct"] == pytest.approx(recorded[0]["correct"], abs=0.03)  # identical on the machine that wrote it
    assert rows[0]["calls"] >= 0.5 and rows[-1]["calls"] <= 0.1 and rows[-1]["correct"] >= 0.7


def test_process_rl_csvs_cover_every_job():
    """Lesson 14's RL on a process reward model: every arm at every rate on the tuning seed, then on
    every reported seed at its tuned rate, each evaluated at the steps the script promises."""
    script = load_script("process_rl")
    tuning = script.read_rows("process_rl_tuning")
    rates = script.tuned_rates(tuning)
    for name, jobs in (("process_rl_tuning", script.tuning_jobs()),
                       ("process_rl", [(a, s, rates[a]) for a in script.ARMS for s in script.SEEDS])):
        runs = {}
        for r in script.read_rows(name):
            runs.setdefault((r["run"], r["seed"], r["lr"]), []).append(r["step"])
        assert sorted(runs) == sorted(jobs)
        assert all(got == list(range(0, script.STEPS + 1, script.EVAL_EVERY)) for got in runs.values())
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == script.FIELDS


def test_prm_csvs_cover_every_job():
    """Lesson 14's process and outcome reward models over training seeds: the Monte Carlo PRM at every
    rate on the tuning seed (beside the shipped cards' rows), the PRM and the ORM on every reported seed
    at their tuned rates with every aggregation and n, the frames of each seed, every seed's label rows."""
    script = load_script("prm")
    tuning = script.read_rows("prm_tuning")
    assert sorted((r["kind"], r["lr"]) for r in tuning) == sorted((k, lr) for k in script.KINDS for lr in script.GRID)
    assert {r["seed"] for r in tuning} == {script.TUNING_SEED}
    rates = script.tuned_rates(tuning)
    aggregations = {"exact": script.prm.AGGREGATIONS, "orm": ("outcome",), "oracle": ("",), "first": ("",)}
    want = {(k, a, s, rates.get(k, ""), t, n) for k, hows in aggregations.items() for a in hows for s in script.SEEDS
            for t in script.steps.TERMS for n in script.NS}
    got = [(r["kind"], r["aggregation"], r["seed"], r["lr"], r["terms"], r["n"]) for r in script.read_rows("prm")]
    assert len(got) == len(set(got)) and set(got) == want
    assert sorted((r["kind"], r["seed"], r["lr"], r["terms"]) for r in script.read_rows("prm_steps")) == sorted(
        ("exact", s, rates["exact"], t) for s in script.SEEDS for t in script.steps.TERMS)
    assert sorted((r["seed"], r["terms"], r["truth"]) for r in script.read_rows("prm_labels")) == sorted(
        (s, t, y) for s in (script.TUNING_SEED, *script.SEEDS) for t in script.steps.TERMS for y in (0, 1))
    for name, fields in script.FIELDS.items():
        with open(SWEEPS / f"{name}.csv") as f:
            assert next(csv.reader(f)) == fields


@pytest.mark.slow
def test_the_prm_sweeps_candidates_are_drawn_again_as_recorded():
    """One reported seed's candidates, drawn again: their first-sample and any-of-n rows land on the
    CSV's (identical on the machine that wrote it; another CPU's rounding can change a few samples)."""
    script = load_script("prm")
    recorded = {(r["kind"], r["terms"], r["n"]): r["correct"] for r in script.read_rows("prm") if r["seed"] == 1
                and r["kind"] in ("oracle", "first")}
    again = {(r["kind"], r["terms"], r["n"]): r["correct"] for r in script.frame_rows(1)}
    assert again.keys() == recorded.keys()
    assert all(again[k] == pytest.approx(v, abs=0.03) for k, v in recorded.items())


@pytest.mark.slow
@pytest.mark.minutes
@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.seeds) for k in ("exact", "orm")])
def test_retraining_one_prm_sweep_model_reproduces_its_rows(kind):
    """One model of the first reported seed trained again (about 10 minutes of one core: `make seeds`):
    its best-of-n rows, and the PRM's step AUC, land on the CSV's."""
    script = load_script("prm")
    seed, rate = script.SEEDS[0], script.tuned_rates(script.read_rows("prm_tuning"))[kind]
    records = script.process_models.records(script.SHIPPED[kind], script.sampling_seed(seed))
    rows = script.train_and_measure(kind, seed, rate, records)
    for name, key in (("prm", "correct"), ("prm_steps", "auc")):
        recorded = [r for r in script.read_rows(name) if (r["kind"], r["seed"]) == (kind, seed)]
        assert len(rows[name]) == len(recorded)
        assert all(got[key] == pytest.approx(r[key], abs=0.04) for got, r in zip(rows[name], recorded))
