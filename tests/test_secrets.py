"""A policy server's API key reaches the server and nothing else: not run.json, the HTML, any
other file of the run directory, the junitxml or the terminal. It is taken from
--policy-api-key (either spelling) or $POLICYBENCH_API_KEY, and sent as openpi's client sends it
(`Authorization: Api-Key KEY`), which `policybench serve --api-key` checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from policybench.options import API_KEY_VARIABLE
from policybench.run.command_line import redacted_command
from policybench.serve.client import HIDDEN
from tests.test_remote import REPO, free_port, start_server

KEY = "s3cr3t-key-4f9a2c"
BENCHMARK = """
import policybench
from tests.served import POINT


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""


def serving(*args: str):
    port = free_port()
    server = start_server(port, "--eval", "tests.served:POINT", *args)
    yield port
    server.kill()
    server.wait()


@pytest.fixture(scope="module")
def server_url():
    yield from (f"ws://127.0.0.1:{port}" for port in serving("--api-key", KEY))


@pytest.fixture(scope="module")
def open_server_port():
    yield from serving()


def run(path: Path, *args: str, env_key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(API_KEY_VARIABLE, None)
    if env_key is not None:
        env[API_KEY_VARIABLE] = env_key
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA"]
    command += ["--rollouts", "2", "--junitxml", "junit.xml", *args]
    return subprocess.run(command, cwd=path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "given",
    [("--policy-api-key", KEY), (f"--policy-api-key={KEY}",), ()],
    ids=["--policy-api-key KEY", "--policy-api-key=KEY", "$POLICYBENCH_API_KEY"],
)
def test_the_api_key_reaches_the_server_and_no_file_of_the_run(tmp_path, server_url, given):
    (tmp_path / "test_point.py").write_text(BENCHMARK)
    served = ["--policy=openpi", "--policy-url", server_url]
    done = run(tmp_path, *served, *given, env_key=None if given else KEY)
    # The server refuses a missing or wrong key, so solved rollouts mean it was sent.
    run_dir = assert_solved_and_key_nowhere(tmp_path, done)
    if given:
        assert HIDDEN in json.loads((run_dir / "run.json").read_text())["command"]


def test_a_password_in_the_policy_url_reaches_no_file_of_the_run(tmp_path, open_server_port):
    (tmp_path / "test_point.py").write_text(BENCHMARK)
    url = f"ws://someone:{KEY}@127.0.0.1:{open_server_port}"
    done = run(tmp_path, "--policy=openpi", "--policy-url", url)
    run_dir = assert_solved_and_key_nowhere(tmp_path, done)
    records = [json.loads(line) for line in (run_dir / "results.jsonl").open()]
    assert {r["policy"]["url"] for r in records} == {f"ws://***@127.0.0.1:{open_server_port}"}


def assert_solved_and_key_nowhere(path: Path, done: subprocess.CompletedProcess[str]) -> Path:
    """The run's directory, once its rollouts are solved and KEY is in none of its files."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = (path / "reports" / "latest").resolve()
    records = [json.loads(line) for line in (run_dir / "results.jsonl").open()]
    assert [r["outcome"] for r in records] == ["solved", "solved"]
    written = [file for file in path.rglob("*") if file.is_file()]
    assert run_dir / "run.json" in written and run_dir / "index.html" in written
    assert path / "junit.xml" in written
    assert [str(file) for file in written if KEY.encode() in file.read_bytes()] == []
    assert KEY not in done.stdout + done.stderr
    return run_dir


def test_a_recorded_command_line_hides_keys_and_url_passwords():
    args = [
        "--policy-api-key",
        "k1",
        "--policy-api-key=k2",
        "--policy",
        "a=openpi@ws://me:pw@gpu1:8000",
        "--policy-url",
        "wss://token@gpu2/x",
        "-k",
        "reach",
    ]
    assert redacted_command(args) == [
        "--policy-api-key",
        HIDDEN,
        f"--policy-api-key={HIDDEN}",
        "--policy",
        f"a=openpi@ws://{HIDDEN}@gpu1:8000",
        "--policy-url",
        f"wss://{HIDDEN}@gpu2/x",
        "-k",
        "reach",
    ]
