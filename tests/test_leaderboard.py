"""`policybench leaderboard` over real runs of three policies on MetaWorld (the expert, the
README's quickstart policy, random): each ranked one plus the policies significantly better, with
ties where the data cannot separate them; its McNemar p-values and Holm's adjustment checked
against independent references (scipy's binomial test, statsmodels' multipletests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import binomtest
from statsmodels.stats.multitest import multipletests

from policybench.cli import main
from policybench.report.leaderboard import leaderboard
from tests.test_readme import REPO, example_source, user_env

TASKS = "test_metaworld and (reach or drawer-close or push-v3) and not golden"
POLICIES = ("scripted", "my_policy:MODEL", "random")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs of the README's MetaWorld benchmark on reach, drawer-close and push, three
    rollouts a task (the same scenes), one per policy."""
    home = tmp_path_factory.mktemp("leaderboard")
    (home / "my_policy.py").write_text(example_source())
    for policy in POLICIES:
        command = [sys.executable, "-m", "pytest", "benchmarks/test_metaworld.py", "-k", TASKS,
                   "--rollouts", "3", f"--policy={policy}", "--report-dir", str(home / "reports"),
                   "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]  # fmt: skip
        done = subprocess.run(command, cwd=REPO, env=user_env(home), capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return home / "reports"


def test_three_policies_rank_with_ties_where_the_data_cannot_separate_them(reports):
    board = leaderboard([reports])
    assert board.evals == ("metaworld-mt10",)
    cells = {policy: board.cells[(policy, "metaworld-mt10")] for policy in POLICIES}
    solved = {policy: (cell.tally.solved, cell.tally.rollouts) for policy, cell in cells.items()}
    # The expert solves all nine; the quickstart solves reach and drawer-close, not push.
    assert solved == {"scripted": (9, 9), "my_policy:MODEL": (6, 9), "random": (0, 9)}
    # Paired by scene: the expert beats random (9 discordant pairs); the quickstart beats
    # random on 6 and loses to the expert on 3, too few to tell apart after Holm.
    pairs = {(p.before, p.after): p for p in board.pairs}
    assert {p.design for p in board.pairs} == {"paired"}
    references = {
        ("my_policy:MODEL", "random"): binomtest(0, 6).pvalue,
        ("my_policy:MODEL", "scripted"): binomtest(0, 3).pvalue,
        ("random", "scripted"): binomtest(0, 9).pvalue,
    }
    assert set(pairs) == set(references)
    _, holm, _, _ = multipletests(list(references.values()), method="holm")
    for (key, reference), adjusted in zip(references.items(), holm, strict=True):
        assert pairs[key].p_value == pytest.approx(reference, rel=1e-12)
        assert pairs[key].adjusted_p == pytest.approx(adjusted, rel=1e-12)
    assert [pairs[k].significant for k in references] == [False, False, True]
    assert {policy: cell.rank for policy, cell in cells.items()} == {
        "scripted": 1, "my_policy:MODEL": 1, "random": 2,
    }  # fmt: skip
    assert cells["scripted"].better_than == ("random",)
    assert board.policies == ("scripted", "my_policy:MODEL", "random")


def test_the_command_writes_a_page_and_markdown_and_a_new_protocol_leaves_old_runs_out(
    reports, tmp_path, capsys
):
    assert main(["leaderboard", str(reports), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "leaderboard.md").read_text()
    assert "| scripted | #1 100.0% [70, 100] (9/9) |" in text
    assert "| random | #2 0.0% [0, 30] (0/9) |" in text
    page = (tmp_path / "leaderboard.html").read_text()
    assert 'data-policy="my_policy:MODEL"' in page and 'data-rank="2"' in page
    # A newer run of random on another protocol (another base seed) is the Eval's current
    # protocol: the older runs are left out, and say why (in a copy of the runs).
    reports = Path(
        shutil.copytree(
            reports,
            tmp_path / "copy",
            symlinks=True,
            ignore=shutil.ignore_patterns("history.sqlite*"),
        )
    )
    command = [sys.executable, "-m", "pytest", "benchmarks/test_metaworld.py", "-k", TASKS,
               "--rollouts", "1", "--policy=random", "--seed", "5", "--report-dir", str(reports),
               "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=user_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    board = leaderboard([reports])
    assert [p for p, _ in board.cells] == ["random"]
    assert any(
        line.startswith("scripted on metaworld-mt10: left out") for line in board.not_comparable
    )
