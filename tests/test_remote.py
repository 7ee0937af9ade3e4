"""RemoteModel against `policybench serve` processes on loopback: unreachable servers, model
errors, hung and killed servers, each failing only its rollout, and reconnecting afterwards."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from policybench.harness import run_rollout
from policybench.policy.base import SessionContext
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.codec import NATIVE, Codec, CodecStep, prompt
from policybench.record.episode import OutcomeKind
from policybench.serve.client import Endpoint, RemoteModel, RemoteUnavailable
from policybench.serve.server import PolicyServer, ServerConfig, ServerThread, fixed_model
from policybench.world import World
from tests.served import POINT, RecordingModel

REPO = Path(__file__).resolve().parents[1]
POINT_CONTEXT = SessionContext("reach the goal", POINT.control_hz)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, *args: str) -> subprocess.Popen[str]:
    """`policybench serve --policy=scripted` (by default of the point Eval), as a user would."""
    command = [sys.executable, "-m", "policybench.cli", "serve", "--policy=scripted"]
    command += [*(args or ("--eval", "tests.served:POINT")), "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    line = process.stdout.readline()
    assert "serving" in line, f"server did not start: {line!r}"
    return process


@pytest.fixture
def port():
    return free_port()


def remote_policy(url: str, infer_timeout_s: float = 30.0, codec: Codec = NATIVE) -> ChunkPolicy:
    endpoint = Endpoint(url, infer_timeout_s=infer_timeout_s)
    return ChunkPolicy(RemoteModel(endpoint, codec.name, POINT.name), codec)


class Refuse(CodecStep):
    """Adds `fail` to each observation, which the recording model refuses."""

    def encode(self, data):
        return {**data, "fail": np.array("no chunk for you")}

    def describe(self) -> str:
        return "refuse"


def test_an_unreachable_url_fails_fast_naming_the_url_and_how_to_start_a_server(port):
    url = f"ws://127.0.0.1:{port}"
    endpoint = Endpoint(url, connect_timeout_s=30.0)
    started = time.perf_counter()
    with pytest.raises(RemoteUnavailable) as error:
        RemoteModel(endpoint).open(POINT_CONTEXT)
    # Failing fast is a time: the refusal, not the 30 s connect timeout, must end the wait.
    assert time.perf_counter() - started < 10
    assert "ConnectionRefusedError" in str(error.value)
    assert url in str(error.value) and "policybench serve" in str(error.value)


def test_an_unreachable_server_is_an_error_outcome_not_a_hang(port):
    world = World(POINT)
    (rollout,) = POINT.rollouts(1, 0)
    episode = run_rollout(rollout, world, remote_policy(f"ws://127.0.0.1:{port}"))
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert f"ws://127.0.0.1:{port}" in episode.outcome.reason


def test_a_model_error_fails_its_rollout_with_the_servers_message_and_the_next_is_fine():
    model = RecordingModel()
    config = ServerConfig(port=0)
    with ServerThread(PolicyServer(fixed_model(model, POINT.control_hz), config)) as server:
        world = World(POINT)
        first, second = POINT.rollouts(2, 0)

        # The recording model raises when an observation carries `fail`.
        refusing = Codec(NATIVE.name, (Refuse(), prompt()))
        broken = run_rollout(first, world, remote_policy(server.url, codec=refusing))
        assert broken.outcome.kind is OutcomeKind.ERROR
        assert "ValueError: model refused: no chunk for you" in broken.outcome.reason
        fine = run_rollout(second, world, remote_policy(server.url))
        assert fine.outcome.kind is not OutcomeKind.ERROR


def _run_with(action, url: str, infer_timeout_s: float):
    """Runs a point rollout against `url`, calling `action()` at its third control step."""
    steps = []

    def observer(time_ns, obs):
        steps.append(time_ns)
        if len(steps) == 3:
            action()

    (rollout,) = POINT.rollouts(1, 0)
    return run_rollout(rollout, World(POINT), remote_policy(url, infer_timeout_s), observer)


def test_a_hung_server_fails_its_rollout_at_the_timeout_and_the_next_rollout_reconnects(port):
    url = f"ws://127.0.0.1:{port}"
    server = start_server(port)
    try:
        episode = _run_with(lambda: server.send_signal(signal.SIGSTOP), url, 1.0)
        assert episode.outcome.kind is OutcomeKind.ERROR
        assert "did not answer within 1 s" in episode.outcome.reason
        # The first call after the hang is the one that failed: two steps, two answered calls.
        assert episode.steps == len(episode.calls) == 2
        # The 1 s receive timeout is the behaviour: it waited that long, and not much longer.
        assert 1.0 <= episode.wall_s < 10.0
        server.send_signal(signal.SIGCONT)
        episode = _run_with(lambda: None, url, 5.0)
        assert episode.outcome.kind is OutcomeKind.SOLVED
    finally:
        server.kill()
        server.wait()


def test_a_killed_server_fails_its_rollout_and_later_rollouts_reconnect_after_a_restart(port):
    url = f"ws://127.0.0.1:{port}"
    server = start_server(port)
    try:
        episode = _run_with(server.kill, url, 30.0)
        assert episode.outcome.kind is OutcomeKind.ERROR
        # Failed by the dropped connection, not the 30 s timeout, at the first call after it.
        assert re.search(r"dropped the connection|cannot reach", episode.outcome.reason)
        assert episode.steps == len(episode.calls) == 2
        server.wait()
        server = start_server(port)
        episode = _run_with(lambda: None, url, 5.0)
        assert episode.outcome.kind is OutcomeKind.SOLVED
    finally:
        server.kill()
        server.wait()
