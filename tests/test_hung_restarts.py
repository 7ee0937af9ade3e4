"""The run's own server exits with status 75 on purpose when a model call hangs past its call
timeout (the hung call already answered with its error); the run restarts it without counting
that exit toward the limit of deaths, so a task whose every rollout hangs leaves the other
tasks' rollouts to finish. A real run: real server, real workers, real hangs.

One worker runs the rollouts in turn: with two, a call of task a or c in flight when the server
exits for one of b's hung calls is dropped with it (a transient error, retried, that may meet
the next exit too), which makes the count of solved rollouts depend on the machine's load."""

from __future__ import annotations

import os

import pytest

from tests.test_hangs import BENCHMARK_OF_POINT3, HANGING_MODEL, records
from tests.test_plugin import ENVS
from tests.test_remote import REPO


def test_hung_calls_do_not_use_up_the_server_restarts_of_the_other_tasks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    benchmark = "import policybench\n" + HANGING_MODEL + BENCHMARK_OF_POINT3
    pytester.makepyfile(envs=ENVS, test_point=benchmark)
    result = pytester.runpytest_subprocess(
        *("-n", "1", "--rollouts", "4", "--policy=test_point:HANGS_ON_B", "-p", "no:randomly"),
        *("--policy-sharing=shared", "--infer-timeout=3"),
    )
    out = result.stdout.str()
    outcomes = {}
    for record in records(pytester):
        outcomes.setdefault(record["instruction"], []).append(record["outcome"])
    # Every rollout of task b hung: four exits of the server, more than the three restarts a
    # crashing server gets.
    assert outcomes.pop("reach b") == ["error"] * 4, out[-3000:]
    assert outcomes == {"reach a": ["solved"] * 4, "reach c": ["solved"] * 4}, out[-3000:]
    assert out.count("exited with status 75") >= 4, out[-3000:]
    assert "a model call hung, which is not counted toward the 3 restarts" in out
    assert "not restarted again" not in out
