"""A LeRobot checkpoint served from LeRobot's environment (`policybench serve
--policy=lerobot:CKPT`) and evaluated over openpi's protocol (`--policy=openpi --policy-url`) by
a suite run in an environment without LeRobot gives each rollout the outcome, steps and rewards
of the in-process run. The suite's run takes $POLICYBENCH_SUITE_PYTHON (an interpreter whose
environment holds policybench and the pusht extra, e.g. `tox -e test`'s), this one's if unset.
Runs in the `lerobot` tox env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")
pytest.importorskip("gym_pusht", reason="needs the pusht extra")

from policybench import keys
from tests.lerobot_eval import SHORT, outcomes, run_pusht
from tests.test_lerobot import write_checkpoint
from tests.test_remote import REPO, free_port

SUITE_PYTHON = os.environ.get("POLICYBENCH_SUITE_PYTHON", sys.executable)


def serve(checkpoint: Path, port: int) -> subprocess.Popen[str]:
    """`policybench serve --policy=lerobot:CKPT --eval pusht` with this (LeRobot's) python."""
    command = [sys.executable, "-m", "policybench.cli", "serve", f"--policy=lerobot:{checkpoint}"]
    command += ["--eval", "pusht", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    line = server.stdout.readline()
    assert "serving" in line, f"server did not start: {line!r}"
    return server


def run_suite(report_dir: Path, url: str) -> list[dict]:
    """PushT (the short episodes run_pusht runs) over the wire, with the suite's python."""
    command = [SUITE_PYTHON, "-m", "pytest", SHORT, "-p", "no:cacheprovider"]
    command += ["-q", "--rollouts", "2", "--report-dir", str(report_dir), "-n", "2"]
    command += ["--policy=openpi", "--policy-url", url]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (report_dir / "latest" / "results.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda record: record[keys.NODEID])


@pytest.mark.slow
def test_a_checkpoint_served_from_lerobots_env_gives_the_in_process_outcomes(tmp_path):
    checkpoint = write_checkpoint(tmp_path / "act-pusht")
    in_process = run_pusht(tmp_path / "n0", f"--policy=lerobot:{checkpoint}", "-n", "0")
    port = free_port()
    server = serve(checkpoint, port)
    try:
        served = run_suite(tmp_path / "served", f"ws://127.0.0.1:{port}")
    finally:
        server.kill()
        server.wait()
    assert len(served) == 2
    assert outcomes(served) == outcomes(in_process)
    assert {r[keys.POLICY]["codec"] for r in served} == {"openpi"}
