"""Success gates, like --cov-fail-under: a floor above the achieved rate fails the run with one
line per breach (eval, rate, interval, floor); at or below it the run passes. Also under xdist,
where only the controller aggregates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ENVS = (Path(__file__).parent / "envs.py").read_text()

# The greedy model solves every "mixed" rollout; the "slow" Eval times out at 0.2 s, before any
# goal is reached. With as many rollouts of each, the run's success rate is 50%.
BENCHMARK = """
import dataclasses
import policybench
from envs import GreedyPointModel, point_eval

MIXED = point_eval("mixed", tasks={"reach": "reach"}, scripted=GreedyPointModel)
SLOW = dataclasses.replace(
    point_eval("slow", tasks={"far": "reach slowly"}, timeout_s=0.2, scripted=GreedyPointModel),
    success_floor=FLOOR,
)


@policybench.parametrize(MIXED, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""


def write_bench(pytester: pytest.Pytester, floor: float | None = None) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK.replace("FLOOR", repr(floor)))
    return pytester


def test_overall_floor_above_the_rate_fails_the_run_with_the_breach_line(pytester):
    result = write_bench(pytester).runpytest("--rollouts", "2", "--success-fail-under", "0.8")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "FAIL overall: success 50.0% (95% CI [15.0%, 85.0%]) below floor 80.0% "
            "(--success-fail-under)"
        ]
    )
    result.assert_outcomes(passed=2, failed=0, errors=0)  # the gate alone fails the run


def test_overall_floor_at_or_below_the_rate_passes(pytester):
    result = write_bench(pytester).runpytest("--rollouts", "2", "--success-fail-under", "0.5")
    assert result.ret == pytest.ExitCode.OK
    assert "FAIL" not in result.stdout.str()


def test_eval_success_floor_is_checked_on_the_controller_under_xdist(pytester):
    write_bench(pytester, floor=0.5).makefile(".json", floors=json.dumps({"mixed": 1.0}))
    result = pytester.runpytest("-n", "2", "--rollouts", "2", "--success-floors", "floors.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in result.stdout.lines if line.startswith("FAIL")]
    assert lines == [
        "FAIL eval slow: success 0.0% (95% CI [0.0%, 65.8%]) below floor 50.0% (Eval.success_floor)"
    ]


def test_eval_floor_at_the_rate_passes_and_a_floors_file_overrides_it(pytester):
    assert write_bench(pytester, floor=0.0).runpytest("--rollouts", "2").ret == 0
    write_bench(pytester, floor=0.5).makefile(".json", floors=json.dumps({"slow": 0.0}))
    assert pytester.runpytest("--rollouts", "2", "--success-floors", "floors.json").ret == 0
    pytester.makefile(".json", floors=json.dumps({"mixed": 1.0, "slow": 0.01}))
    failed = pytester.runpytest("--rollouts", "2", "--success-floors", "floors.json")
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    failed.stdout.fnmatch_lines(
        ["FAIL eval slow: success 0.0% *below floor 1.0% (--success-floors)"]
    )


def test_a_floor_over_an_eval_that_ran_nothing_fails_the_run(pytester):
    write_bench(pytester)
    pytester.makefile(".json", floors=json.dumps({"mixed": 0.5, "libero": 0.9}))
    result = pytester.runpytest("--rollouts", "1", "--success-floors", "floors.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "FAIL eval libero: no rollout finished (none ran), so floor 90.0% (--success-floors) "
            "cannot hold"
        ]
    )


def test_an_overall_floor_over_a_run_that_finished_nothing_fails(pytester):
    write_bench(pytester)
    skipped = pytester.runpytest("--rollouts", "1", "--success-fail-under", "0.5", "-k", "nothing")
    assert skipped.ret == pytest.ExitCode.TESTS_FAILED  # every item deselected
    skipped.stdout.fnmatch_lines(
        ["FAIL overall: no rollout finished (none ran), so floor 50.0% (--success-fail-under)*"]
    )
    pytester.makepyfile(
        test_skipped="""
import dataclasses
import policybench
from envs import point_eval

MISSING = dataclasses.replace(point_eval("needs-sim"), requires=("no_such_simulator",))

@policybench.parametrize(MISSING)
def test_missing(rollout, harness):
    harness(rollout)
"""
    )
    every_one_skipped = pytester.runpytest("test_skipped.py", "--success-fail-under", "0.9")
    assert every_one_skipped.ret == pytest.ExitCode.TESTS_FAILED
    every_one_skipped.stdout.fnmatch_lines(["FAIL overall: no rollout finished (none ran)*"])


def test_breaches_are_shown_in_the_html_report(pytester):
    write_bench(pytester).runpytest("--rollouts", "1", "--success-fail-under", "0.9")
    index = (pytester.path / "reports" / "latest" / "index.html").read_text()
    assert 'id="verdict"' in index and "Verdict: failed" in index
    assert "overall: success 50.0%" in index


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--success-fail-under", "80"], "--success-fail-under takes a success rate in ?0, 1?"),
        (["--success-floors", "missing.json"], "--success-floors missing.json: *No such file"),
        (["--fail-on-regression"], "--fail-on-regression needs --baseline RUN"),
        (["--baseline", "nope"], "--baseline: no run 'nope'*"),
    ],
)
def test_bad_gate_options_are_usage_errors(pytester, args, message):
    result = write_bench(pytester).runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_floors_file_with_a_bad_rate_names_it(pytester):
    write_bench(pytester).makefile(".json", floors=json.dumps({"mixed": 80}))
    result = pytester.runpytest("--success-floors", "floors.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*floors.json: 'mixed': 80; expected a JSON object of Eval*"])
