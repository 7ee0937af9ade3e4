"""An A/B run's success gates hold every arm to each floor on the arm's own rollouts (a rate
pooled over arms mixes the policies compared), one FAIL line per breaching arm naming it; and
`policybench report merge` of an A/B run prints its rows per arm, not pooled."""

from __future__ import annotations

import json

import pytest

from policybench.cli import main as policybench_main
from tests.test_arms import AB, BENCHMARK, run_dir
from tests.test_plugin import ENVS

# Under AB, the "scripted" arm solves every rollout and the "random" arm none: pooled, 50%.


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


def fail_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("FAIL")]


def test_an_arm_below_the_overall_floor_fails_the_run_though_the_pooled_rate_is_above(bench):
    result = bench.runpytest("--rollouts", "1", *AB, "--success-fail-under", "0.4")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert fail_lines(result) == [
        "FAIL overall, arm random: success 0.0% (95% CI [0.0%, 65.8%]) below floor 40.0% "
        "(--success-fail-under)"
    ]


def test_each_arm_is_held_to_an_eval_floor_and_each_breach_names_its_arm(bench):
    bench.makefile(".json", floors=json.dumps({"point": 0.8}))
    result = bench.runpytest("--rollouts", "1", *AB, "--success-floors", "floors.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert fail_lines(result) == [
        "FAIL eval point, arm random: success 0.0% (95% CI [0.0%, 65.8%]) below floor 80.0% "
        "(--success-floors)"
    ]
    passed = bench.runpytest("--rollouts", "1", *AB[:2], "--success-fail-under", "1.0")
    assert passed.ret == pytest.ExitCode.OK and not fail_lines(passed)


def test_merge_of_an_ab_run_prints_each_arm_not_their_pooled_rate(bench, capsys):
    assert bench.runpytest("--rollouts", "1", *AB).ret == pytest.ExitCode.OK
    out = bench.path / "merged"
    capsys.readouterr()  # the run's own output
    assert policybench_main(["report", "merge", str(run_dir(bench)), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:5] == [
        "merged 1 parts: 4 rollouts",
        "  point, arm scripted: 2/2 solved (100.0%), 0 errors",
        "  point, arm random: 0/2 solved (0.0%), 0 errors",
        "  all, arm scripted: 2/2 solved (100.0%), 0 errors",
        "  all, arm random: 0/2 solved (0.0%), 0 errors",
    ]
