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


@policybench.parametrize(POINT, DYING)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_a_worker_killed_by_a_signal_leaves_an_error_record_naming_the_signal(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--rollouts", "2", "--retry-errors", "1", "--max-worker-restart=8"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, errors=2)  # each dying rollout crashed twice: 1 retry
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
        assert len(record["retried"]) == 1 and "killed by SIGKILL" in record["retried"][0]
    assert all(records[r]["outcome"] == "solved" for r in ("reach/seed=0", "reach/seed=1"))
    assert all("retried" not in records[r] for r in ("reach/seed=0", "reach/seed=1"))
    assert not list(path.parent.glob("hangs/*"))  # a killed worker is no hang


ONCE = """
import dataclasses, os, signal
from pathlib import Path
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class DyingOnce(PointEnv):
    def step(self, action):
        marker = Path("died-once")
        if not marker.exists():
            marker.write_text("")
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


ONCE = dataclasses.replace(
    point_eval("once", scripted=GreedyPointModel), make_env=lambda t: DyingOnce()
)


@policybench.parametrize(ONCE)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_a_rollout_whose_worker_was_killed_runs_again_and_finishes(pytester):
    pytester.makepyfile(envs=ENVS, test_point=ONCE)
    result = pytester.runpytest_subprocess("-n", "2", "--rollouts", "1")
    assert result.ret == 0
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    (record,) = map(json.loads, path.open())
    assert record["outcome"] == "solved"
    assert len(record["retried"]) == 1 and "killed by SIGKILL" in record["retried"][0]


def test_the_oom_kill_count_is_read_from_the_kernel():
    count = oom_kills()
    assert count is None or count >= 0
