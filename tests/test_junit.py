"""CI systems see outcomes: with --junitxml each rollout's testcase carries its outcome, reason,
steps and sum reward as properties, and each Eval's success rate and interval are testsuite
properties, in one process and under xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import pytest

from tests.test_plugin import ENVS

BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

SOLVABLE = point_eval("solvable", scripted=GreedyPointModel)
SLOW = point_eval("slow", tasks={"far": "reach slowly"}, timeout_s=0.2, scripted=GreedyPointModel)


@policybench.parametrize(SOLVABLE, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""


def properties(element: ElementTree.Element) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in element.iterfind("properties/property")}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_junitxml_testcases_carry_outcomes_and_the_suite_carries_success_rates(
    pytester: pytest.Pytester, workers
):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    result = pytester.runpytest_subprocess("--rollouts", "2", "--junitxml=junit.xml", *workers)
    assert result.ret == 0
    suite = ElementTree.parse(pytester.path / "junit.xml").getroot().find("testsuite")
    cases = {case.get("name"): properties(case) for case in suite.iter("testcase")}
    assert cases["test_point[reach/seed=0]"]["policybench.outcome"] == "solved"
    assert cases["test_point[reach/seed=0]"]["policybench.reason"].startswith("success at step")
    far = cases["test_point[far/seed=1]"]
    assert far["policybench.outcome"] == "unsolved" and far["policybench.steps"] == "2"
    assert far["policybench.reason"] == "timeout after 2 steps (0.2 s)"
    assert float(far["policybench.sum_reward"]) < 0
    assert far["policybench.eval"] == "slow" and far["policybench.task"] == "far"
    assert json.loads(far["policybench.scene"])["seed"] == 1
    assert not any(name == "policybench" for case in cases.values() for name in case)
    run = properties(suite)
    assert run["policybench.solvable.success_rate"] == "1.0"
    assert run["policybench.slow.success_rate"] == "0.0"
    assert run["policybench.all.rollouts"] == "4" and run["policybench.all.solved"] == "2"
    low, high = map(float, run["policybench.solvable.success_ci95"].split(","))
    assert 0.3 < low < 1.0 == high
