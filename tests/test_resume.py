"""`--resume RUN` finishes an interrupted run: a controller stopped by SIGINT or killed with
SIGKILL mid-run, then resumed, ends with the results and summary of an uninterrupted run; a
resume under another protocol is refused, naming what differs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_plugin import ENVS

REPO = Path(__file__).resolve().parents[1]

BENCHMARK = """
import dataclasses, time
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class Slow(PointEnv):
    def step(self, action):
        time.sleep(0.02)
        return super().step(action)


def slow(name, tasks):
    eval = point_eval(name, tasks=tasks, timeout_s=0.6, scripted=GreedyPointModel)
    return dataclasses.replace(eval, make_env=lambda task: Slow())


NEAR = slow("near", {"a": "reach a", "b": "reach b"})
FAR = slow("far", {"c": "reach c"})


@policybench.parametrize(NEAR, FAR)
def test_point(rollout, harness):
    harness(rollout)
"""


def pytest_command(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--rollouts",
        "4",
        *args,
    ]


def run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        pytest_command(*args), cwd=path, env=env, capture_output=True, text=True, timeout=300
    )


def interrupted(path: Path, how: signal.Signals, after: int, *args: str) -> None:
    """Starts the run and sends `how` to its controller once `after` rollouts are recorded."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        pytest_command(*args),
        cwd=path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # A run started in the background inherits an ignored SIGINT; a controller is not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    results = path / "reports" / "latest" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if results.exists() and len(results.read_text().splitlines()) >= after:
            break
        time.sleep(0.05)
    process.send_signal(how)
    process.communicate(timeout=60)
    assert process.returncode != 0, "the run finished before it was interrupted"


def outcomes(run_dir: Path) -> dict[str, tuple]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    by_node = {r["nodeid"]: (r["outcome"], r["steps"], r["reason"]) for r in records}
    assert len(by_node) == len(records), "a rollout is recorded twice"
    return by_node


def tallies(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    keep = ("rollouts", "solved", "unsolved", "errors", "success_rate")
    return {row["eval"]: {k: row[k] for k in keep if k in row} for row in summary["evals"]}


def bench_in(path: Path) -> Path:
    path.mkdir()
    (path / "envs.py").write_text(ENVS)
    (path / "test_point.py").write_text(BENCHMARK)
    return path


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    return bench_in(tmp_path / "interrupted")


@pytest.mark.parametrize(
    ("how", "workers"),
    [(signal.SIGINT, ["-n", "0"]), (signal.SIGKILL, ["-n", "2"])],
    ids=["sigint", "kill-9-under-xdist"],
)
def test_an_interrupted_run_resumed_equals_an_uninterrupted_one(bench, tmp_path, how, workers):
    whole = bench_in(tmp_path / "whole")
    assert run(whole, *workers).returncode == 0
    expected = whole / "reports" / "latest"

    interrupted(bench, how, 3, *workers)
    run_dir = (bench / "reports" / "latest").resolve()
    carried = len(outcomes(run_dir))
    assert 3 <= carried < 12

    resumed = run(bench, "--resume", "latest", *workers)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"carried over from the interrupted run: {carried} rollouts" in resumed.stdout
    assert (bench / "reports" / "latest").resolve() == run_dir, "it resumed in the same run dir"
    counts = {noun: int(n) for n, noun in re.findall(r"(\d+) (passed|unsolved)", resumed.stdout)}
    assert sum(counts.values()) == 12 - carried  # what was carried over is not run again
    assert outcomes(run_dir) == outcomes(expected)
    assert tallies(run_dir) == tallies(expected)


def test_a_resume_under_another_protocol_is_refused_naming_what_differs(bench):
    interrupted(bench, signal.SIGINT, 2)
    other_seed = run(bench, "--resume", "latest", "--seed", "5")
    assert other_seed.returncode == pytest.ExitCode.USAGE_ERROR
    assert "base_seed is 0 in the run being resumed but 5 in this run" in other_seed.stderr
    test = bench / "test_point.py"
    test.write_text(test.read_text().replace("timeout_s=0.6", "timeout_s=0.7"))
    other_timeout = run(bench, "--resume", "latest")
    assert other_timeout.returncode == pytest.ExitCode.USAGE_ERROR
    assert "timeout_s is 0.6 in the run being resumed but 0.7 in this run" in other_timeout.stderr
    allowed = run(bench, "--resume", "latest", "--allow-protocol-mismatch")
    assert allowed.returncode == 0, allowed.stdout[-2000:]


def test_resuming_a_finished_run_runs_nothing_and_succeeds(bench):
    assert run(bench, "--rollouts", "1").returncode == 0
    run_dir = (bench / "reports" / "latest").resolve()
    before = outcomes(run_dir)
    again = run(bench, "--rollouts", "1", "--resume", "latest")
    assert again.returncode == 0, again.stdout[-2000:]
    assert f"carried over from the interrupted run: {len(before)} rollouts" in again.stdout
    assert outcomes(run_dir) == before
