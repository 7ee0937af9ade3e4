"""The pytest side of served policies: `--policy=openpi` against `policybench serve`, and the
server a run shares among its xdist workers, give the same outcomes as the in-process policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_remote import REPO, free_port, start_server

pytest.importorskip("metaworld", reason="needs the metaworld extra")

SELECTION = ["benchmarks/test_metaworld.py", "-k", "reach or drawer-close", "--rollouts", "1"]


def run_benchmark(report_dir: Path, *args: str) -> list[dict]:
    command = [sys.executable, "-m", "pytest", *SELECTION, "-p", "no:cacheprovider", "-q"]
    command += ["--report-dir", str(report_dir), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (report_dir / "latest" / "results.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda record: record["nodeid"])


def outcomes(records: list[dict]) -> list[tuple]:
    return [(r["nodeid"], r["outcome"], r["steps"], r["reason"]) for r in records]


@pytest.mark.slow
def test_served_metaworld_gives_the_in_process_outcomes(tmp_path):
    in_process = run_benchmark(tmp_path / "local", "-n", "0", "--policy=scripted")
    assert len(in_process) == 2 and all("url" not in r["policy"] for r in in_process)

    port = free_port()
    server = start_server(port, "--eval", "metaworld-mt10")
    try:
        url = f"ws://127.0.0.1:{port}"
        over_openpi = run_benchmark(
            tmp_path / "openpi", "-n", "2", "--policy=openpi", "--policy-url", url
        )
    finally:
        server.kill()
        server.wait()
    assert outcomes(over_openpi) == outcomes(in_process)
    assert {r["policy"]["codec"] for r in over_openpi} == {"openpi"}

    shared = run_benchmark(
        tmp_path / "shared", "-n", "2", "--policy=scripted", "--policy-sharing=shared"
    )
    assert outcomes(shared) == outcomes(in_process)
    assert {r["policy"]["served"] for r in shared} == {"shared"}
    # The record describes the model the shared server answered with, not just the connection.
    assert {r["policy"]["model"]["name"] for r in shared} == {"scripted"}


def test_a_policy_url_nobody_answers_is_named_on_the_terminal_within_seconds(tmp_path):
    """Nothing listens at --policy-url: the run's header names the URL, why, how long rollouts
    will wait (--server-wait) and what to start, seconds in, under -n 2 too (it once said
    nothing for two minutes, the warning kept in the captured log)."""
    port = free_port()
    command = [sys.executable, "-m", "pytest", *SELECTION, "-p", "no:cacheprovider", "-n", "2",
               "--report-dir", str(tmp_path), "--policy=openpi",
               f"--policy-url=ws://127.0.0.1:{port}", "--server-wait", "3"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "MUJOCO_GL": "disable"}
    env.pop("PYTEST_ADDOPTS", None)
    started = time.monotonic()
    run = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        for line in run.stdout:
            if "no policy server answers" in line:
                break
        else:
            raise AssertionError("the terminal never named the unreachable server")
        assert time.monotonic() - started < 15
        assert f"at ws://127.0.0.1:{port} (ConnectionRefusedError" in line
        assert "wait up to 3 s for one (--server-wait)" in line and "policybench serve" in line
    finally:
        run.kill()
        run.wait()
