"""Nothing hangs forever: a rollout whose env never returns is ended by the watchdog, its worker
replaced, and the rollout runs again (or is an error naming where it hung)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time

import pytest

from tests.test_plugin import ENVS

BENCHMARK = """
import dataclasses, time
from pathlib import Path
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class Hanging(PointEnv):
    def step(self, action):
        marker = Path("hung-once")
        if ALWAYS or not marker.exists():
            marker.write_text("")
            time.sleep(3600)  # an env call that never returns
        return super().step(action)


ALWAYS = {always}
HANGING = dataclasses.replace(
    point_eval("hanging", scripted=GreedyPointModel), make_env=lambda task: Hanging()
)


@policybench.parametrize(HANGING)
def test_point(rollout, harness):
    harness(rollout)
"""


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_hung_rollout_is_ended_by_the_watchdog_and_runs_again(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK.format(always=False))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--rollouts", "1", "--rollout-wall-timeout", "3"
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    (record,) = records(pytester)
    assert record["outcome"] == "solved"
    (why,) = record["retried"]
    assert "ended by the watchdog: no end within 3 s (--rollout-wall-timeout)" in why
    assert "hung at File" in why and "line 12 in step" in why and "world.py" in why


def test_a_rollout_that_always_hangs_is_an_error_naming_where(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK.format(always=True))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--rollouts", "1", "--rollout-wall-timeout", "2", "--retry-errors", "0"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (record,) = records(pytester)
    assert record["outcome"] == "error" and "in step" in record["reason"]
    assert "no end within 2 s" in record["reason"]


def _remove_empty_hangs_dir(hangs: str, until: float) -> None:
    """Another worker finishing its rollouts: removes hangs/ whenever it is empty."""
    while time.monotonic() < until:
        with contextlib.suppress(OSError):
            os.rmdir(hangs)
        time.sleep(0.0001)


def test_the_hang_file_opens_while_another_worker_removes_the_empty_hangs_dir(tmp_path):
    """A worker opens its hang file while another removes hangs/ as empty, even from inside
    mkdir (which then raises FileExistsError): a rollout must not fail for it."""
    from policybench.pytest_plugin.watchdog import _opened

    path = tmp_path / "hangs" / "gw0.txt"
    remover = multiprocessing.get_context("spawn").Process(
        target=_remove_empty_hangs_dir, args=(str(path.parent), time.monotonic() + 4.0)
    )
    remover.start()
    try:
        time.sleep(0.5)  # the remover is running
        for _ in range(3000):
            _opened(path).close()
            path.unlink()
    finally:
        remover.join()
