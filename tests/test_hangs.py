"""Hangs and a missing server are reported, not silent: waiting for a policy server that is not
there ends every rollout in one line within --server-wait (the watchdog does not count the wait
as a hang), and a hang without xdist stops the run saying which rollout, where its stack is and
how to continue, with the summary and report written. Real pytest processes throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.policy.base import InfrastructureError, SessionContext
from policybench.serve.client import Endpoint, RemoteDown, RemoteModel, RemotePolicyError
from policybench.serve.command import MODEL_HUNG
from tests.test_plugin import ENVS
from tests.test_remote import REPO, free_port

SERVED = """
import policybench
from tests.served import POINT


@policybench.parametrize(POINT)
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


@policybench.parametrize(HANGING)
def test_point(rollout, harness):
    harness(rollout)
"""


def run_dir(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "reports" / "latest").resolve()


def records(pytester: pytest.Pytester) -> list[dict]:
    lines = (run_dir(pytester) / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def rollout_seconds(pytester: pytest.Pytester) -> list[float]:
    """The time each of the run's rollouts took (their testcases' times in junitxml)."""
    suite = ElementTree.parse(pytester.path / "junit.xml").getroot()
    return [float(case.get("time")) for case in suite.iter("testcase")]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_missing_server_ends_every_rollout_in_one_line_within_the_server_wait(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: int
):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(envs=ENVS, test_point=SERVED)
    url, wait_s = f"ws://127.0.0.1:{free_port()}", 8
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
    # The run waits the full --server-wait once, in whichever process meets the absence first;
    # every later rollout, in any process, fails at once.
    seconds = sorted(rollout_seconds(pytester))
    assert seconds[-1] < wait_s + 3 and seconds[-2] < wait_s / 2, seconds


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


HANGING_MODEL = """
import itertools, time
from envs import GreedyPointModel, point_eval
from policybench import keys

POINT3 = point_eval("point3", tasks={"a": "reach a", "b": "reach b", "c": "reach c"})


class Hangs:
    # Solves the point task, but from its call number `first` on `task` no call returns.
    name = "hangs"

    def __init__(self, task, first):
        self.task, self.first = task, first

    def open(self, context):
        greedy, calls = GreedyPointModel().open(context), itertools.count()

        def predict(obs):
            if context.instruction == self.task and next(calls) >= self.first:
                time.sleep(3600)
            return greedy(obs)

        return predict

    def describe(self):
        return {keys.POLICY_NAME: self.name}


HANGS_ON_B = Hangs("reach b", first=1)
HANGS_ON_A_AT_ONCE = Hangs("reach a", first=0)  # the Eval's preflight asks about task a
"""


def test_a_served_call_past_the_call_timeout_fails_its_task_only_and_ends_the_server(
    tmp_path: Path,
):
    (tmp_path / "envs.py").write_text(ENVS)
    (tmp_path / "hanging.py").write_text(HANGING_MODEL)
    port = free_port()
    command = [sys.executable, "-m", "policybench.cli", "serve", "--policy=hanging:HANGS_ON_B"]
    command += ["--eval=hanging:POINT3", "--call-timeout=2", f"--port={port}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [tmp_path, REPO / "src", REPO]))}
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        assert "serving" in server.stdout.readline()
        errors: dict[str, Exception] = {}

        def rollout(instruction: str) -> None:
            model = RemoteModel(Endpoint(f"ws://127.0.0.1:{port}"), eval_name="point3")
            source = model.open(SessionContext(instruction, 10.0))
            try:
                for _ in range(5):
                    source({keys.STATE: np.array([0.0, 1.0])})
            except Exception as error:
                errors[instruction] = error

        threads = [threading.Thread(target=rollout, args=(f"reach {t}",)) for t in "abc"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert server.wait(30) == MODEL_HUNG
    finally:
        server.kill()
    hung = errors.pop("reach b")
    assert isinstance(hung, RemotePolicyError) and not isinstance(hung, InfrastructureError)
    assert "model call did not return within 2 s" in str(hung) and "'reach b'" in str(hung)
    # The others' calls waited behind the stuck one: their server went away, to be run again.
    assert all(isinstance(error, RemoteDown) for error in errors.values()), errors
    assert "exiting with status 75" in server.stdout.read()


@pytest.mark.parametrize(
    ("model", "task"),
    [("HANGS_ON_B", "reach b"), ("HANGS_ON_A_AT_ONCE", "reach a")],
    ids=["later-call", "preflight-call"],
)
def test_a_model_call_that_hangs_on_the_shared_server_errors_its_rollout_only(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, model: str, task: str
):
    """A hung call says nothing of the model's contract: when it is the Eval's preflight call,
    the preflight is inconclusive and the other tasks still run."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    benchmark = "import policybench\n" + HANGING_MODEL + BENCHMARK_OF_POINT3
    pytester.makepyfile(envs=ENVS, test_point=benchmark)
    result = pytester.runpytest_subprocess(
        *("-n", "2", "--rollouts", "1", f"--policy=test_point:{model}"),
        *("--policy-sharing=shared", "--infer-timeout=4"),
    )
    out = result.stdout.str()
    by_task = {record["instruction"]: record for record in records(pytester)}
    hung = by_task.pop(task)
    limit = "model call did not return within 3.6 s"
    assert hung["outcome"] == "error" and limit in hung["reason"], out[-3000:]
    # The hung call is never run again. A hang at the preflight's call makes the server exit
    # as the rollout connects, so its first attempt may be cut short by that restart and retried.
    assert not any(limit in why for why in hung.get("retried", [])), hung
    if model == "HANGS_ON_B":
        assert "retried" not in hung, hung
    assert f"'{task}'" in hung["reason"]
    # The others finished, run again on the restarted server if the hang cut them short.
    assert [record["outcome"] for record in by_task.values()] == ["solved", "solved"], out[-3000:]


BENCHMARK_OF_POINT3 = """

@policybench.parametrize(POINT3)
def test_point(rollout, harness):
    harness(rollout)
"""
