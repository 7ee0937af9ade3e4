"""Rollouts side by side with a served model (`--envs-per-worker 3 --policy=openpi`): each rollout
holds its own connection to a real `policybench serve` on loopback, so none drops another's, and
the records are those of one rollout at a time, with and without xdist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_remote import REPO, free_port, start_server

pytest.importorskip("metaworld", reason="needs the metaworld extra")

# reach-v3's expert solves its rollouts at different steps, so rollouts side by side end apart.
# Two groups of three: the first group's slots build their envs one after the other, the second's
# reuse them and surely overlap.
SELECTION = ["benchmarks/test_metaworld.py", "-k", "reach", "--rollouts", "6"]


@pytest.fixture(scope="module")
def server_url():
    port = free_port()
    server = start_server(port, "--eval", "metaworld-mt10")
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def served_run(report_dir: Path, url: str, *args: str) -> list[dict]:
    command = [sys.executable, "-m", "pytest", *SELECTION, "-p", "no:cacheprovider", "-q"]
    command += ["--policy=openpi", "--policy-url", url, "--report-dir", str(report_dir), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = (report_dir / "latest" / "results.jsonl").read_text()
    assert "RemoteDown" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["nodeid"] for r in records if "retried" in r] == []
    return records


def per_rollout(records: list[dict]) -> dict[str, tuple]:
    return {r["nodeid"]: (r["outcome"], r["steps"], r["sum_reward"]) for r in records}


@pytest.fixture(scope="module")
def alone(server_url, tmp_path_factory) -> dict[str, tuple]:
    """The records of one rollout at a time (K = 1)."""
    records = per_rollout(served_run(tmp_path_factory.mktemp("alone"), server_url, "-n", "0"))
    assert len(records) == 6 and len({steps for _, steps, _ in records.values()}) > 1
    return records


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_served_rollouts_side_by_side_keep_their_own_connections(
    tmp_path, server_url, alone, workers
):
    side_by_side = served_run(tmp_path, server_url, "-n", workers, "--envs-per-worker", "3")
    assert per_rollout(side_by_side) == alone
