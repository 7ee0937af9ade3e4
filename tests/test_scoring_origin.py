"""The scoring page's server takes verdicts from its own page only: a POST another site's page
could make the scorer's browser send (a foreign Origin, a body not declared JSON) is refused,
as is any request naming a Host other than the server's own (a name rebound to loopback), and
a page started for one scorer records no verdict in another scorer's name."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import gymnasium as gym
import pytest

import policybench
from policybench.run.records import rollout_id
from policybench.run.results import RESULTS, read_results
from policybench.run.verdicts import read_verdicts
from policybench.scoring.app import ScoringApp


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    env = gym.make("CartPole-v1", max_episode_steps=5)
    with policybench.wrap(env, "cartpole", "balance", run_dir=run_dir) as env:
        env.reset(seed=0)
        while not any(env.step(0)[2:4]):
            pass
    return run_dir


@pytest.fixture
def served(run_dir):
    with ScoringApp(run_dir, scorer="ana").server("127.0.0.1", 0) as server:
        yield server


def send(server, method: str, body: dict | None = None, **headers: str) -> tuple[int, dict | str]:
    port = server.httpd.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = None if body is None else json.dumps(body).encode()
    named = {name.replace("_", "-"): value for name, value in headers.items()}
    connection.request(method, "/verdict" if method == "POST" else "/", data, named)
    answer = connection.getresponse()
    text = answer.read().decode()
    connection.close()
    kind = answer.getheader("Content-Type", "")
    return answer.status, json.loads(text) if kind.startswith("application/json") else text


def verdict(run_dir: Path, scorer: str = "ana") -> dict:
    [record] = read_results(run_dir / RESULTS).records
    return {"rollout_id": rollout_id(record), "operator_verdict": "success", "scorer": scorer}


def test_a_cross_site_post_is_refused_and_records_nothing(run_dir, served):
    own = f"http://127.0.0.1:{served.httpd.server_address[1]}"
    before = len(read_verdicts(run_dir).given)
    status, answer = send(
        served, "POST", verdict(run_dir), Content_Type="text/plain", Origin="http://evil.example"
    )
    assert status == 403 and "http://evil.example" in answer["error"]
    # A form post (no Origin from an old browser) still is not JSON.
    status, answer = send(served, "POST", verdict(run_dir), Content_Type="text/plain")
    assert status == 415 and "application/json" in answer["error"]
    status, answer = send(served, "POST", verdict(run_dir), Content_Type="application/json")
    assert status == 200, answer
    # A foreign Origin is refused even with a JSON body (a CORS preflight would stop it, but
    # the server does not count on the browser).
    status, _ = send(
        served, "POST", verdict(run_dir), Content_Type="application/json", Origin="null"
    )
    assert status == 403
    status, answer = send(
        served, "POST", verdict(run_dir), Content_Type="application/json", Origin=own
    )
    assert status == 200, answer
    assert len(read_verdicts(run_dir).given) == before + 2


def test_a_request_for_another_host_is_refused_the_servers_own_names_are_not(served):
    port = served.httpd.server_address[1]
    status, answer = send(served, "GET", Host=f"evil.example:{port}")
    assert status == 403 and f"127.0.0.1:{port}" in answer["error"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        status, page = send(served, "GET", Host=host)
        assert status == 200 and "Score rollouts" in page


def test_a_verdict_in_another_scorers_name_is_refused_not_recorded_as_the_pages(run_dir, served):
    before = read_verdicts(run_dir).given
    status, answer = send(served, "POST", verdict(run_dir, "bob"), Content_Type="application/json")
    assert status == 409 and "'ana'" in answer["error"] and "'bob'" in answer["error"]
    assert read_verdicts(run_dir).given == before


@pytest.mark.parametrize("rollout", [["a"], {"a": 1}, 7, None], ids=["list", "map", "int", "null"])
def test_a_verdict_whose_rollout_id_is_not_a_string_is_a_400(run_dir, served, rollout):
    before = len(read_verdicts(run_dir).given)
    body = {**verdict(run_dir), "rollout_id": rollout}
    status, answer = send(served, "POST", body, Content_Type="application/json")
    assert status == 400 and "a verdict names its rollout by item id" in answer["error"]
    assert len(read_verdicts(run_dir).given) == before


def test_a_body_too_large_or_a_length_not_a_number_is_refused_unread(served):
    import socket

    port = served.httpd.server_address[1]
    for length in (str(10 << 30), "-5", "lots"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(
                f"POST /verdict HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: "
                f"application/json\r\nContent-Length: {length}\r\n\r\n".encode()
            )
            answer = client.recv(4096).decode()
        assert answer.startswith("HTTP/1.0 413"), answer


def test_idle_connections_hold_a_bounded_number_of_threads(served):
    """300 connections that never send a request: at most MAX_HANDLERS are given a thread (and
    its deadline's), the rest are answered 503 at once; once they close, a page is answered."""
    import contextlib
    import socket
    import threading
    import time

    from policybench.pages.server import MAX_HANDLERS

    port = served.httpd.server_address[1]
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
    time.sleep(1.0)
    threads = threading.active_count() - before
    refused = 0
    for connection in idle:
        connection.settimeout(0.05)
        with contextlib.suppress(TimeoutError):  # held: a handler waits for its request
            refused += connection.recv(64).startswith(b"HTTP/1.1 503")
    for connection in idle:
        connection.close()
    assert threads <= 2 * MAX_HANDLERS + 2, threads
    assert refused == 300 - MAX_HANDLERS
    deadline = time.monotonic() + 10
    while threading.active_count() > before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert send(served, "GET")[0] == 200
