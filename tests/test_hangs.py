"""Hangs and a missing server are reported, not silent: waiting for a policy server that is not
there ends every rollout in one line within --server-wait (the watchdog does not count the wait
as a hang), and a hang without xdist stops the run saying which rollout, where its stack is and
how to continue, with the summary and report written. Real pytest processes throughout."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.test_plugin import ENVS
from tests.test_remote import REPO, free_port

SERVED = """
import policybench
from tests.served import POINT


@policybench.evaluate(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""

HANGING = """
import dataclasses, time
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class Hanging(PointEnv):
    def step(self, action):
        time.sleep(3600)  # an env call that never returns
        return super().step(action)


HANGING = dataclasses.replace(
    point_eval("hanging", scripted=GreedyPointModel), make_env=lambda task: Hanging()
)


@policybench.evaluate(HANGING)
def test_point(rollout, harness):
    harness(rollout)
"""


def run_dir(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "reports" / "latest").resolve()


def records(pytester: pytest.Pytester) -> list[dict]:
    lines = (run_dir(pytester) / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def rollout_seconds(pytester: pytest.Pytester) -> float:
    """The time the run's rollouts took, all together (their testcases' times in junitxml)."""
    suite = ElementTree.parse(pytester.path / "junit.xml").getroot()
    return sum(float(case.get("time")) for case in suite.iter("testcase"))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_missing_server_ends_every_rollout_in_one_line_within_the_server_wait(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: int
):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(envs=ENVS, test_point=SERVED)
    url, wait_s = f"ws://127.0.0.1:{free_port()}", 5
    result = pytester.runpytest_subprocess(
        *("-n", str(workers), "--rollouts", "4", "--junitxml=junit.xml"),
        *("--policy=openpi", f"--policy-url={url}", f"--server-wait={wait_s}"),
        "--rollout-wall-timeout=3",  # shorter than the wait: waiting is not hanging
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    line = f"cannot reach a policy server at {url} after {wait_s} s"
    assert line in result.stdout.str()
    found = records(pytester)
    assert len(found) == 4 and all(record["outcome"] == "error" for record in found)
    for record in found:
        assert line in record["reason"] and "start one with `policybench serve" in record["reason"]
    assert (run_dir(pytester) / "summary.json").is_file()
    # Each process waits the full --server-wait once; later rollouts fail at once.
    assert rollout_seconds(pytester) < wait_s * max(workers, 1) + 5


def test_a_hang_without_xdist_says_which_rollout_where_and_how_to_resume(
    pytester: pytest.Pytester,
):
    pytester.makepyfile(envs=ENVS, test_point=HANGING)
    result = pytester.runpytest_subprocess("--rollouts", "2", "--rollout-wall-timeout", "2")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out, where = result.stdout.str(), run_dir(pytester)
    assert "rollout reach/seed=0 of hanging did not end within 2 s" in out
    assert f"the stack of every thread: {where / 'hangs' / 'main.txt'}" in out
    assert f"--rollout-wall-timeout 2 --resume {where}" in out
    (record,) = records(pytester)  # the run stopped at the hung rollout
    assert record["outcome"] == "error" and "no end within 2 s" in record["reason"]
    assert "hung at File" in record["reason"] and "test_point.py" in record["reason"]
    assert (where / "summary.json").is_file() and (where / "index.html").is_file()
