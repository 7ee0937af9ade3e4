"""A request to an env server interrupted while it waits (as the rollout watchdog's alarm does):
the env refuses every later request, saying why, and closing it neither waits for the busy
server nor leaves it running, whether the server is local or behind `policybench env serve`."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from policybench.envserver import Interpreter, Isolated, remote
from policybench.envserver.proxy import EnvServerError
from policybench.options import API_KEY_VARIABLE
from tests.test_env_remote import (
    KEY,
    clean_env,
    points,  # noqa: F401 (a fixture)
    start_env_server,
    stop,
)
from tests.test_envserver import _alive

HERE = Interpreter("here", python=sys.executable)
ALARM_S = 0.5


class Alarm(Exception):
    """What the alarm raises in the waiting thread."""


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def ring(signum, frame):
        raise Alarm

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(params=["local", "served"])
def served_at(request, points, monkeypatch) -> Iterator[str | None]:  # noqa: F811
    """Where the pausing env is built: a local env server (None), or `policybench env serve`'s
    URL."""
    monkeypatch.chdir(points)  # where the paused step notes its server's pid
    if request.param == "local":
        monkeypatch.setenv("PAUSE_AT_STEP", "1")
        monkeypatch.setenv("PYTHONPATH", str(points))
        yield None
        return
    env = clean_env(points, PAUSE_AT_STEP="1", **{API_KEY_VARIABLE: KEY})
    server, port = start_env_server(points, env, "test_remote_points:REMOTE", "--port", "0")
    url = f"tcp://127.0.0.1:{port}"
    try:
        with remote.used(remote.EnvEndpoint(url, KEY)):
            yield url
    finally:
        stop(server)


def test_an_interrupted_request_refuses_the_next_and_close_ends_the_busy_server(served_at):
    env = Isolated("test_remote_points:PausingPoint", HERE)("reach")
    try:
        env.reset(seed=0)
        env.step([0.0, 0.0])
        env.step([0.0, 0.0])
        with pytest.raises(Alarm), alarm(ALARM_S):
            env.step([0.0, 0.0])  # the server sleeps 60 s in this step
        with pytest.raises(EnvServerError) as refused:
            env.reset(seed=1)
    finally:
        started = time.monotonic()
        env.close()
        closed_s = time.monotonic() - started
    who = f"env server at {served_at}" if served_at else f"env server in {sys.executable} (pid "
    said = str(refused.value)
    assert said.startswith(who), said
    assert said.endswith(
        "was interrupted in a request (its answer would come before reset's): discard the env "
        "and build another"
    )
    assert closed_s < 5.0  # not the 60 s the busy server would take to answer
    env_server = int(Path("stepping").read_text())
    deadline = time.monotonic() + 5
    while _alive(env_server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(env_server)
