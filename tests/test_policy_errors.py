"""Whatever a policy or recorder raises is that rollout's error record, in every mode: one
process (-n 0), xdist with the shared server (-n 2) and rollouts side by side
(--envs-per-worker 3), on the real PushT env with broken models defined here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_remote import REPO

pytest.importorskip("gym_pusht", reason="needs the pusht extra")

BROKEN = """
import numpy as np

from policybench.policy.base import Chunk, InfrastructureError
from policybench.preflight import ORIENTATIONS


class Still:
    '''Holds the agent at the middle of the table, 50 steps a chunk.'''

    name = "still"

    def __init__(self):
        self.answered = 0

    def open(self, context):
        def predict(obs):
            self.answered += 1
            return Chunk(np.full((50, 2), 256.0), context.control_hz)

        return predict

    def describe(self):
        return {"name": self.name}


class Undescribable(Still):
    def describe(self):
        raise ValueError("describe broke")


class DescribableOnce(Still):
    '''Describes itself until it has answered a second chunk: its preflight passes, its
    rollouts run to their end, then describing them raises.'''

    def describe(self):
        if self.answered > 1:
            raise ValueError("describe broke")
        return super().describe()


class FirstRolloutDown(Still):
    '''Its first rollout meets a server gone away, so the rollout is run again. The sessions
    before it are the preflight's: its call, and one for each way it turns the image (PushT has
    an image and an expert).'''

    opened = 0

    def open(self, context):
        predict = super().open(context)
        self.opened += 1
        mine = self.opened

        def first(obs):
            if mine == 1 + len(ORIENTATIONS) + 1 and not self.failed:
                self.failed = True
                raise InfrastructureError("server gone")
            return predict(obs)

        return first

    failed = False


UNDESCRIBABLE = Undescribable()
DESCRIBABLE_ONCE = DescribableOnce()
FIRST_ROLLOUT_DOWN = FirstRolloutDown()
"""

# A recorder (as --record-video's is) that cannot start again when its rollout is rerun.
RECORDER = """
import pytest

from policybench.pytest_plugin.fixtures import add_observer


class Unrestartable:
    def __call__(self, time_ns, obs):
        pass

    def restart(self):
        raise RuntimeError("restart broke")


@pytest.hookimpl
def pytest_runtest_setup(item):
    add_observer(item, Unrestartable())
"""

# Each mode's options and how many rollouts it runs (PushT has one task).
ONE_PROCESS = (["-n", "0", "--rollouts", "1"], 1)
SHARED_SERVER = (["-n", "2", "--rollouts", "2"], 2)  # a module:attr Model is served under -n
PER_WORKER = (["-n", "2", "--rollouts", "2", "--policy-sharing=per-worker"], 2)
SIDE_BY_SIDE = (["-n", "0", "--rollouts", "3", "--envs-per-worker", "3"], 3)


def run_pusht(tmp_path: Path, policy: str, *args: str) -> list[dict]:
    """Runs the PushT benchmark with `policy` from the module above; its records."""
    (tmp_path / "broken.py").write_text(BROKEN)
    (tmp_path / "unrestartable.py").write_text(RECORDER)
    command = [sys.executable, "-m", "pytest", "benchmarks/test_pusht.py", "-p", "no:cacheprovider"]
    command += ["-q", f"--policy=broken:{policy}", "--report-dir", str(tmp_path / "reports")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run(
        [*command, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, output
    assert "error" in done.stdout.splitlines()[-1], output  # the summary line counts errors
    lines = (tmp_path / "reports" / "latest" / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def assert_errors(records: list[dict], count: int, reason: str) -> None:
    assert len(records) == count
    for record in records:
        assert record["outcome"] == "error" and reason in record["reason"], record["reason"]
        assert "retried" not in record


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "rollouts"),
    [ONE_PROCESS, SHARED_SERVER, SIDE_BY_SIDE],
    ids=["one-process", "shared-server", "side-by-side"],
)
def test_a_model_whose_describe_raises_gives_every_rollout_an_error_record(
    tmp_path, args, rollouts
):
    records = run_pusht(tmp_path, "UNDESCRIBABLE", *args)
    assert_errors(records, rollouts, "describe broke")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "rollouts"),
    [ONE_PROCESS, PER_WORKER, SIDE_BY_SIDE],
    ids=["one-process", "per-worker", "side-by-side"],
)
def test_describing_a_rollout_that_ran_raises_into_its_error_record(tmp_path, args, rollouts):
    records = run_pusht(tmp_path, "DESCRIBABLE_ONCE", *args)
    assert_errors(records, rollouts, "policy describe raised ValueError: describe broke")
    assert [record["steps"] for record in records] == [300] * rollouts


def test_a_recorder_that_raises_when_its_rollout_is_rerun_gives_an_error_record(tmp_path):
    records = run_pusht(
        tmp_path,
        "FIRST_ROLLOUT_DOWN",
        *ONE_PROCESS[0],
        "--retry-errors",
        "1",
        "-p",
        "unrestartable",
    )
    assert_errors(records, 1, "RuntimeError: restart broke")
