"""`policybench env serve` under attack: a real server on loopback and hand-made clients that send
what an honest proxy never does — a second make of `os:system`, a make of an entry or task not
served, an op before make, a slow hello, a forged length, a malformed hello, more connections than
allowed — each refused with an error frame, nothing run (no file made), nothing held. The env
server refuses a second make and an entry it was not started for on its own, too."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

from policybench import keys
from policybench.envserver import server as protocol
from policybench.envserver.proxy import EnvServer, EnvServerError
from policybench.envserver.relay import HANDSHAKE_TIMEOUT_S
from tests.test_env_remote import KEY, clean_env, points, start_env_server, stop  # noqa: F401
from tests.test_envserver import PYTHON, entries  # noqa: F401

ENTRY = "test_remote_points:PausingPoint"  # what test_remote_points:REMOTE serves
CODEC = protocol.Codec()


class Client:
    """A raw TCP client speaking the env server's frames by hand."""

    def __init__(self, port: int) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.stream = self.socket.makefile("rb", buffering=0)

    def send(self, **message) -> None:
        self.socket.sendall(CODEC.pack(message))

    def answer(self) -> dict | None:
        return protocol.Codec().read(self.stream)

    def ask(self, **message) -> dict | None:
        self.send(**message)
        return self.answer()

    def hello(self, key: str | None = KEY) -> None:
        assert self.ask(op="hello", protocol=protocol.PROTOCOL, **{keys.ENV_API_KEY: key}) == {
            "ok": {"protocol": protocol.PROTOCOL}
        }

    def closed(self) -> bool:
        """Whether the server hung up (after anything it still had to say)."""
        self.socket.settimeout(10)
        try:
            while self.socket.recv(1 << 16):
                pass
        except OSError:
            pass
        return True

    def close(self) -> None:
        self.stream.close()
        self.socket.close()


@pytest.fixture
def served(points):  # noqa: F811
    server, port = start_env_server(
        points,
        clean_env(points, **{keys_variable(): KEY}),
        "test_remote_points:REMOTE",
        "--port",
        "0",
        "--max-connections",
        "3",
    )
    yield points, port
    stop(server)


def keys_variable() -> str:
    from policybench.options import API_KEY_VARIABLE

    return API_KEY_VARIABLE


def made(port: int) -> Client:
    client = Client(port)
    client.hello()
    answer = client.ask(op="make", entry=ENTRY, task="reach", kwargs={})
    assert "ok" in answer, answer
    return client


def test_a_second_make_of_os_system_runs_nothing_and_ends_the_connection(served):
    path, port = served
    target = path / "pwned"
    client = made(port)
    answer = client.ask(op="make", entry="os:system", task=f"touch {target}", kwargs={})
    assert answer["error"]["type"] == "EnvServerError"
    assert "asks spaces, reset, step, render, close; got 'make'" in answer["error"]["message"]
    assert client.closed()
    time.sleep(0.5)
    assert not target.exists()


def test_a_make_of_an_entry_or_task_not_served_is_refused(served):
    path, port = served
    target = path / "pwned"
    for make in (
        {"entry": "os:system", "task": f"touch {target}", "kwargs": {}},
        {"entry": ENTRY, "task": "not-a-task", "kwargs": {}},
        {"entry": ENTRY, "task": "reach", "kwargs": {"raise_at_step": 1}},
    ):
        client = Client(port)
        client.hello()
        answer = client.ask(op="make", **make)
        assert answer["error"]["type"] == "EnvServerError", answer
        assert client.closed()
    assert "remote has no task 'not-a-task'; its tasks: reach" in answer_of(port, "not-a-task")
    assert not target.exists()


def answer_of(port: int, task: str) -> str:
    client = Client(port)
    client.hello()
    return client.ask(op="make", entry=ENTRY, task=task, kwargs={})["error"]["message"]


def test_a_step_before_make_and_a_wrong_key_are_refused(served):
    _, port = served
    client = Client(port)
    client.hello()
    assert "second request is make" in client.ask(op="step", action=np.zeros(1))["error"]["message"]
    client = Client(port)
    refused = client.ask(op="hello", protocol=protocol.PROTOCOL, **{keys.ENV_API_KEY: "wrong"})
    assert refused["error"]["type"] == "PermissionError"


def test_an_honest_connection_still_steps_its_env(served):
    _, port = served
    client = made(port)
    obs, _ = client.ask(op="reset", seed=0, options=None)["ok"]
    assert obs.shape == (2,)
    obs, *_ = client.ask(op="step", action=np.ones(1))["ok"]
    assert obs[0] == 1.0
    assert client.ask(op="close") == {"ok": None}


def test_a_forged_length_is_refused_before_its_body(served):
    path, port = served
    client = Client(port)
    client.socket.sendall(struct.pack(">II", 2**32 - 1, 2**32 - 1))  # 8 GiB announced, none sent
    answer = client.answer()
    assert "at most 4096" in answer["error"]["message"]  # a hello's: a few short strings
    # After the make, a step's frame is bounded by the env's action (1 float) and some headroom.
    client = made(port)
    client.socket.sendall(struct.pack(">II", 16, 1 << 30))
    answer = client.answer()
    assert "at most" in answer["error"]["message"]
    assert client.closed()
    assert "Traceback" not in (path / "serve.log").read_text()


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">II", 3, 0) + b"\xc1\xc1\xc1" + bytes(13),  # not msgpack
        struct.pack(">II", 8, 0) + bytes(16),  # zeros
        struct.pack(">II", 1, 0) + msgpack.packb(7) + bytes(15),  # not a map
        struct.pack(">II", 3, 0) + msgpack.packb({1: 2}) + bytes(13),  # a key not a string
    ],
    ids=["garbage", "zeros", "not-a-map", "int-key"],
)
def test_a_malformed_hello_is_an_error_frame_and_one_log_line(served, frame):
    path, port = served
    client = Client(port)
    client.socket.sendall(frame)
    answer = client.answer()
    assert answer["error"]["type"] == "EnvServerError", answer
    assert client.closed()
    log = (path / "serve.log").read_text()
    assert "Traceback" not in log
    assert log.count("refused 127.0.0.1") == 1, log


def test_a_slow_hello_is_cut_at_the_handshake_deadline(served, monkeypatch):
    path, port = served
    client = Client(port)
    client.socket.settimeout(HANDSHAKE_TIMEOUT_S + 20)
    frame = CODEC.pack({"op": "hello", "protocol": protocol.PROTOCOL, keys.ENV_API_KEY: KEY})
    started = time.monotonic()
    ended = None
    for byte in frame:  # one byte every 5 s: each recv alone would wait less than its timeout
        try:
            client.socket.sendall(bytes([byte]))
            if client.socket.recv(1, socket.MSG_DONTWAIT) == b"":
                ended = time.monotonic()
                break
        except BlockingIOError:
            pass
        except OSError:
            ended = time.monotonic()
            break
        time.sleep(5)
        if time.monotonic() - started > HANDSHAKE_TIMEOUT_S + 15:
            break
    assert ended is not None, "the server kept a slow hello past its handshake deadline"
    assert ended - started < HANDSHAKE_TIMEOUT_S + 6
    assert "no hello and make within" in (path / "serve.log").read_text()


def test_connections_past_the_cap_are_refused_and_a_slot_frees_when_one_ends(served):
    _, port = served
    held = [made(port) for _ in range(3)]
    extra = Client(port)
    answer = extra.ask(op="hello", protocol=protocol.PROTOCOL, **{keys.ENV_API_KEY: KEY})
    assert "serves 3 connections at once" in answer["error"]["message"]
    held.pop().ask(op="close")
    time.sleep(0.5)
    made(port).ask(op="close")


def test_a_made_connection_is_kept_alive_by_tcp_probes(served):
    """A client machine that vanishes without a FIN is found by keepalive probes: the relay's
    side of a made connection has the keepalive timer running (/proc/net/tcp's timer 2)."""
    _, port = served
    client = made(port)
    local_port = client.socket.getsockname()[1]
    time.sleep(0.3)
    timers = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, timer = fields[1], fields[2], fields[5].split(":")[0]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == local_port:
            timers.append(timer)
    assert timers == ["02"], timers
    client.close()


def test_the_env_server_itself_makes_one_env_of_its_own_entry(entries, tmp_path):  # noqa: F811
    """The wall behind the relay: an env server started for one entry refuses any other, and a
    second make of its own."""
    target = tmp_path / "pwned"
    server = EnvServer(PYTHON, "echo_env:Echo")
    try:
        with pytest.raises(EnvServerError, match="started for the env 'echo_env:Echo'"):
            server.request("make", entry="os:system", task=f"touch {target}", kwargs={})
        server.request("make", entry="echo_env:Echo", task="t", kwargs={})
        with pytest.raises(EnvServerError, match="has made its env: it makes one env"):
            server.request("make", entry="echo_env:Echo", task="t", kwargs={})
    finally:
        server.close()
    assert not target.exists()


def test_a_connection_cannot_ask_the_relay_for_rounds_of_steps_or_other_envs(served):
    """`steps` and env numbers are a lockstep worker's, over its own pipes: through the relay a
    connection holds its one env, and a round of steps is refused and ends it."""
    _, port = served
    client = made(port)
    assert (
        "no live env 1" in client.ask(op="reset", seed=0, options=None, env=1)["error"]["message"]
    )
    client.ask(op="reset", seed=0, options=None)
    answer = client.ask(op="steps", steps=[[0, np.ones(1)]] * 1000)
    assert "asks spaces, reset, step, render, close; got 'steps'" in answer["error"]["message"]
    assert client.closed()


def test_a_server_of_k_envs_makes_k_and_answers_a_bad_step_of_a_round_alone(entries):  # noqa: F811
    """The bound a lockstep worker starts its env server with holds, and a round naming an env
    it does not hold (or no number at all) is an error of that step only."""
    server = EnvServer(PYTHON, "echo_env:Echo", most=2)
    try:
        numbers = [server.request("make", entry="echo_env:Echo", task="t", kwargs={})["env"]]
        numbers.append(server.request("make", entry="echo_env:Echo", task="t", kwargs={})["env"])
        with pytest.raises(EnvServerError, match="has made 2 envs, as its starter allowed"):
            server.request("make", entry="echo_env:Echo", task="t", kwargs={})
        action = {"arm": np.ones(3, np.float32), "grip": 1}
        asked = [[0, action], [7, action], ["0; rm -rf /", action], [1, action], "no pair"]
        answers = list(server.stream("steps", len(asked), steps=asked))
        assert [sorted(answer) for answer in answers] == [
            ["ok"],
            ["error"],
            ["error"],
            ["ok"],
            ["error"],
        ]
        assert "no live env 7" in answers[1]["error"]["message"]
        server.request("close", env=0)
        with pytest.raises(
            EnvServerError, match=r"no live env 0 in this env server; its live envs: \[1\]"
        ):
            server.request("step", action=action, env=0)
        assert numbers == [0, 1]
    finally:
        server.close()


def test_a_make_whose_task_or_arguments_are_no_string_or_map_is_refused(served):
    _, port = served
    for make in (
        {"entry": ENTRY, "task": ["reach"], "kwargs": {}},
        {"entry": ENTRY, "task": "reach", "kwargs": msgpack.ExtType(9, b"x")},
        {"entry": ["x"], "task": "reach", "kwargs": []},
    ):
        client = Client(port)
        client.hello()
        answer = client.ask(op="make", **make)
        assert answer["error"]["type"] == "EnvServerError", answer
        assert client.closed()
    made(port).ask(op="close")


def nested_tuples(depth: int) -> msgpack.ExtType:
    """An ext TUPLE holding a tuple holding ... `depth` deep: about 4 bytes a level."""
    inner = msgpack.ExtType(protocol.TUPLE, msgpack.packb([]))
    for _ in range(depth - 1):
        inner = msgpack.ExtType(protocol.TUPLE, msgpack.packb([inner]))
    return inner


def raw_frame(message: dict) -> bytes:
    body = msgpack.packb(message)
    return protocol.HEADER.pack(len(body), 0) + body + bytes(-len(body) % protocol.ALIGN)


def test_a_hello_of_tuples_200_deep_leaves_the_server_and_an_honest_client_running(points):  # noqa: F811
    """About 1 KB, sent without the key: it once crashed `env serve` (SIGSEGV) and every env
    server with it. Now the hello is decoded flat, before anything nested, and refused."""
    server, port = start_env_server(
        points, clean_env(points, **{keys_variable(): KEY}), "test_remote_points:REMOTE",
        "--port", "0",
    )  # fmt: skip
    try:
        honest = made(port)
        honest.ask(op="reset", seed=0, options=None)
        for key in ("wrong", KEY):
            attacker = Client(port)
            hello = {"op": "hello", "protocol": protocol.PROTOCOL, keys.ENV_API_KEY: key,
                     "x": nested_tuples(200)}  # fmt: skip
            frame = raw_frame(hello)
            assert len(frame) < 1200
            attacker.socket.sendall(frame)
            answer = attacker.answer()
            assert answer["error"]["type"] == "EnvServerError", answer
            assert attacker.closed()
        time.sleep(0.3)
        assert server.poll() is None
        obs, *_ = honest.ask(op="step", action=np.ones(1))["ok"]
        assert obs[0] == 1.0
        assert "ok" in made(port).ask(op="reset", seed=0, options=None)
        assert "Traceback" not in (points / "serve.log").read_text()
    finally:
        stop(server)


def test_the_frame_decoder_refuses_deep_tuples_and_a_flood_of_empty_maps():
    """Both ends decode with one codec: tuples nested deeper than MAX_TUPLE_DEPTH and frames of
    more than MAX_CONTAINERS maps and lists are refused as they decode, not built."""
    deep = msgpack.packb({"x": nested_tuples(protocol.MAX_TUPLE_DEPTH + 5)})
    with pytest.raises(protocol.FrameRefused, match="nested more than"):
        protocol.Codec().unpack(memoryview(deep + bytes(-len(deep) % 16)), len(deep))
    shallow = msgpack.packb({"x": nested_tuples(protocol.MAX_TUPLE_DEPTH - 1)})
    assert protocol.Codec().unpack(memoryview(shallow), len(shallow))["x"]
    flood = msgpack.packb({"x": [{}] * (protocol.MAX_CONTAINERS + 1)})
    assert len(flood) < 300_000  # one byte an empty map
    with pytest.raises(protocol.FrameRefused, match="more than"):
        protocol.Codec().unpack(memoryview(flood), len(flood))


def test_the_env_servers_script_runs_only_from_a_folder_of_this_users_own(tmp_path, monkeypatch):
    """Its folder's name can be guessed: a script another user planted there ran as root when
    root started an isolated env. The folder is made 0700 and refused when another user owns
    it or others may write it; a planted file in this user's own folder is written over. It
    lies where no co-user can make it first: a folder planted in the shared temp directory
    under its old name denies nothing."""
    import os
    import tempfile

    from policybench.envserver.proxy import private_folder, server_script

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    planted = tmp_path / f"policybench-envserver-{os.getuid()}"
    planted.mkdir(mode=0o777)
    if os.getuid() == 0:
        os.chown(planted, 65534, 65534)
    script = server_script()
    assert script.is_relative_to(tmp_path / "cache") and not any(planted.iterdir())
    assert oct(private_folder().stat().st_mode & 0o777) == "0o700"
    script.write_text("import os; os.system('touch /tmp/pwned')\n")
    assert server_script() == script and "pwned" not in script.read_text()
    base = private_folder()
    base.chmod(0o777)
    with pytest.raises(EnvServerError, match="only it may write"):
        server_script()
    base.chmod(0o700)
    if os.getuid() == 0:  # root can hand the folder to another user
        os.chown(base, 65534, 65534)
        with pytest.raises(EnvServerError, match="owner uid 65534"):
            server_script()


def test_idle_connections_without_a_key_do_not_keep_keyed_ones_out(served):
    """64 connections that never say hello (a slot each, once) refused 24 of 30 keyed attempts:
    now they wait in places of their own, cut at the hello's deadline, and every keyed
    connection is served."""
    _, port = served
    idle = [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(64)]
    try:
        for _ in range(6):  # twice the slots, each made and closed
            client = made(port)
            assert client.ask(op="close") == {"ok": None}
            client.close()
    finally:
        for connection in idle:
            connection.close()


def test_a_header_naming_two_gib_allocates_only_what_arrives():
    """A fake env server's header names 2 GiB and sends 100 bytes: the run's env client once
    allocated the 2 GiB before a byte came; now it holds what was sent, and the frame ends
    unread (None: the stream ended)."""
    import resource

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(protocol.HEADER.pack(16, (1 << 31) - 64) + b"x" * 100)
        theirs.shutdown(socket.SHUT_WR)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with ours.makefile("rb", buffering=0) as stream:
            assert protocol.Codec().read(stream) is None
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 64


def test_a_malformed_frame_after_make_is_answered_and_the_env_server_goes_on(entries):  # noqa: F811
    """An array whose layout names more bytes than the frame holds, and tuples nested too deep:
    each once killed the env server (its traceback on the terminal). Each is now an error
    answer, and the env steps on."""
    server = EnvServer(PYTHON, "echo_env:Echo")
    try:
        server.request("make", entry="echo_env:Echo", task="t", kwargs={})
        process = server._process
        bad_array = msgpack.ExtType(protocol.ARRAY, b"<f8 999999999")
        for bad in (bad_array, nested_tuples(200)):
            body = msgpack.packb({"op": "step", "action": bad})
            frame = protocol.HEADER.pack(len(body), 0) + body + bytes(-len(body) % 16)
            protocol.write_frame(process.stdin.fileno(), [frame])
            answer = protocol.Codec().read(process.stdout)
            assert "error" in answer, answer
        assert process.poll() is None
        action = {"arm": np.ones(3, np.float32), "grip": 1}
        assert server.request("step", action=action) is not None
    finally:
        server.close()


@pytest.mark.parametrize(
    ("resource", "said"),
    [
        ("policybench.suites:/etc/passwd", "inside that package"),
        ("policybench.suites:data/../../../../../../etc/passwd", "inside that package"),
        ("policybench.suites:policybench_envserver.py", "named like a module"),
        ("policybench.suites:__init__.py", "named like a module"),
    ],
)
def test_an_isolated_envs_data_names_are_confined_to_their_package(resource, said):
    """A data name once read /etc/passwd into the env server's folder, or replaced the server's
    own script with a file of the same name."""
    from policybench.envserver.proxy import server_script

    with pytest.raises(EnvServerError, match=said):
        server_script(data=(resource,))
