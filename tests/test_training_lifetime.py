"""The run `policybench.evaluate` starts ends with the process that evaluates: a training process
killed mid-evaluation (SIGKILL), or whose call is interrupted, leaves no pytest controller or
worker behind, its run says it was stopped with the rollouts not run, and its temporary folder
is gone; a folder left by an evaluator and its run killed together goes at the next evaluation."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from policybench.training import FOLDER_PREFIX, IN_USE, _in_use

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")

ROLLOUTS = 40  # far more than run before the kill

TRAINING = """
import signal
import sys

import policybench
from policybench.suites.pusht import PUSHT

signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
policybench.evaluate(PUSHT.scripted(), evals="pusht", rollouts={rollouts}, workers=2,
                     report_dir=sys.argv[1])
"""


def parents() -> dict[int, int]:
    """Every live process's parent, zombies left out."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(stat.parent.name)] = int(fields[1])
    return found


def descendants(pid: int) -> set[int]:
    tree, found, todo = parents(), set(), [pid]
    while todo:
        pid = todo.pop()
        children = [child for child, parent in tree.items() if parent == pid]
        found.update(children)
        todo += children
    return found


def command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s: {what}")


@pytest.mark.parametrize(
    "ended",
    [signal.SIGKILL, signal.SIGINT],  # killed; the call interrupted (as in a notebook)
    ids=["killed", "interrupted"],
)
def test_ending_the_evaluating_process_stops_its_run_and_leaves_no_process(tmp_path, ended):
    pytest.importorskip("gym_pusht", reason="needs the pusht extra")
    script = tmp_path / "training.py"
    script.write_text(TRAINING.format(rollouts=ROLLOUTS))
    reports = tmp_path / "reports"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    training = subprocess.Popen(
        [sys.executable, str(script), str(reports)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def a_rollout_done():
            status = reports / "latest" / "status.json"
            return status.is_file() and json.loads(status.read_text())["done"] >= 1

        wait_for(a_rollout_done, 120, "a rollout of the evaluation finished")
        run = descendants(training.pid)
        (controller,) = [pid for pid in run if "test_evaluate.py" in command_line(pid)]
        args = command_line(controller)
        folder = Path(args[args.index("--rootdir") + 1])
        assert len(run) >= 3 and folder.is_dir()  # the controller and its two workers
    finally:
        training.send_signal(ended)
        training.wait(timeout=60)

    wait_for(lambda: not run & parents().keys(), 15, f"the run's processes {run} ended")
    status = json.loads((reports / "latest" / "status.json").read_text())
    assert status["state"] == "stopped", status
    assert status["done"] < ROLLOUTS and status["not_run"] == ROLLOUTS - status["done"]
    summary = json.loads((reports / "latest" / "summary.json").read_text())
    assert summary["overall"]["rollouts"] == status["done"]
    assert not folder.exists()


def test_an_evaluation_removes_the_folders_of_earlier_ones_nobody_holds(tmp_path, monkeypatch):
    """Killed together, an evaluator and its run leave their folder: the next evaluation removes
    it, but not one whose evaluation still lives, nor a folder it did not make."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left, live, other = (tmp_path / f"{FOLDER_PREFIX}{name}" for name in ("left", "live", "x"))
    for folder in (left, live, other):
        folder.mkdir()
    (left / IN_USE).touch()
    (live / IN_USE).touch()
    holder = subprocess.Popen(  # a run still going, holding its folder's lock
        [sys.executable, "-c", HOLD, str(live / IN_USE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        new = tmp_path / f"{FOLDER_PREFIX}new"
        new.mkdir()
        with _in_use(new):
            assert not left.exists() and live.is_dir() and other.is_dir()
            with (new / IN_USE).open("rb") as lock, pytest.raises(BlockingIOError):
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        holder.kill()
        holder.wait()


HOLD = """
import fcntl, sys, time
lock = open(sys.argv[1], "rb")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""
