"""A suite that cannot render under the configured MUJOCO_GL says so before its first rollout:
one frame is rendered in a child process with a deadline, and a backend that fails or hangs
fails the Eval's preflight, so every rollout of it is an error naming the backend at once."""

from __future__ import annotations

import json
import sys

import pytest

from policybench.rendering import MUJOCO, _mujoco_problem, render_problem
from tests.test_plugin import ENVS

BENCHMARK = """
import dataclasses

import policybench
from envs import GreedyPointModel, point_eval



def never_built(task):
    raise RuntimeError("an Eval that cannot render must not build its env")


RENDERED = dataclasses.replace(
    point_eval("rendered", tasks={"seen": "look"}), renderer="mujoco", make_env=never_built
)
PLAIN = point_eval("plain")


@policybench.parametrize(RENDERED, PLAIN)
def test_point(rollout, harness):
    harness(rollout)
"""

GREEDY = "from envs import GreedyPointModel\nMODEL = GreedyPointModel()\n"


def test_the_configured_backend_renders_here(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert render_problem(MUJOCO) is None


def test_an_eval_that_renders_nothing_is_not_checked(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    assert render_problem(None) is None


def test_a_backend_mujoco_refuses_is_named_with_the_fix(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    problem = render_problem(MUJOCO)
    assert problem.startswith("MuJoCo cannot render under MUJOCO_GL=no-such-backend: ")
    assert "invalid value for environment variable MUJOCO_GL" in problem
    assert "set MUJOCO_GL=egl" in problem


def test_a_backend_that_hangs_is_reported_after_the_deadline():
    # A child that never renders stands for a GL backend that hangs in its first context.
    problem = _mujoco_problem("osmesa", 1.0, sys.executable, "import time\ntime.sleep(60)\n")
    assert problem.startswith("MuJoCo did not render one frame within 1 s under MUJOCO_GL=osmesa")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_rollouts_of_an_eval_that_cannot_render_are_errors_without_an_env(
    pytester: pytest.Pytester, monkeypatch, workers
):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK, greedy=GREEDY)
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    result = pytester.runpytest_subprocess("--rollouts", "2", "--policy=greedy:MODEL", *workers)
    result.assert_outcomes(passed=2, errors=2)
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((r["eval"], r["outcome"]) for r in records) == [
        ("plain", "solved"),
        ("plain", "solved"),
        ("rendered", "error"),
        ("rendered", "error"),
    ]
    for record in records:
        if record["eval"] == "rendered":
            assert record["reason"].startswith("preflight of 'rendered' failed")
            assert "MuJoCo cannot render under MUJOCO_GL=no-such-backend" in record["reason"]
    result.stdout.fnmatch_lines(["preflight rendered: failed: MuJoCo cannot render*"])
