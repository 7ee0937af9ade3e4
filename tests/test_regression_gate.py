"""The regression gate cannot pass vacuously: each Eval's tasks pooled (exact McNemar over every
discordant scene pair; unpaired, the exact stratified test, checked against an enumeration of
every table and against statsmodels' Mantel-Haenszel test) catch a collapse no task's own test
can see at 3 rollouts a task; a plan too small to catch --regression-margin is refused before
any rollout (exit 4, with and without workers) unless the user opts out; and MetaWorld's experts
against the README's quickstart policy (30/30 -> 6/30) never exit 0."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import hypergeom

from policybench.report.compare import compare_runs
from policybench.report.paired import fisher_p, stratified_p
from tests.test_compare import scenes
from tests.test_readme import example_source

ROOT = Path(__file__).resolve().parents[1]


def enumerated_p(strata: list[tuple[int, int, int, int]]) -> float:
    """The exact stratified p-value by brute force: every table with each stratum's margins,
    its probability the product of hypergeometric ones, summed where no likelier than seen."""
    choices = []
    for solved_before, rollouts_before, solved_after, rollouts_after in strata:
        solved = solved_before + solved_after
        counts = range(max(0, solved - rollouts_before), min(solved, rollouts_after) + 1)
        total = rollouts_before + rollouts_after
        choices.append([(x, hypergeom.pmf(x, total, solved, rollouts_after)) for x in counts])
    sums: dict[int, float] = {}
    for combo in itertools.product(*choices):
        s = sum(x for x, _ in combo)
        sums[s] = sums.get(s, 0.0) + float(np.prod([p for _, p in combo]))
    seen = sum(stratum[2] for stratum in strata)
    return min(1.0, sum(p for p in sums.values() if p <= sums[seen] * (1 + 1e-7)))


@pytest.mark.parametrize(
    "strata",
    [
        [(3, 10, 7, 10)],
        [(3, 3, 0, 3), (3, 3, 1, 3), (2, 3, 0, 3)],
        [(5, 6, 2, 6), (1, 4, 1, 5), (0, 3, 0, 3), (4, 4, 4, 4)],
        [(9, 10, 2, 10), (8, 10, 3, 9)],
    ],
)
def test_the_stratified_test_equals_an_enumeration_of_every_table(strata):
    assert stratified_p(strata) == pytest.approx(enumerated_p(strata), rel=1e-9)
    if len(strata) == 1:
        assert stratified_p(strata) == pytest.approx(fisher_p(*strata[0]), rel=1e-9)


def test_the_stratified_test_agrees_with_statsmodels_mantel_haenszel_on_large_strata():
    from statsmodels.stats.contingency_tables import StratifiedTable

    rng = np.random.default_rng(0)
    for _ in range(5):
        strata, tables = [], []
        for _ in range(8):
            before, after = rng.binomial(60, 0.6), rng.binomial(60, 0.5)
            strata.append((before, 60, after, 60))
            tables.append(np.array([[before, 60 - before], [after, 60 - after]]))
        mh = StratifiedTable(tables).test_null_odds(correction=True).pvalue
        assert stratified_p(strata) == pytest.approx(mh, rel=0.25, abs=1e-3)


def test_a_collapse_at_three_rollouts_a_task_is_a_pooled_regression_no_task_can_show():
    tasks = [f"task{i}" for i in range(10)]
    before = [r for task in tasks for r in scenes("sss", task=task)]
    after = [r for task in tasks for r in scenes("sss" if task in tasks[:2] else "uuu", task=task)]
    comparison = compare_runs(before, after)
    assert comparison.regressions == ()  # 3 pairs can never reach p < 0.05
    (pooled,) = comparison.pooled_regressions
    assert pooled.pairs is not None and (pooled.pairs.lost, pooled.pairs.gained) == (24, 0)
    assert pooled.adjusted_p == pytest.approx(2 / 2**24)
    assert "1 of 1 Evals significantly worse over their tasks pooled" in comparison.verdict()
    unpaired = compare_runs(before, [{**r, "scene": {"seed": 99}} for r in after])
    assert unpaired.pooled_regressions and unpaired.evals[0].design == "unpaired"


def test_identical_policies_fail_the_pooled_test_at_most_alpha_of_the_time():
    """Two runs of one stochastic policy on MT10's plan (10 tasks, 5 rollouts, rates from 0.1
    to 0.95), simulated 400 times: the pooled test's false alarms stay within alpha (exact
    McNemar is conditionally exact; the binomial spread of 400 runs is 1.1 points)."""
    rng = np.random.default_rng(1)
    rates = np.linspace(0.1, 0.95, 10)
    alarms = 0
    for _ in range(400):
        runs = []
        for _ in range(2):
            outcomes = rng.random((10, 5)) < rates[:, None]
            runs.append(
                [
                    r
                    for t in range(10)
                    for r in scenes("".join("s" if o else "u" for o in outcomes[t]), task=f"t{t}")
                ]
            )
        alarms += bool(compare_runs(*runs).pooled_regressions)
    assert alarms / 400 <= 0.05 + 2 * 0.011


def pytest_run(args: list[str], report_dir: Path, policy_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(policy_dir), "MUJOCO_GL": "disable"}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_metaworld.py", "-p", "no:cacheprovider",
         "--report-dir", str(report_dir), "--rollouts", "3", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_the_metaworld_collapse_is_refused_up_front_or_fails_the_run_never_exit_0(tmp_path):
    pytest.importorskip("metaworld")
    (tmp_path / "reacher.py").write_text(example_source())  # the README's quickstart
    reports = tmp_path / "reports"
    experts = pytest_run(["-n", "2"], reports, tmp_path)
    assert experts.returncode == 0, experts.stdout[-2000:]
    baseline = (reports / "latest").resolve().name
    gate = ["--policy=reacher:MODEL", "--baseline", baseline, "--fail-on-regression"]
    for workers in ("0", "2"):
        refused = pytest_run([*gate, "-n", workers], reports, tmp_path)
        assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout[-2000:]
        assert (
            "ERROR: --fail-on-regression could pass a regression of 20 points unseen: "
            "metaworld-mt10 plans 30 rollouts on 10 tasks and needs 44 on each side (5 a task: "
            "policybench plan --baseline 1 --detect 0.2 --tasks 10)" in refused.stderr
        ), refused.stderr
        assert not refused.stdout.count("PASSED") and "1 passed" not in refused.stdout
    # Enough rollouts in this run, but only 3 a task in the baseline: the advice names it.
    more = pytest_run([*gate, "-n", "0", "--rollouts", "5"], reports, tmp_path)
    assert more.returncode == pytest.ExitCode.USAGE_ERROR, more.stdout[-2000:]
    assert "metaworld-mt10's baseline ran 30 rollouts on its 10 tasks" in more.stderr
    assert f"(the baseline {baseline} needs as many: rerun it with the same --rollouts)" in (
        more.stderr
    )
    ran = pytest_run([*gate, "-n", "2", "--allow-weak-regression-gate"], reports, tmp_path)
    assert ran.returncode == pytest.ExitCode.TESTS_FAILED, ran.stdout[-3000:]
    assert "FAIL regression metaworld-mt10/(all tasks): success 20.0%" in ran.stdout
    assert "24 of 30 paired scenes lost, 0 gained" in ran.stdout
