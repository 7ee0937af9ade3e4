"""`policybench serve` on real loopback sockets: the openpi handshake and answers, /healthz, the
API key, refused frames, errors as text frames, and batching that never mixes up answers."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from policybench import keys
from policybench.policy.base import ChunkSource, SessionContext
from policybench.policy.codec import Codec, prompt
from policybench.serve.client import Endpoint, RemoteModel, RemotePolicyError, RemoteUnavailable
from policybench.serve.server import (
    PolicyServer,
    ServerConfig,
    ServerThread,
    context_from_json,
    fixed_model,
)
from policybench.serve.wire import packb, unpackb
from tests.served import EchoBatchModel, RecordingModel

CONTEXT = SessionContext("do the thing", 10.0)
# Every wait in a client thread is bounded, so a stuck client fails its test instead of hanging it.
WAIT_S = 10.0


def serve(model, **config) -> ServerThread:
    server = PolicyServer(fixed_model(model, 10.0), ServerConfig(port=0, **config), model.name)
    return ServerThread(server)


def open_source(url: str) -> ChunkSource:
    return RemoteModel(Endpoint(url, infer_timeout_s=WAIT_S)).open(CONTEXT)


def run_clients(
    client: Callable[..., Any], calls: Sequence[tuple], timeout_s: float = 60.0
) -> list:
    """Runs `client(*args)` for each args on a thread of its own and returns what each returned;
    a client's exception is raised here, and a client still running after `timeout_s` fails."""
    pool = ThreadPoolExecutor(len(calls), thread_name_prefix="client")
    try:
        futures = [pool.submit(client, *args) for args in calls]
        _, running = wait(futures, timeout=timeout_s)
        assert not running, f"{len(running)} clients were still running after {timeout_s} s"
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def raw(url: str, **kwargs):
    """An openpi-style client connection: compression off, no size limit."""
    return connect(url, compression=None, max_size=None, proxy=None, legacy=True, **kwargs)


@pytest.fixture
def recording():
    model = RecordingModel()
    with serve(model) as server:
        yield server, model


def test_the_first_frame_is_the_metadata_map_then_answers_carry_actions_and_timing(recording):
    server, _ = recording
    with raw(server.url) as ws:
        metadata = unpackb(ws.recv(timeout=5))
        assert metadata["server"] == "policybench" and metadata["policy"] == "recording"
        for _ in range(2):
            ws.send(packb({"answer": np.full((3, 2), 0.5, np.float32), "prompt": "go"}))
            answer = unpackb(ws.recv(timeout=5))
        assert answer["actions"].shape == (3, 2) and answer["actions"].dtype == np.float32
        timing = answer["server_timing"]
        assert timing["batch_size"] == 1 and timing["infer_ms"] >= 0
        assert {"queue_ms", "prev_total_ms"} <= set(timing)


def test_a_served_models_contract_reaches_the_client_and_is_judged_against_a_codec():
    """The model's contract travels in the connection's metadata; the client's model declares
    it once connected, and the check a preflight makes finds the mismatch."""
    from policybench.policy.contract import Contract, Image, contract_of, mismatches

    declared = Contract(control_hz=20.0, images={"observation/image": Image(224, 224)})
    model = RecordingModel()
    model.contract = declared
    with serve(model) as server:
        remote = RemoteModel(Endpoint(server.url, infer_timeout_s=WAIT_S))
        remote.open(CONTEXT)({"answer": np.zeros((1, 2))})
        assert contract_of(remote) == declared
    codec = Contract(control_hz=10.0, images={"observation/image": Image(96, 96)})
    assert [line.split(":")[0] for line in mismatches(contract_of(remote), codec)] == [
        "control rate",
        "image observation/image",
    ]
    # A model that sees observations through a codec of the server's (a LeRobot checkpoint, in
    # LeRobot's names) is judged by its clients on its actions' conventions alone.
    translated = fixed_model(model, 10.0, model_codec=Codec("lerobot", (prompt("task"),)))
    with ServerThread(PolicyServer(translated, ServerConfig(port=0), model.name)) as server:
        remote = RemoteModel(Endpoint(server.url, infer_timeout_s=WAIT_S))
        remote.open(CONTEXT)({"answer": np.zeros((1, 2))})
        assert contract_of(remote) == Contract(control_hz=20.0)


ALL_DTYPES = ["|b1", "|u1", "<u2", "<i4", "<i8", "<f2", "<f4", "<f8", "|S4", "<U2"]


def test_every_dtype_and_shape_reaches_the_model_and_actions_come_back_intact(recording):
    server, model = recording
    rng = np.random.default_rng(1)
    obs = {
        f"x{i}": rng.integers(0, 9, size=shape).astype(dtype)
        for i, (dtype, shape) in enumerate(
            (dtype, shape) for dtype in ALL_DTYPES for shape in [(), (0,), (2, 3), (1, 2, 2, 1)]
        )
    }
    remote = RemoteModel(Endpoint(server.url))
    for answer in [np.arange(6.0).reshape(3, 2), np.arange(4, dtype=np.int16).reshape(1, 4)]:
        chunk = remote.open(CONTEXT)({**obs, "answer": answer})
        assert chunk.actions.dtype == answer.dtype
        np.testing.assert_array_equal(chunk.actions, answer)
        assert chunk.fps == CONTEXT.control_hz
    seen = model.seen[-1]
    assert "prompt" not in seen  # the instruction travels as the prompt, not as an observation
    for name, array in obs.items():
        assert seen[name].dtype == array.dtype and seen[name].shape == array.shape
        np.testing.assert_array_equal(seen[name], array)
    assert remote.metadata["policy"] == "recording"


def test_observations_reach_the_model_read_only_without_a_copy(recording):
    server, model = recording
    RemoteModel(Endpoint(server.url)).open(CONTEXT)({"image": np.ones((4, 4, 3), np.uint8)})
    image = model.seen[-1]["image"]
    assert not image.flags.writeable and not image.flags.owndata
    np.testing.assert_array_equal(image, np.ones((4, 4, 3), np.uint8))


def test_healthz_answers_200(recording):
    server, _ = recording
    health = server.url.replace("ws://", "http://") + "/healthz"
    with urllib.request.urlopen(health, timeout=5) as response:
        assert response.status == 200


def test_a_model_error_is_a_text_frame_with_the_message_and_the_next_rollout_is_fine(recording):
    server, _ = recording
    remote = RemoteModel(Endpoint(server.url))
    with pytest.raises(RemotePolicyError, match=r"answered an error: ValueError: model refused: x"):
        remote.open(CONTEXT)({"fail": np.array("x"), "state": np.zeros(2)})
    chunk = remote.open(CONTEXT)({"state": np.zeros(2)})
    assert chunk.actions.shape == (1, 1)


def test_oversized_and_garbage_frames_are_refused_and_the_server_keeps_serving():
    with serve(RecordingModel(), max_frame_bytes=1000) as server:
        with raw(server.url) as ws:
            ws.recv(timeout=5)
            ws.send(packb({"big": np.zeros(5000, np.uint8)}))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd.code == 1009  # message too big
        for garbage, code in [(b"\xc1\x00", 1007), (b"\x93\x01", 1007), ("hello", 1003)]:
            with raw(server.url) as ws:
                ws.recv(timeout=5)
                ws.send(garbage)
                message = ws.recv(timeout=5)
                assert isinstance(message, str) and message
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    ws.recv(timeout=5)
                assert closed.value.rcvd.code == code
        chunk = RemoteModel(Endpoint(server.url)).open(CONTEXT)({"state": np.zeros(2)})
        assert chunk.actions.shape == (1, 1)


def test_the_api_key_is_enforced_when_set():
    with serve(RecordingModel(), api_key="s3cret") as server:
        for key in [None, "wrong"]:
            with pytest.raises(RemoteUnavailable, match=r"HTTP 401.*--policy-api-key"):
                RemoteModel(Endpoint(server.url, api_key=key)).open(CONTEXT)
        chunk = RemoteModel(Endpoint(server.url, api_key="s3cret")).open(CONTEXT)({})
        assert chunk.actions.shape == (1, 1)
        health = server.url.replace("ws://", "http://") + "/healthz"
        with urllib.request.urlopen(health, timeout=5) as response:
            assert response.status == 200  # health checks need no key


class GatedEchoModel(EchoBatchModel):
    """An EchoBatchModel whose first call sets `entered`, then waits until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.gate = threading.Event(), threading.Event()

    def predict_batch(self, requests):
        if not self.entered.is_set():
            self.entered.set()
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
        return super().predict_batch(requests)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        time.sleep(0.005)


def test_an_exception_fails_only_the_request_that_caused_it():
    """A poisoned request batched with an honest one: the batch raises, each request is asked
    again alone, and only the poisoned one gets the error."""
    model = GatedEchoModel()
    with serve(model, max_batch=2) as server:
        blocker, poisoned, same_batch = (open_source(server.url) for _ in range(3))
        one = {"who": np.array([1.0]), "seq": np.array([0.0])}

        def ask(source, obs: dict) -> RemotePolicyError | None:
            try:
                source(obs)
            except RemotePolicyError as error:
                return error
            return None

        pool = ThreadPoolExecutor(3, thread_name_prefix="client")
        try:
            # The blocker holds the model while the other two ask, so they meet in one call.
            blocked = pool.submit(ask, blocker, one)
            until(model.entered.is_set, "the blocker's call")
            asked = [
                pool.submit(ask, poisoned, {**one, "who": np.array([-1.0])}),
                pool.submit(ask, same_batch, one),
            ]
            until(lambda: server.server.batch_counters().received == 3, "both requests")
            model.gate.set()
            assert blocked.result(WAIT_S) is None
            errors = [future.result(WAIT_S) for future in asked]
        finally:
            model.gate.set()
            pool.shutdown(wait=False, cancel_futures=True)
        assert model.batch_sizes == [1, 2, 1, 1]  # the batch, then each of its requests alone
        assert "poisoned batch" in str(errors[0]) and errors[1] is None
        later = open_source(server.url)(one)
        np.testing.assert_array_equal(later.actions, [[1.0, 0.0]])


def test_a_malformed_observation_fails_only_its_own_client_in_one_line():
    """Requests are batched only with those of their observation's layout: a client sending a
    5-d `who` while others send 1-d is answered alone (its own error, one line, no server
    paths), and the honest clients asking meanwhile share a call and are answered."""
    model = GatedEchoModel()
    with serve(model, max_batch=4) as server:
        blocker, bad, *honest = (open_source(server.url) for _ in range(4))
        one = {"who": np.array([1.0]), "seq": np.array([0.0])}
        pool = ThreadPoolExecutor(4, thread_name_prefix="client")
        try:
            blocked = pool.submit(blocker, one)
            until(model.entered.is_set, "the blocker's call")
            malformed = pool.submit(bad, {**one, "who": np.zeros(5)})
            answered = [pool.submit(source, one) for source in honest]
            until(lambda: server.server.batch_counters().received == 4, "every request")
            model.gate.set()
            blocked.result(WAIT_S)
            with pytest.raises(RemotePolicyError) as refused:
                malformed.result(WAIT_S)
            for future in answered:
                np.testing.assert_array_equal(future.result(WAIT_S).actions, [[1.0, 0.0]])
        finally:
            model.gate.set()
            pool.shutdown(wait=False, cancel_futures=True)
    said = str(refused.value)
    assert "ValueError: expected 'who' of shape (1,), got [(5,)]" in said
    assert "Traceback" not in said and "/" not in said.split("ValueError", 1)[1]
    assert sorted(model.batch_sizes) == [1, 1, 2]


@pytest.fixture(scope="module")
def echo_server():
    model = EchoBatchModel(delay_s=0.003)
    with serve(model, max_batch=4, max_wait_ms=3) as server:
        yield server, model


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pauses=st.lists(
        st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.004]), min_size=1, max_size=6),
        min_size=2,
        max_size=6,
    )
)
def test_batching_never_mixes_up_which_answer_goes_to_which_client(echo_server, pauses):
    server, _ = echo_server
    start = threading.Barrier(len(pauses), timeout=WAIT_S)

    def client(who: int, waits: list[float]) -> list:
        source = open_source(server.url)
        start.wait()
        answers = []
        for seq, wait_s in enumerate(waits):
            threading.Event().wait(wait_s)
            chunk = source({"who": np.array([float(who)]), "seq": np.array([float(seq)])})
            answers.append(chunk.actions.tolist())
        return answers

    answers = run_clients(client, list(enumerate(pauses)))
    assert answers == [
        [[[who, seq]] for seq in range(len(waits))] for who, waits in enumerate(pauses)
    ]


def test_concurrent_clients_are_answered_in_shared_batches(echo_server):
    server, model = echo_server
    before = len(model.batch_sizes)
    barrier = threading.Barrier(4, timeout=WAIT_S)

    def client(who: int) -> None:
        source = open_source(server.url)
        barrier.wait()
        for seq in range(20):
            source({"who": np.array([float(who)]), "seq": np.array([float(seq)])})

    run_clients(client, [(who,) for who in range(4)])
    sizes = model.batch_sizes[before:]
    assert sum(sizes) == 80 and max(sizes) > 1 and len(sizes) < 80


def test_a_non_finite_observation_or_a_hostile_context_fails_only_its_own_request():
    """A NaN observation is refused before the model sees it, and a context of control_hz 0 (or
    a prompt past the limit) before the rollout opens; honest requests batched meanwhile are
    answered."""
    model = GatedEchoModel()
    with serve(model, max_batch=3) as server:
        one = {"who": np.array([1.0]), "seq": np.array([0.0])}
        blocker, nan, honest = (open_source(server.url) for _ in range(3))
        pool = ThreadPoolExecutor(3, thread_name_prefix="client")
        try:
            blocked = pool.submit(blocker, one)
            until(model.entered.is_set, "the blocker's call")
            asked = [
                pool.submit(nan, {**one, "seq": np.array([np.nan])}),
                pool.submit(honest, one),
            ]
            until(lambda: server.server.batch_counters().received == 3, "both requests")
            model.gate.set()
            blocked.result(WAIT_S)
            with pytest.raises(RemotePolicyError, match="'seq' holds NaN or inf"):
                asked[0].result(WAIT_S)
            np.testing.assert_array_equal(asked[1].result(WAIT_S).actions, [[1.0, 0.0]])
        finally:
            model.gate.set()
            pool.shutdown(wait=False, cancel_futures=True)
        assert model.batch_sizes == [1, 1]  # the NaN request never reached the model
    for hostile, said in (
        ({keys.CONTROL_HZ: 0.0}, "control_hz must be a rate in"),
        ({keys.INSTRUCTION: "x" * 5000}, "at most 4096"),
    ):
        context = json.dumps(
            {keys.INSTRUCTION: "go", keys.CONTROL_HZ: 10.0, "fields": {}, **hostile}
        )
        with pytest.raises(ValueError, match=said):
            context_from_json(context)


def test_the_metadata_clients_are_sent_names_no_absolute_path():
    """A checkpoint's absolute path told every client where the server keeps its files; the
    metadata names it by its last two parts (its weights' digest identifies it)."""

    class Checkpointed(EchoBatchModel):
        def describe(self):
            return {**super().describe(), "checkpoint": "/home/ana/ckpts/run1/pretrained_model"}

    with serve(Checkpointed()) as server, connect(server.url, open_timeout=10) as ws:
        metadata = unpackb(ws.recv(10))
    assert metadata["model"]["checkpoint"] == "run1/pretrained_model"
    assert "/home/ana" not in repr(metadata)


def test_a_server_with_a_certificate_serves_wss_and_a_client_trusting_its_ca_is_answered(
    tmp_path, monkeypatch
):
    """--tls-cert/--tls-key: keys and observations cross a network encrypted. A certificate made
    here (trustme, a CA of the test's own) for 127.0.0.1; a client trusting that CA through
    $SSL_CERT_FILE is answered over wss://, one that does not is refused at the handshake, and
    the command refuses a certificate without its key."""
    import ssl
    import subprocess
    import sys

    import trustme

    from policybench.tls import server_context

    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    cert, key, ca = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    authority.cert_pem.write_to_path(str(ca))
    key.chmod(0o644)  # a key others may read is refused, as ssh refuses one
    with pytest.raises(ValueError, match=r"may be read or written by others \(mode 0644\)"):
        server_context(str(cert), str(key))
    key.chmod(0o600)
    tls = server_context(str(cert), str(key))
    model = EchoBatchModel()
    server = PolicyServer(fixed_model(model, 10.0), ServerConfig(port=0, tls=tls), model.name)
    with ServerThread(server) as served:
        assert served.url.startswith("wss://127.0.0.1:")
        with pytest.raises((ssl.SSLError, RemoteUnavailable, OSError)):
            RemoteModel(Endpoint(served.url, connect_timeout_s=5)).open(CONTEXT)(
                {"who": np.array([1.0]), "seq": np.array([0.0])}
            )
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        answer = open_source(served.url)({"who": np.array([2.0]), "seq": np.array([0.0])})
        np.testing.assert_array_equal(answer.actions, [[2.0, 0.0]])
    refused = subprocess.run(
        [sys.executable, "-m", "policybench.cli", "serve", "--port", "0", f"--tls-cert={cert}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "--tls-cert and --tls-key go together" in refused.stderr


def test_half_open_tls_handshakes_are_cut_at_their_deadline(tmp_path, monkeypatch):
    """300 connections that never begin their TLS handshake were held for asyncio's 60 s each
    (4,700 of them once held 268 MiB): now at most TLS_HANDSHAKES are under way at once (the
    rest refused as they come), each cut TLS_HANDSHAKE_TIMEOUT_S after it began; then an honest
    wss:// client is answered."""
    import socket

    import trustme

    from policybench.serve.server import TLS_HANDSHAKE_TIMEOUT_S, TLS_HANDSHAKES
    from policybench.tls import server_context

    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    cert, key, ca = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    authority.cert_pem.write_to_path(str(ca))
    config = ServerConfig(port=0, tls=server_context(str(cert), str(key)))
    model = EchoBatchModel()
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    with ServerThread(PolicyServer(fixed_model(model, 10.0), config, model.name)) as served:
        port = int(served.url.rsplit(":", 1)[1])
        started = time.monotonic()
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
        time.sleep(1.0)
        cut_at_once = 0
        for connection in idle:
            connection.settimeout(0.05)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                cut_at_once += connection.recv(1) == b""  # refused: handshakes at their cap
        for connection in idle:
            connection.settimeout(TLS_HANDSHAKE_TIMEOUT_S + 10)
            with contextlib.suppress(OSError):
                assert connection.recv(1) == b""  # cut by the server
        waited = time.monotonic() - started
        for connection in idle:
            connection.close()
        answer = open_source(served.url)({"who": np.array([3.0]), "seq": np.array([0.0])})
        np.testing.assert_array_equal(answer.actions, [[3.0, 0.0]])
    assert waited < TLS_HANDSHAKE_TIMEOUT_S + 3, waited
    assert cut_at_once >= 300 - TLS_HANDSHAKES, cut_at_once
