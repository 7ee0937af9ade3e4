"""The pytest plugin, run through pytester: outcomes, statuses, the summary table, results.jsonl,
bad input, selection and skipping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ENVS = (Path(__file__).parent / "envs.py").read_text()

BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

SOLVABLE = point_eval("solvable", scripted=GreedyPointModel)
BROKEN = point_eval("broken", tasks={"crash": "reach and crash"}, raise_at_step=2,
                    scripted=GreedyPointModel)
SLOW = point_eval("slow", tasks={"far": "reach slowly"}, timeout_s=0.2, scripted=GreedyPointModel)


@policybench.parametrize(SOLVABLE, BROKEN, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


def results(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_rollout_is_an_item_with_a_readable_id(bench):
    result = bench.runpytest("--collect-only", "-q", "--rollouts", "2")
    result.stdout.fnmatch_lines(
        [
            "test_point.py::test_point[reach/seed=0]",
            "test_point.py::test_point[reach/seed=1]",
            "test_point.py::test_point[crash/seed=0]",
            "test_point.py::test_point[far/seed=1]",
        ]
    )


def test_unsolved_rollout_does_not_fail_the_run_and_has_its_own_status(bench):
    result = bench.runpytest("-k", "reach or far", "--rollouts", "2")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["test_point.py ..uu*", "*2 passed, 2 deselected, 2 unsolved*"])
    verbose = bench.runpytest("-v", "-k", "far", "--rollouts", "1")
    verbose.stdout.fnmatch_lines(["*test_point[[]far/seed=0[]] UNSOLVED*"])


def test_env_error_is_an_error_with_its_reason_and_the_other_rollouts_still_run(bench):
    result = bench.runpytest("--rollouts", "2")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*env step raised RuntimeError: simulated physics blow-up at step 2*",
            "*2 passed, 2 errors, 2 unsolved*",
        ]
    )
    outcomes = {(r["eval"], r["scene"]["seed"]): r["outcome"] for r in results(bench)}
    assert outcomes == {
        ("solvable", 0): "solved",
        ("solvable", 1): "solved",
        ("broken", 0): "error",
        ("broken", 1): "error",
        ("slow", 0): "unsolved",
        ("slow", 1): "unsolved",
    }


def test_terminal_summary_has_a_row_per_eval_with_counts_and_interval(bench):
    result = bench.runpytest("--rollouts", "2")
    result.stdout.fnmatch_lines(
        [
            "*policybench: policy scripted*",
            "eval*rollouts*solved*unsolved*errors*success*95% CI",
            "broken*2*0*0*2*no result*(every rollout errored)",  # never a 0% success
            "slow*2*0*2*0*0.0%*",
            "solvable*2*2*0*0*100.0%*",
            "all*6*2*2*2*33.3%*",
            "results: *results.jsonl",
        ]
    )


def test_results_jsonl_has_one_line_per_rollout_with_statics_and_outcome(bench):
    bench.runpytest("-k", "reach", "--rollouts", "3", "--seed", "10")
    lines = results(bench)
    assert [line["scene"] for line in lines] == [{"task": "reach", "seed": s} for s in (10, 11, 12)]
    assert {line["outcome"] for line in lines} == {"solved"}
    assert all(
        line["nodeid"].startswith("test_point.py::test_point[reach/seed=1") for line in lines
    )
    assert all(line["policy"]["name"] == "greedy" for line in lines)


def test_unknown_policy_is_a_usage_error_listing_the_known_ones(bench):
    result = bench.runpytest("--policy", "gpt-robot")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown policy 'gpt-robot'; known policies: scripted, random*"])


def test_bad_inference_latency_is_a_usage_error(bench):
    result = bench.runpytest("--inference-latency", "soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*inference latency must be 'none', seconds >= 0*"])


def test_suite_option_selects_evals_by_name(bench):
    result = bench.runpytest("--suite", "solv", "--rollouts", "2")
    result.assert_outcomes(passed=2, deselected=4)


def test_eval_whose_simulator_is_not_installed_is_skipped_with_what_to_install(pytester):
    pytester.makepyfile(
        envs=ENVS,
        test_missing="""
import dataclasses
import policybench
from envs import point_eval

MISSING = dataclasses.replace(point_eval("needs-sim"), requires=("no_such_simulator",),
                              extra="nosim")

@policybench.parametrize(MISSING)
def test_missing(rollout, harness):
    harness(rollout)
""",
    )
    result = pytester.runpytest("-rs", "--rollouts", "2")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        ["*needs-sim: no_such_simulator not installed; pip install 'policybench[[]nosim[]]'*"]
    )
    # One line for the suite, not one `s` per item; the skipped count stays honest.
    quiet = pytester.runpytest("--rollouts", "3")
    quiet.assert_outcomes(skipped=3)
    quiet.stdout.fnmatch_lines(
        [
            "test_missing.py *",
            "*policybench: policy scripted*",
            "needs-sim: 3 items not run: no_such_simulator not installed; "
            "pip install 'policybench[[]nosim[]]'",
            "*3 skipped*",
        ]
    )
    assert not any(line.startswith("test_missing.py s") for line in quiet.outlines)


def test_random_policy_runs_any_eval(bench):
    result = bench.runpytest("--policy", "random", "-k", "reach", "--rollouts", "2")
    assert result.ret == 0
    assert {line["policy"]["name"] for line in results(bench)} == {"random"}


def test_light_policies_run_in_each_worker_by_default_under_xdist(bench):
    result = bench.runpytest_subprocess("-n", "2", "-k", "reach", "--rollouts", "2")
    assert result.ret == 0
    records = results(bench)
    assert len(records) == 2
    assert all("served" not in record["policy"] for record in records), "scripted was served"


def test_an_eval_without_a_scripted_policy_is_skipped_before_any_env_is_built(pytester):
    pytester.makepyfile(
        envs=ENVS,
        test_unscripted="""
import dataclasses
import policybench
from envs import point_eval

def no_env(task):
    raise AssertionError("the env was built for a policy that cannot run")

UNSCRIPTED = dataclasses.replace(point_eval("unscripted"), make_env=no_env)

@policybench.parametrize(UNSCRIPTED)
def test_unscripted(rollout, harness):
    harness(rollout)
""",
    )
    result = pytester.runpytest("-rs", "--rollouts", "2")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*eval 'unscripted' has no scripted policy; try --policy=random*"])
