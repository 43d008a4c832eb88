"""The capstone (`minirl.course.capstone`): the private test set is the same for a seed, another for
another seed, and holds no public prompt; the evaluator, run through `python -m minirl.course
capstone`, gives every student a row and ranks only those within both budgets, caught on planted
submissions (the base model itself, within budget; the base with its weights perturbed, far over
the KL budget; a card over the compute budget; a missing, a garbage, a smaller and a diverged
(NaN) checkpoint; a card that is not JSON); the course's baseline is on the board; the board
renders on the site. 32 test prompts keep it to a few seconds."""
import csv
import json
import re
import sys
from pathlib import Path

import pytest
import torch

import minirl
from minirl.core import paths
from minirl.course import capstone, commands, site
from minirl.lm.model import GPT, GPTConfig
from minirl.world import datasets

PUBLIC = {r["prompt"] for split in ("train", "test") for r in datasets.load_prompts("arithmetic", split)}


def pair(prompt: str) -> tuple[int, int]:
    return tuple(map(int, re.fullmatch(r"q: (\d+)\+(\d+)= a:", prompt).groups()))


# ---------------------------------------------------------------- the private test set
def test_the_test_set_is_the_same_for_a_seed_another_for_another_and_right():
    drawn = capstone.testset(11, 32)
    assert drawn == capstone.testset(11, 32)
    assert drawn != capstone.testset(12, 32)
    assert len({r["prompt"] for r in drawn}) == 32
    assert all(r["answer"] == sum(pair(r["prompt"])) for r in drawn)


def test_the_test_set_holds_no_public_prompt_and_a_generator_without_the_exclusion_is_caught(monkeypatch):
    everything = capstone.testset(5, len(capstone.candidate_pairs()))  # the whole pool, in some order
    assert not {r["prompt"] for r in everything} & PUBLIC
    # the pool is the training split's: the pairs it is drawn from, less its own prompts
    held = {pair(r["prompt"]) for r in datasets.load_prompts("arithmetic", "test")}
    train = {pair(r["prompt"]) for r in datasets.load_prompts("arithmetic", "train")}
    pool = set(capstone.candidate_pairs())
    assert not pool & train and not train & (held | {p[::-1] for p in held})
    assert pool | train == {(a, b) for a in range(100) for b in range(100)} - held - {p[::-1] for p in held}
    monkeypatch.setattr(capstone, "public_prompts", set)  # planted: forgets the public prompts
    assert {r["prompt"] for r in capstone.testset(5, len(capstone.candidate_pairs()))} & PUBLIC


def test_a_test_set_file_with_a_public_prompt_or_too_many_prompts_is_refused(tmp_path):
    path = tmp_path / "test.jsonl"
    capstone.write_testset(3, path, 8)
    assert capstone.read_testset(path) == [r["prompt"] for r in capstone.testset(3, 8)]
    with path.open("a") as f:
        f.write(json.dumps({"prompt": sorted(PUBLIC)[0], "answer": 0}) + "\n")  # planted
    with pytest.raises(ValueError, match="public prompt.*capstone testset"):
        capstone.read_testset(path)
    for line in ('{"prompt": "order:"}', "q: 1+2= a:", "[1, 2]"):
        path.write_text(line + "\n")
        with pytest.raises(ValueError, match="line 1 is not a capstone test prompt"):
            capstone.read_testset(path)
    path.write_text('{"prompt": "q: 100+2= a:"}\n')  # outside the operands' range
    with pytest.raises(ValueError, match="not from the training prompts' distribution"):
        capstone.read_testset(path)
    with pytest.raises(ValueError, match="at most 7404 prompts"):
        capstone.testset(3, 7405)


# ---------------------------------------------------------------- the evaluator on planted submissions
def perturbed_base(std: float = 0.05) -> GPT:
    model = minirl.load_model("base")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * std)
    return model


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """The submissions below, evaluated by `python -m minirl.course capstone evaluate` on 32 prompts."""
    root = tmp_path_factory.mktemp("capstone")
    subs = root / "submissions"
    base = minirl.load_model("base")
    capstone.save(base, subs / "alice", samples=15_360, optimizer_steps=120, method="the base model itself")
    capstone.save(perturbed_base(), subs / "bob", samples=100, optimizer_steps=1, method="noise on every weight")
    capstone.save(base, subs / "carol", samples=50_000, optimizer_steps=120, method="too many samples")
    (subs / "dave").mkdir()
    (subs / "dave" / "card.json").write_text('{"samples": 0, "optimizer_steps": 0}')
    capstone.save(base, subs / "erin", samples=0, optimizer_steps=0, method="garbage")
    (subs / "erin" / "model.pt").write_bytes(b"not a checkpoint")
    capstone.save(GPT(GPTConfig(n_layer=2)), subs / "frank", samples=0, optimizer_steps=0, method="a smaller model")
    capstone.save(base, subs / "gina", samples=0, optimizer_steps=0, method="")
    (subs / "gina" / "card.json").write_text("samples: 12")
    capstone.save(perturbed_base(float("nan")), subs / "hank", samples=0, optimizer_steps=0, method="diverged")
    test = root / "private_test.jsonl"
    capstone.write_testset(2026, test, 32)
    out = root / "board.csv"
    sys_argv = sys.argv
    try:
        sys.argv = ["python -m minirl.course", "capstone", "evaluate", str(subs), "--test", str(test), "--out", str(out)]
        commands.main()
    finally:
        sys.argv = sys_argv
    return out


def rows_by_student(path: Path) -> dict[str, dict]:
    return {row["student"]: row for row in capstone.read_leaderboard(path)}


def test_every_student_gets_a_row_with_the_reason_it_is_not_ranked(board):
    rows = rows_by_student(board)
    assert set(rows) == {"alice", "bob", "carol", "dave", "erin", "frank", "gina", "hank", capstone.BASELINE_NAME}
    assert rows["alice"]["status"] == "within budget" and float(rows["alice"]["kl"]) == 0.0  # the base: no KL at all
    assert rows["bob"]["status"].startswith("over the KL budget") and float(rows["bob"]["kl"]) > 5 * capstone.KL_BUDGET
    assert rows["carol"]["status"] == "over the compute budget (samples 50,000 > 20,000)"
    assert rows["dave"]["status"] == "no model.pt" and rows["dave"]["pass_at_1"] == ""
    assert rows["erin"]["status"].startswith("unreadable model.pt")
    assert rows["frank"]["status"].startswith("not the base model's architecture")
    assert rows["gina"]["status"] == "unreadable card.json (not JSON)" and rows["gina"]["pass_at_1"] != ""
    assert rows["hank"]["status"].startswith("the model's logits are not finite") and rows["hank"]["method"] == "diverged"
    assert all(row["test_prompts"] == "32" for row in rows.values())


def test_only_rows_within_both_budgets_are_ranked_and_the_baseline_is_marked(board):
    rows = capstone.read_leaderboard(board)
    ranked = [r for r in rows if r["rank"]]
    assert {r["student"] for r in ranked} == {"alice", capstone.BASELINE_NAME}
    assert rows[:2] == ranked and [r["rank"] for r in ranked] == ["1", "2"]
    assert [float(r["pass_at_1"]) for r in ranked] == sorted((float(r["pass_at_1"]) for r in ranked), reverse=True)
    baseline = rows_by_student(board)[capstone.BASELINE_NAME]
    assert baseline["baseline"] == "yes" and 0 < float(baseline["kl"]) <= capstone.KL_BUDGET
    assert float(baseline["pass_at_1"]) > float(rows_by_student(board)["alice"]["pass_at_1"])  # GRPO beat the base


def test_rank_puts_a_better_score_over_budget_after_a_worse_one_within():
    rows = [{"student": "a", "status": "over the KL budget (3.00 > 1.0 nats)", "pass_at_1": 0.99, "kl": 3.0},
            {"student": "b", "status": "within budget", "pass_at_1": 0.5, "kl": 0.2},
            {"student": "c", "status": "no model.pt"},
            {"student": "d", "status": "within budget", "pass_at_1": 0.6, "kl": 0.9}]
    assert [(r["student"], r["rank"]) for r in capstone.rank(rows)] == [("d", 1), ("b", 2), ("a", ""), ("c", "")]


@pytest.mark.parametrize("card, problem", [
    ({"samples": 20_000, "optimizer_steps": 500}, None),
    ({"samples": 20_001, "optimizer_steps": 500}, "over the compute budget (samples 20,001 > 20,000)"),
    ({"samples": 0, "optimizer_steps": 501}, "over the compute budget (optimizer_steps 501 > 500)"),
    ({"samples": "lots", "optimizer_steps": 1}, "card.json has no count of samples"),
    ({"samples": True, "optimizer_steps": 1}, "card.json has no count of samples"),
    ({"optimizer_steps": -1, "samples": 1}, "card.json has no count of optimizer_steps"),
    ([1, 2], "card.json is not a JSON object"),
])
def test_a_card_over_the_compute_budget_or_without_counts_is_flagged(card, problem):
    found = capstone.card_problems(card)
    assert found == [] if problem is None else (len(found) == 1 and found[0].startswith(problem))


def test_the_baseline_card_is_its_grpo_run_within_both_budgets():
    card = json.loads(paths.verified_path(capstone.BASELINE.replace(".pt", ".json")).read_text())
    assert card["command"].startswith("python -m minirl.course.capstone baseline")
    assert {k: card[k] for k in ("samples", "optimizer_steps")} == capstone.grpo_cost(capstone.BASELINE_CONFIG)
    assert capstone.card_problems(card) == [] and card["metrics"]["kl_public_test"] <= capstone.KL_BUDGET
    assert paths.rebuild_command(capstone.BASELINE) == "python -m minirl.course.capstone baseline"


# ---------------------------------------------------------------- the board on the site
def test_the_leaderboard_renders_on_the_site(board, tmp_path, monkeypatch):
    rows = capstone.read_leaderboard(board)
    rows[2]["student"] = "<b>mallory</b>"  # planted: a folder name that is markup
    with (tmp_path / "board.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, capstone.COLUMNS)
        w.writeheader()
        w.writerows(rows)
    monkeypatch.setattr(site, "lesson_paths", list)  # no lesson pages: only the guide, the board and the index
    monkeypatch.setattr(site, "doc_paths", lambda: [site.DOCS / "capstone.md"])
    monkeypatch.setattr(site, "copy_mathjax", lambda out: None)
    out = tmp_path / "site"
    site.build(out, leaderboard=tmp_path / "board.csv")
    page = (out / "leaderboard.html").read_text()
    table = re.findall(r'<tr class="(\w+)"><td>([^<]*)</td><td>(.*?)</td>', page)
    assert [(kind, rank) for kind, rank, _ in table] == [
        ("baseline" if r["baseline"] == "yes" else "ranked" if r["rank"] else "unranked", r["rank"]) for r in rows]
    assert "&lt;b&gt;mallory&lt;/b&gt;" in page and "<b>mallory" not in page
    assert f"KL at most {capstone.KL_BUDGET} nats" in page and "20,000 completions" in page
    assert 'href="leaderboard.html"' in (out / "index.html").read_text()
    assert all((out / href).is_file() for href in re.findall(r'href="([^"#]+)"', page))  # index.html, capstone.html
    (tmp_path / "board.csv").write_text("student,score\nalice,1\n")  # planted: not a board
    with pytest.raises(ValueError, match="not a capstone leaderboard"):
        site.leaderboard_page(tmp_path / "board.csv")


def test_the_command_writes_the_test_set(tmp_path, monkeypatch):
    out = tmp_path / "t.jsonl"
    monkeypatch.setattr(sys, "argv", ["python -m minirl.course", "capstone", "testset", "--seed", "3", "--prompts", "5",
                                      "--out", str(out)])
    commands.main()
    assert [json.loads(line) for line in out.read_text().splitlines()] == capstone.testset(3, 5)
