"""A policy server that goes away mid-run loses no rollout: rollouts that meet the outage wait
for it (--server-wait) and the one it cut short runs again from its start (--retry-errors);
a real `policybench serve` is killed and restarted under a running pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from websockets.sync.server import serve

from policybench.policy.base import SessionContext
from policybench.serve import client
from policybench.serve.wire import packb
from tests.test_remote import REPO, free_port, start_server

BENCHMARK = """
import dataclasses, os, signal
from pathlib import Path
import policybench
from envs import PointEnv
from tests.served import POINT


class KillingTheServer(PointEnv):
    # The first rollout (after the preflight's reset) kills the policy server at its third step.
    def step(self, action):
        marker = Path("server-killed")
        if self.resets == 2 and self._steps == 2 and not marker.exists():
            marker.write_text("")
            os.kill(int(os.environ["POLICY_SERVER_PID"]), signal.SIGKILL)
        return super().step(action)


KILLING = dataclasses.replace(POINT, make_env=lambda task: KillingTheServer())


@policybench.parametrize(KILLING)
def test_point(rollout, harness):
    harness(rollout)
"""


@pytest.fixture
def server_killed_and_restarted(monkeypatch):
    """A served policy that a rollout kills, brought back 2 s after it dies."""
    port = free_port()
    servers = [start_server(port)]
    monkeypatch.setenv("POLICY_SERVER_PID", str(servers[0].pid))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    died_at: list[float] = []
    ended = threading.Event()

    def restart() -> None:
        servers[0].wait()
        died_at.append(time.monotonic())
        if not ended.wait(2.0):  # a test over by then gets no server that outlives it
            servers.append(start_server(port))

    restarting = threading.Thread(target=restart, daemon=True)
    restarting.start()
    yield port, died_at, servers
    ended.set()
    servers[0].kill()
    restarting.join()
    for server in servers:
        server.kill()
        server.wait()


def test_a_server_killed_and_restarted_mid_run_loses_no_rollout(
    pytester: pytest.Pytester, server_killed_and_restarted
):
    port, died_at, servers = server_killed_and_restarted
    from tests.test_plugin import ENVS

    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    url = f"ws://127.0.0.1:{port}"
    result = pytester.runpytest_subprocess(
        "--rollouts", "4", "--policy=openpi", f"--policy-url={url}", "--server-wait=30"
    )
    assert died_at and len(servers) == 2, "the server was not killed and restarted"
    assert result.ret == 0, result.stdout.str()[-3000:]
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["solved"] * 4
    retried = [r for r in records if "retried" in r]
    assert len(retried) == 1 and "dropped the connection" in retried[0]["retried"][0]


def test_without_waiting_or_retrying_the_outage_is_an_error(
    pytester: pytest.Pytester, server_killed_and_restarted
):
    port, _, _ = server_killed_and_restarted
    from tests.test_plugin import ENVS

    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    url = f"ws://127.0.0.1:{port}"
    result = pytester.runpytest_subprocess(
        "--rollouts",
        "4",
        "--policy=openpi",
        f"--policy-url={url}",
        "--retry-errors=0",
        "--server-wait=0",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0]["outcome"] == "error" and "retried" not in records[0]
    assert "dropped the connection" in records[0]["reason"]
    assert "cannot reach a policy server" in records[1]["reason"]  # the server is still down


def test_the_outage_tests_leave_no_server_behind(tmp_path):
    """A test over before its server's restart (the outage test without waiting) once left the
    restarted server running, reparented to init: every server the tests start ends with them."""
    mark = f"policybench-test-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "POLICYBENCH_TEST_MARK": mark}
    env.pop("PYTEST_XDIST_WORKER", None)
    test = f"{__file__}::test_without_waiting_or_retrying_the_outage_is_an_error"
    command = [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    time.sleep(3.0)  # past the restart's 2 s
    assert marked_processes(mark) == []


def marked_processes(mark: str) -> list[str]:
    """The command lines of the processes whose environment holds `mark`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if mark.encode() in (proc / "environ").read_bytes():
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


class FakeClock:
    """The client's clock, advanced only by its own sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_a_waiting_rollout_reaches_a_returned_server_within_half_a_second(monkeypatch):
    """The backoff between tries stops growing at 0.5 s: a server back 3.2 s after it went down
    is reached by 3.7 s (a 2 s cap would try at 3.1 s, then only at 5.1 s)."""
    clock = FakeClock()
    monkeypatch.setattr(client, "time", clock)
    back_at = 3.2

    def connect_once():
        if clock.now < back_at:
            raise client._Unreachable("connection refused")
        return "connected"

    endpoint = client.Endpoint("ws://127.0.0.1:9", server_wait_s=120.0)
    assert client.Outages().wait_for(endpoint, connect_once) == "connected"
    assert back_at <= clock.now <= back_at + 0.5


def test_a_server_turning_connections_away_while_it_closes_is_waited_for_not_refused():
    """A closing websockets server answers new connections with HTTP 503 until it is gone (a
    run's own server exiting to be restarted does): the client waits that out as an outage, as it
    does a refused port, instead of failing the rollout at once. A real server on loopback."""
    turned_away: list[int] = []

    def closing_at_first(connection, request):
        if len(turned_away) < 2:
            turned_away.append(1)
            return connection.respond(503, "Server is shutting down.\n")
        return None

    def handler(connection):
        connection.send(packb({"served": "again"}))
        connection.recv()

    port = free_port()
    with serve(handler, "127.0.0.1", port, process_request=closing_at_first) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        endpoint = client.Endpoint(f"ws://127.0.0.1:{port}", server_wait_s=10.0)
        model = client.RemoteModel(endpoint)
        source = model.open(SessionContext("reach a", 10.0))
        source.close()
        server.shutdown()
    assert len(turned_away) == 2 and model.metadata == {"served": "again"}

    # Without a wait, the 503 is the outage's one-line error, not a refusal naming a key.
    with serve(
        lambda connection: None,
        "127.0.0.1",
        port,
        process_request=lambda c, r: c.respond(503, "closing\n"),
    ) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with pytest.raises(client.RemoteDown, match="cannot reach a policy server"):
            client.RemoteModel(client.Endpoint(f"ws://127.0.0.1:{port}")).open(
                SessionContext("reach a", 10.0)
            )
        server.shutdown()
