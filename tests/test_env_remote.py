"""Isolated envs served over TCP: a real `policybench env serve` on loopback, and pytest runs
given --env-url: the records of the local isolated run, a wrong key refused (that Eval's items
only), nothing listening said in one line, a server killed mid-rollout (that rollout's error; the
next one connects again), a step hung there ended by the watchdog, and the refusals of a bind
beyond loopback without a key and of a URL that is not tcp://."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from policybench import cli
from policybench.envserver import Interpreter, Isolated, remote
from policybench.envserver.proxy import EnvServerError, EnvServerGone
from policybench.envserver.relay import READY
from policybench.lifetime import PARENT_PID_VARIABLE
from policybench.options import API_KEY_VARIABLE
from tests.test_envserver import MEASURED, _alive
from tests.test_isolated_numpy1 import BENCHMARK as NUMPY1_BENCHMARK
from tests.test_isolated_numpy1 import numpy1_cache  # noqa: F401 (a fixture)
from tests.test_remote import free_port

REPO = Path(__file__).resolve().parents[1]
ENVS = (REPO / "tests" / "envs.py").read_text()
KEY = "env-k3y-81c2d9"
START_TIMEOUT_S = 30.0

REMOTE_POINTS = """
import dataclasses, os, pathlib, sys, time
import policybench
from envs import GreedyPointModel, PointEnv, point_eval
from policybench.envserver import Interpreter, Isolated


class PausingPoint(PointEnv):
    '''With PAUSE_AT_STEP set, step 2 of seed 0 notes its server's pid in `stepping` and sleeps.'''

    def __init__(self, task):
        super().__init__()

    def reset(self, *, seed=None, options=None):
        self.seed, self.steps = seed, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if os.environ.get("PAUSE_AT_STEP") and self.seed == 0 and self.steps == 2:
            pathlib.Path("stepping").write_text(str(os.getpid()))
            time.sleep(60)
        self.steps += 1
        return super().step(action)


HERE = Interpreter("here", python=sys.executable)
REMOTE = dataclasses.replace(
    point_eval("remote", scripted=GreedyPointModel),
    make_env=Isolated("test_remote_points:PausingPoint", HERE),
)
LOCAL = point_eval("local", tasks={"near": "reach the goal"}, scripted=GreedyPointModel)


@policybench.parametrize(REMOTE, LOCAL)
def test_point(rollout, harness):
    while pathlib.Path("restarting").exists():  # the test is starting the server again
        time.sleep(0.05)
    harness(rollout)
"""


def clean_env(path: Path, **changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.pop(API_KEY_VARIABLE, None)
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(REPO)])
    return {**env, **changes}


def start_env_server(path: Path, env: dict[str, str], *args: str) -> tuple[subprocess.Popen, int]:
    """`policybench env serve *args` in `path`, once it listens, and its port."""
    command = [sys.executable, "-m", "policybench.cli", "env", "serve", *args]
    log = (path / "serve.log").open("a")
    server = subprocess.Popen(
        command, cwd=path, env=env, stdout=subprocess.PIPE, stderr=log, text=True
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if line.startswith(READY):
            return server, int(line.rsplit(":", 1)[1])
        if not line:
            break
    server.kill()
    pytest.fail(f"policybench env serve did not start: {(path / 'serve.log').read_text()}")


def stop(server: subprocess.Popen) -> None:
    server.kill()
    server.wait()


def run(path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    return subprocess.run(command, cwd=path, env=env, capture_output=True, text=True, timeout=300)


def records(path: Path, report_dir: str = "reports") -> dict[str, dict]:
    lines = (path / report_dir / "latest" / "results.jsonl").read_text().splitlines()
    return {r["nodeid"].split("[")[1].rstrip("]"): r for r in map(json.loads, lines)}


@pytest.fixture
def points(tmp_path: Path) -> Path:
    (tmp_path / "envs.py").write_text(ENVS)
    (tmp_path / "test_remote_points.py").write_text(REMOTE_POINTS)
    return tmp_path


def test_a_run_with_env_url_records_what_the_local_isolated_run_records(
    tmp_path,
    numpy1_cache,  # noqa: F811
):
    (tmp_path / "test_numpy1.py").write_text(NUMPY1_BENCHMARK)
    served_env = clean_env(tmp_path, XDG_CACHE_HOME=str(numpy1_cache), **{API_KEY_VARIABLE: KEY})
    server, port = start_env_server(
        tmp_path, served_env, "tests.isolated_envs.evals:NUMPY1", "--port", "0"
    )
    try:
        args = ["--policy=random", "--rollouts", "2"]
        here = clean_env(tmp_path, XDG_CACHE_HOME=str(numpy1_cache))
        local = run(tmp_path, here, *args, "--report-dir", "local")
        assert local.returncode == 0, local.stdout[-3000:]
        # The run's machine has no numpy1 interpreter: its envs are the server's.
        elsewhere = clean_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "empty"))
        url = f"tcp://127.0.0.1:{port}"
        served = run(
            tmp_path,
            elsewhere,
            *args,
            "--report-dir",
            "served",
            "--env-url",
            url,
            "--env-api-key",
            KEY,
        )
        assert served.returncode == 0, served.stdout[-3000:]
    finally:
        stop(server)
    here, there = records(tmp_path, "local"), records(tmp_path, "served")
    assert [(r["outcome"], r["steps"]) for r in there.values()] == [("solved", 3)] * 2
    assert here.keys() == there.keys()
    for rollout, local_record in here.items():
        served_record = there[rollout]
        keys = local_record.keys() | served_record.keys()
        differing = {k for k in keys if local_record.get(k) != served_record.get(k)}
        assert differing <= MEASURED, (differing, local_record, served_record)
    written = [file for file in tmp_path.rglob("*") if file.is_file()]
    assert [str(file) for file in written if KEY.encode() in file.read_bytes()] == []
    assert KEY not in served.stdout + served.stderr


def test_a_wrong_key_is_refused_and_errors_that_evals_items_only(points):
    server, port = start_env_server(
        points,
        clean_env(points, **{API_KEY_VARIABLE: KEY}),
        "test_remote_points:REMOTE",
        "--port",
        "0",
    )
    try:
        env = clean_env(points, **{API_KEY_VARIABLE: "not-the-key"})
        done = run(points, env, "--rollouts", "2", "--env-url", f"tcp://127.0.0.1:{port}")
    finally:
        stop(server)
    recorded = records(points)
    assert recorded["near/seed=0"]["outcome"] == recorded["near/seed=1"]["outcome"] == "solved"
    for seed in (0, 1):
        record = recorded[f"reach/seed={seed}"]
        assert record["outcome"] == "error"
        assert "refused the connection: missing or wrong API key" in record["reason"]
    assert "not-the-key" not in done.stdout + done.stderr


def test_nothing_listening_is_one_line_naming_the_url_and_what_to_start():
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    make_env = Isolated("nowhere:Env", Interpreter("not-here", python="/no/such/python"))
    with remote.used(remote.EnvEndpoint(url)), pytest.raises(EnvServerError) as raised:
        make_env("task")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"no env server at {url} (Connection refused)")
    assert f"start one there with `policybench env serve EVAL --port {port}`" in message


def test_a_killed_server_is_its_rollouts_error_and_the_next_rollout_connects_again(points):
    env = clean_env(points, PAUSE_AT_STEP="1")
    server, port = start_env_server(points, env, "test_remote_points:REMOTE", "--port", "0")
    url = f"tcp://127.0.0.1:{port}"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-k", "reach"]
    pytest_run = subprocess.Popen(
        [*command, "--rollouts", "2", "--env-url", url],
        cwd=points,
        env=clean_env(points),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        stepping = points / "stepping"
        deadline = time.monotonic() + 60
        while not stepping.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stepping.exists(), "the served env never reached its pause"
        env_server = int(stepping.read_text())
        (points / "restarting").write_text("")  # the next rollout waits for the new server
        server.send_signal(signal.SIGKILL)
        server.wait()
        deadline = time.monotonic() + 5
        while _alive(env_server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(env_server)  # it died with the server that started it
        server, _ = start_env_server(
            points, clean_env(points), "test_remote_points:REMOTE", "--port", str(port)
        )
        (points / "restarting").unlink()
        assert pytest_run.wait(120) == 1  # an error
    finally:
        pytest_run.kill()
        stop(server)
    recorded = records(points)
    killed = recorded["reach/seed=0"]
    assert killed["outcome"] == "error" and killed["steps"] == 2
    assert f"env server at {url} closed the connection at step" in killed["reason"]
    assert recorded["reach/seed=1"]["outcome"] == "solved"


def test_a_step_hung_on_the_server_is_ended_by_the_watchdog_and_its_env_server_killed(points):
    server, port = start_env_server(
        points, clean_env(points, PAUSE_AT_STEP="1"), "test_remote_points:REMOTE", "--port", "0"
    )
    try:
        url = f"tcp://127.0.0.1:{port}"
        # 6 s: long enough for the served env to reach its paused step on a loaded machine
        args = ["-k", "reach", "--rollouts", "1", "--rollout-wall-timeout", "6"]
        done = run(points, clean_env(points), *args, "--env-url", url)
        assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout[-3000:]
        record = records(points)["reach/seed=0"]
        assert record["outcome"] == "error" and "no end within 6 s" in record["reason"]
        env_server = int((points / "stepping").read_text())
        deadline = time.monotonic() + 5
        while _alive(env_server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(env_server)  # killed as the run hung up, not left to sleep 60 s
        assert server.poll() is None  # the server itself serves on
    finally:
        stop(server)


def test_serving_beyond_loopback_needs_a_key(points, monkeypatch, capsys):
    monkeypatch.delenv(API_KEY_VARIABLE, raising=False)
    monkeypatch.delenv(PARENT_PID_VARIABLE, raising=False)  # not to die with this one's starter
    monkeypatch.chdir(points)
    monkeypatch.syspath_prepend(str(points))
    serve = ["env", "serve", "test_remote_points:REMOTE", "--host", "0.0.0.0", "--port", "0"]
    assert cli.main(serve) == 1
    assert "refusing to serve 0.0.0.0 without a key" in capsys.readouterr().err


def test_an_env_url_that_is_not_tcp_is_a_usage_error(pytester):
    result = pytester.runpytest("--env-url", "ws://gpu-box:7000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--env-url takes tcp://HOST:PORT (or tls://HOST:PORT *), e.g. tcp://gpu-box:7000*"]
    )


def test_a_port_in_use_is_one_line_naming_it(points, monkeypatch, capsys):
    monkeypatch.delenv(PARENT_PID_VARIABLE, raising=False)  # not to die with this one's starter
    monkeypatch.chdir(points)
    monkeypatch.syspath_prepend(str(points))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        serve = ["env", "serve", "test_remote_points:REMOTE", "--port", str(port)]
        assert cli.main(serve) == 1
    err = capsys.readouterr().err
    said = f"policybench env serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert said in err
    assert "Traceback" not in err


def test_the_runs_own_policy_server_reads_the_action_space_at_env_url_too(points):
    """Under -n with --policy-sharing=shared the run's `policybench serve` builds an env to read
    its action space (for `random`): at --env-url, as the workers do, not in an interpreter the
    run's machine lacks."""
    served_env = clean_env(points, **{API_KEY_VARIABLE: KEY})
    server, port = start_env_server(points, served_env, "test_remote_points:REMOTE", "--port", "0")
    try:
        nowhere = clean_env(points, POLICYBENCH_PYTHON_HERE=str(points / "no-python-here"))
        args = ["-n", "1", "--policy=random", "--policy-sharing=shared", "-k", "remote"]
        url = ["--env-url", f"tcp://127.0.0.1:{port}", "--env-api-key", KEY]
        result = run(points, nowhere, *args, "--rollouts", "1", *url)
    finally:
        stop(server)
    found = records(points)
    assert found and result.returncode == 0, result.stdout[-3000:]
    assert {r["outcome"] for r in found.values()} <= {"solved", "unsolved"}, found
    written = [file for file in points.rglob("*") if file.is_file()]
    assert [str(file) for file in written if KEY.encode() in file.read_bytes()] == []


def test_what_listens_but_is_no_env_server_is_said_within_the_connect_timeout(monkeypatch):
    """A policy server's port given as --env-url, or anything that takes the connection and
    never answers the hello: one line saying so, not a wait as long as the run's."""
    monkeypatch.setattr(remote, "CONNECT_TIMEOUT_S", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody answers
        url = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(EnvServerError) as failed:
            remote.RemoteEnvServer(remote.EnvEndpoint(url))
    assert time.monotonic() - started < 5.0
    assert str(failed.value) == (
        f"what listens at {url} gave no answer to an env server's hello within 0.5 s: is it a "
        "`policybench env serve` (not a policy server, whose ws:// URL goes to --policy-url)?"
    )


def test_the_relays_own_errors_say_their_type_once_and_where_they_were_served(points):
    """An env server killed on the serving machine, and an env that server does not serve: the
    relay's message, then where (not `EnvServerGone: EnvServerGone in the env server ...`)."""
    served_env = clean_env(points, **{API_KEY_VARIABLE: KEY})
    server, port = start_env_server(points, served_env, "test_remote_points:REMOTE", "--port", "0")
    url = f"tcp://127.0.0.1:{port}"
    here = Interpreter("here", python=sys.executable)
    try:
        with remote.used(remote.EnvEndpoint(url, KEY)):
            env = Isolated("test_remote_points:PausingPoint", here)("reach")
            env.reset(seed=0)
            made = (points / "serve.log").read_text().splitlines()[-1]
            env_server = int(made.rsplit(" ", 1)[1])  # "...'s env in env server PID"
            os.kill(env_server, signal.SIGKILL)
            with pytest.raises(EnvServerGone) as gone:
                env.reset(seed=1)
            said = str(gone.value)
            assert said.startswith(f"env server in {sys.executable} (pid {env_server}) ended at ")
            assert "killed by signal 9" in said and said.endswith(f"(served at {url}, at reset)")
            with pytest.raises(EnvServerError) as refused:
                Isolated("test_remote_points:Other", here)("reach")
            said = str(refused.value)
            assert said.startswith("this server serves no env 'test_remote_points:Other'")
            assert said.endswith(f"(served at {url}, at make)") and "EnvServerError" not in said
    finally:
        stop(server)


def test_an_entry_the_serving_interpreter_cannot_import_says_where_it_is_looked_for(points):
    """`policybench env serve` finds the Eval beside it, its env server (another process, on
    $PYTHONPATH alone) not the entry's module: the error says so, and where to put it."""
    served_env = clean_env(points, **{API_KEY_VARIABLE: KEY})
    served_env["PYTHONPATH"] = str(REPO)  # the Eval's module is found beside the server alone
    server, port = start_env_server(points, served_env, "test_remote_points:REMOTE", "--port", "0")
    endpoint = remote.EnvEndpoint(f"tcp://127.0.0.1:{port}", KEY)
    try:
        here = Interpreter("here", python=sys.executable)
        with remote.used(endpoint), pytest.raises(EnvServerError) as failed:
            Isolated("test_remote_points:PausingPoint", here)("reach")
    finally:
        stop(server)
    said = str(failed.value)
    assert "No module named 'test_remote_points'" in said
    assert said.endswith(
        "imports test_remote_points from its own site-packages and `policybench env serve`'s "
        "$PYTHONPATH alone, not from the directory `policybench env serve` runs in: install it "
        "there, put its folder on `policybench env serve`'s $PYTHONPATH, or name it in "
        "Isolated(modules=...)"
    )


def test_evals_whose_interpreter_is_missing_are_named_in_one_line_per_reason(points):
    (points / "two_points.py").write_text(
        "import dataclasses\n"
        "from test_remote_points import REMOTE\n"
        "OTHER = dataclasses.replace(REMOTE, name='remote-too')\n"
    )
    nowhere = str(points / "no-python-here")
    served_env = clean_env(points, POLICYBENCH_PYTHON_HERE=nowhere, **{API_KEY_VARIABLE: KEY})
    evals = ["test_remote_points:REMOTE", "two_points:OTHER"]
    server, _ = start_env_server(points, served_env, *evals, "--port", "0")
    stop(server)
    said = [line for line in (points / "serve.log").read_text().splitlines() if nowhere in line]
    assert said == [
        f"policybench env serve: remote, remote-too: interpreter 'here': "
        f"$POLICYBENCH_PYTHON_HERE names {nowhere}, which is not a file; give the path of a "
        "Python executable"
    ]


def test_an_env_url_for_a_run_without_isolated_evals_says_it_builds_nothing_there(pytester):
    pytester.makepyfile(
        envs=ENVS,
        test_here=(
            "import policybench\n"
            "from envs import point_eval\n"
            "@policybench.parametrize(point_eval('here'))\n"
            "def test_point(rollout, harness):\n"
            "    harness(rollout)\n"
        ),
    )
    url = "tcp://127.0.0.1:9"  # nothing listens: nothing asks there either
    result = pytester.runpytest_subprocess("--env-url", url, "--policy=random", "--rollouts", "1")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(
        [
            f"*PytestWarning: --env-url {url} builds no env of this run: none of its Evals "
            "(here) runs its env in an interpreter of its own, so each runs here*"
        ]
    )


def test_env_serve_over_tls_serves_a_run_at_a_tls_url_and_refuses_plain_tcp(points):
    """--tls-cert/--tls-key on `env serve`: the key and every observation cross the network
    encrypted. A certificate made here (trustme, a CA of the test's own) for 127.0.0.1; a run
    trusting that CA through $SSL_CERT_FILE runs at tls://, one that does not is told so, and a
    plain tcp:// client gets no answer to its hello."""
    import trustme

    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    cert, key, ca = (points / name for name in ("cert.pem", "key.pem", "ca.pem"))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)  # a private key others may read is refused
    authority.cert_pem.write_to_path(str(ca))
    env = clean_env(points, **{API_KEY_VARIABLE: KEY})
    server, port = start_env_server(
        points, env, "test_remote_points:REMOTE", "--port", "0",
        "--tls-cert", str(cert), "--tls-key", str(key),
    )  # fmt: skip
    try:
        args = ["-k", "remote", "--rollouts", "2", "--env-api-key", KEY]
        trusting = clean_env(points, SSL_CERT_FILE=str(ca))
        served = run(points, trusting, *args, "--env-url", f"tls://127.0.0.1:{port}")
        assert served.returncode == 0, served.stdout[-3000:]
        assert [r["outcome"] for r in records(points).values()] == ["solved"] * 4
        untrusting = run(points, clean_env(points), *args, "--env-url", f"tls://127.0.0.1:{port}")
        assert "no TLS connection to the env server at tls://127.0.0.1:" in untrusting.stdout
        assert "CERTIFICATE_VERIFY_FAILED" in untrusting.stdout
        plain = run(points, trusting, *args, "--env-url", f"tcp://127.0.0.1:{port}")
        assert plain.returncode != 0 and "gave no answer to an env server's hello" in plain.stdout
        assert 4.0 < held_before_hello(port, ca) < 5.8  # the handshake counts in the hello's 5 s
    finally:
        stop(server)
    assert "no TLS handshake" in (points / "serve.log").read_text()


def held_before_hello(port: int, ca: Path) -> float:
    """How long a TLS client that waits 3 s before its handshake, then never says hello, keeps
    its connection (a pre-hello place): once the handshake plus 5 s (about 8 s)."""
    import ssl

    context = ssl.create_default_context(cafile=str(ca))
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    time.sleep(3.0)
    with (
        context.wrap_socket(raw, server_hostname="127.0.0.1") as connection,
        contextlib.suppress(OSError),
    ):
        connection.recv(1)  # returns (or fails) once the server cuts the connection
    return time.monotonic() - started
