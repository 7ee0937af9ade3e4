"""A worker killed mid-rollout (by a signal, as the kernel's out-of-memory killer does) leaves
that rollout as an error record with its cause; the other rollouts run on a replaced worker."""

from __future__ import annotations

import json

import pytest

from policybench.pytest_plugin.crashes import oom_kills
from tests.test_plugin import ENVS

BENCHMARK = """
import dataclasses, os, signal
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class Dying(PointEnv):
    def step(self, action):
        os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does


POINT = point_eval("point", scripted=GreedyPointModel)
DYING = dataclasses.replace(
    point_eval("dying", tasks={"die": "die at the first step"}, scripted=GreedyPointModel),
    make_env=lambda task: Dying(),
)


@policybench.evaluate(POINT, DYING)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_a_worker_killed_by_a_signal_leaves_an_error_record_naming_the_signal(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    result = pytester.runpytest_subprocess("-n", "2", "--rollouts", "2", "--max-worker-restart=4")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*worker gw* crashed while running this rollout: killed by SIGKILL*"]
    )
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = {r["nodeid"].split("[")[1].rstrip("]"): r for r in map(json.loads, path.open())}
    assert sorted(records) == ["die/seed=0", "die/seed=1", "reach/seed=0", "reach/seed=1"]
    for died in ("die/seed=0", "die/seed=1"):
        record = records[died]
        assert record["outcome"] == "error" and record["eval"] == "dying"
        assert record["scene"] == {"task": "die", "seed": int(died[-1])}
        assert "killed by SIGKILL" in record["reason"] and record["worker"].startswith("gw")
    assert all(records[r]["outcome"] == "solved" for r in ("reach/seed=0", "reach/seed=1"))


def test_the_oom_kill_count_is_read_from_the_kernel():
    count = oom_kills()
    assert count is None or count >= 0
