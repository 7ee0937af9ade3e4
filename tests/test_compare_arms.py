"""Comparing runs where one or both are A/B runs: never a pool of arms, nor whichever arm came
first. Two A/B runs are compared arm by arm; an A/B run against a run of one policy compares
nothing until an arm is picked (--arm, --before-arm, --after-arm; --baseline-arm under pytest),
and --fail-on-regression fails on such a refusal rather than judging it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from policybench.cli import main
from tests.test_arms import BENCHMARK
from tests.test_plugin import ENVS

# Under these, the "scripted" arm solves every rollout and the "random" arm none.
SCRIPTED_FIRST = ("--policy", "scripted", "--policy", "random")
RANDOM_FIRST = ("--policy", "random", "--policy", "scripted")


@pytest.fixture
def runs(pytester: pytest.Pytester) -> dict[str, str]:
    """Two A/B runs of the same arms in either order, a run of `scripted` and one of `random`,
    all of the same scenes."""
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    made = {}
    for name, policy in [
        ("ab", SCRIPTED_FIRST),
        ("ba", RANDOM_FIRST),
        ("scripted", ("--policy", "scripted")),
        ("random", ("--policy", "random")),
    ]:
        result = pytester.runpytest("--rollouts", "2", *policy, "--report-dir", f"r/{name}")
        assert result.ret == 0, result.stdout.str()
        made[name] = str((pytester.path / "r" / name / "latest").resolve())
    return made


def compare(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int | str, str]:
    capsys.readouterr()
    try:
        status: int | str = main(["report", "compare", *args])
    except SystemExit as exit:
        status = str(exit.code)
    return status, capsys.readouterr().out


def pooled(out: str) -> list[str]:
    """The (all tasks) row's two rates and change."""
    row = next(line for line in out.splitlines() if "(all tasks)" in line)
    return re.findall(r"\d+/\d+ \(\d+%\)|[+-]\d+\.\d%(?!,)", row)[:3]


def test_an_ab_run_is_compared_arm_by_arm_or_against_the_arm_picked_never_pooled(runs, capsys):
    for ab in (runs["ab"], runs["ba"]):
        status, _ = compare(capsys, ab, runs["scripted"], "--fail-on-regression")
        assert isinstance(status, str) and "is an A/B run (arms " in status, status
        assert "pick the arm to compare with --before-arm NAME (or --arm NAME)" in status
    # Picked, either order of --policy gives the same answer.
    for ab in (runs["ab"], runs["ba"]):
        status, out = compare(capsys, ab, runs["scripted"], "--arm", "scripted")
        assert status == 0, status
        assert pooled(out) == ["4/4 (100%)", "4/4 (100%)", "+0.0%"], out
        assert "have no scene" not in out
        status, out = compare(capsys, ab, runs["scripted"], "--arm", "random")
        assert pooled(out) == ["0/4 (0%)", "4/4 (100%)", "+100.0%"], out
    status, _ = compare(capsys, runs["ab"], runs["scripted"], "--arm", "other")
    assert isinstance(status, str) and "has no arm other (its arms are scripted, random)" in status
    status, _ = compare(capsys, runs["scripted"], runs["random"], "--arm", "scripted")
    assert isinstance(status, str) and "neither run is one" in status
    # Two A/B runs: arm by arm, whatever the order of their arms.
    status, out = compare(capsys, runs["ab"], runs["ba"], "--fail-on-regression")
    assert status == 0, status
    rows = [line for line in out.splitlines() if line.startswith("point [arm ")]
    assert len(rows) == 6, out  # per arm: two tasks and the pooled row
    assert all("(100%)  " in row for row in rows if "arm scripted" in row)
    assert all("+0.0%" in row for row in rows), rows
    written = json.loads((Path(runs["ba"]) / f"compare-{Path(runs['ab']).name}.json").read_text())
    assert {row["arm"] for row in written["tasks"]} == {"scripted", "random"}


def test_baseline_of_an_ab_run_fails_the_regression_gate_unless_its_arm_is_picked(pytester, runs):
    refused = pytester.runpytest(
        "--rollouts", "2", "--policy", "scripted", "--report-dir", "r/new",
        "--baseline", runs["ba"], "--fail-on-regression", "--allow-weak-regression-gate",
    )  # fmt: skip
    assert refused.ret == pytest.ExitCode.TESTS_FAILED
    refused.stdout.fnmatch_lines(
        ["FAIL --fail-on-regression: * is an A/B run (arms random, scripted) and * is not: *"
         "pick the arm to compare with --baseline-arm NAME"]
    )  # fmt: skip
    assert "have no scene" not in refused.stdout.str()
    picked = pytester.runpytest(
        "--rollouts", "2", "--policy", "scripted", "--report-dir", "r/new",
        "--baseline", runs["ba"], "--baseline-arm", "scripted", "--fail-on-regression",
        "--allow-weak-regression-gate",
    )  # fmt: skip
    assert picked.ret == pytest.ExitCode.OK, picked.stdout.str()
    picked.stdout.fnmatch_lines(["point*all tasks*4/4 (100%)*4/4 (100%)*+0.0%*"])


def test_blinded_runs_match_arms_by_letter_only_under_one_blinding(pytester, capsys):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    made = []
    for key in ("K1", "K2"):
        args = ("--rollouts", "1", *SCRIPTED_FIRST, "--blind", key, "--report-dir", f"r/{key}")
        assert pytester.runpytest(*args).ret == 0
        made.append(str((pytester.path / "r" / key / "latest").resolve()))
    status, _ = compare(capsys, *made)
    assert isinstance(status, str) and "were not blinded alike" in status, status
    for run in made:
        assert main(["report", "unblind", run]) == 0
    status, out = compare(capsys, *made)
    assert status == 0 and "point [arm scripted]" in out, status
