"""Fuzzing every decoder a client, a neighbour or a file can reach: generated frames thrown at
the policy server's wire, the env server's codec (both ends share it) and its flat hello,
generated lines at the results and run.json readers, generated requests at the pages' server.
Each either decodes or refuses with its own error type, never crashes, and the process's peak
memory stays within FUZZ_MIB while it runs. The concrete frames that broke a server are
regression tests beside each server's own attacks (test_serve_attacks, test_env_serve_attacks)."""

from __future__ import annotations

import contextlib
import http.client
import json
import resource
import socket
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policybench.envserver import server as protocol
from policybench.envserver.relay import flat_map
from policybench.pages.server import PageServer, Response
from policybench.run.info import RunInfo
from policybench.run.results import read_results
from policybench.serve.wire import WireError, unpackb

FUZZ_MIB = 300  # the most the fuzzing may add to this process's peak memory
EXAMPLES = 300
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=40),
)
exts = st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=40))
values = st.recursive(
    st.one_of(scalars, exts),
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.one_of(st.text(max_size=8), st.binary(max_size=8)), inner, max_size=6),
    ),
    max_leaves=30,
)
# Frames as a client could write them: msgpack of anything (tagged arrays, exts, nesting), or
# bytes that need not be msgpack at all.
frames = st.one_of(values.map(msgpack.packb), st.binary(max_size=400))


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture(scope="module")
def memory_bound():
    before = peak_mib()
    yield
    assert peak_mib() - before < FUZZ_MIB


@FUZZ
@given(frame=frames)
def test_the_policy_servers_wire_decodes_or_refuses_every_frame(memory_bound, frame):
    try:
        unpackb(frame)
    except WireError as error:
        assert "\n" not in str(error)


def env_frame(body: bytes, raw: bytes = b"") -> memoryview:
    return memoryview(protocol.HEADER.pack(len(body), len(raw)) + body + raw)


@FUZZ
@given(body=frames, raw=st.binary(max_size=64))
def test_the_env_servers_codec_decodes_or_refuses_every_frame(memory_bound, body, raw):
    padded = body + bytes(-len(body) % protocol.ALIGN)
    frame = memoryview(padded + raw)
    # The relay answers each refusal with one error frame.
    with contextlib.suppress(ValueError, TypeError, KeyError, IndexError, msgpack.UnpackException):
        protocol.Codec().unpack(frame, len(body))
    with contextlib.suppress(ValueError, TypeError, msgpack.UnpackException):
        flat_map(env_frame(body, raw))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
json_lines = json_values.map(json.dumps)


@FUZZ
@given(
    lines=st.lists(
        st.one_of(json_lines, st.text(st.characters(exclude_characters="\r\n"), max_size=80)),
        max_size=8,
    )
)
def test_the_results_reader_keeps_what_is_valid_and_names_what_is_not(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("run") / "results.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    found = read_results(path)  # never raises: a bad line is a problem, not a crash
    assert len(found.records) + len(found.problems) <= len(lines)


@FUZZ
@given(document=st.one_of(json_values.map(json.dumps), st.text(max_size=60)))
def test_run_json_loads_or_is_refused_with_a_value_error(tmp_path_factory, document):
    folder = tmp_path_factory.mktemp("run")
    (folder / "run.json").write_text(document)
    try:
        RunInfo.load(folder)
    except ValueError as error:
        assert "run.json" in str(error)


BASE_RECORD = {"eval": "e", "task": "t", "outcome": "solved", "steps": 3, "sim_s": 0.1,
               "wall_s": 0.1, "nodeid": "x::t[0]", "scene": {"seed": 0}}  # fmt: skip
RUN_FIELDS = ("eval", "task", "outcome", "steps", "arm", "scene", "nodeid", "success_step", "specs")


@FUZZ
@given(
    changes=st.lists(st.tuples(st.sampled_from(RUN_FIELDS), json_values), max_size=4),
    run_json=st.one_of(json_values.map(json.dumps), st.just("[" * 5000)),
    summary=st.one_of(json_values.map(json.dumps), st.text(max_size=40)),
)
def test_history_reads_or_skips_every_generated_run_folder(tmp_path_factory, changes, run_json,
                                                           summary):  # fmt: skip
    """A reports folder of a good run and a run with generated fields, run.json and summary:
    `history` reads both or skips the bad one with a line, and never raises."""
    from policybench.report.history import open_store, read_history, update

    root = tmp_path_factory.mktemp("reports")
    for name, fields in (("good", {}), ("generated", dict(changes))):
        (root / name).mkdir()
        lines = [json.dumps(BASE_RECORD), json.dumps({**BASE_RECORD, **fields})]
        (root / name / "results.jsonl").write_text("\n".join(lines) + "\n")
    (root / "generated" / "run.json").write_text(run_json)
    (root / "generated" / "summary.json").write_text(summary)
    store = open_store(root)
    try:
        updated = update(store, root)
        assert updated.read + len({line.split(":")[0] for line in updated.skipped}) >= 2
        read_history(store, root)
    finally:
        store.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    (root / "shown.json").write_text("{}")
    routes = {("GET", "/"): lambda request: Response.of_html("ok"),
              ("POST", "/verdict"): lambda request: Response.of_json(request.json())}  # fmt: skip
    with PageServer(routes, root, shown=lambda: {"shown.json"}) as server:
        yield server


header_names = st.sampled_from(["Content-Length", "Range", "Host", "Origin", "Content-Type", "X"])
header_values = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=30)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(["GET", "POST", "HEAD", "PUT", "G\x00T"]),
    path=st.one_of(
        st.sampled_from(
            ["/", "/verdict", "/files/shown.json", "/files/%00", "/files/../etc/passwd"]
        ),
        st.text(st.characters(codec="ascii", exclude_characters=" \r\n"), max_size=30).map(
            lambda t: "/" + t
        ),
    ),
    headers=st.dictionaries(header_names, header_values, max_size=4),
    body=st.binary(max_size=64),
)
def test_the_pages_answer_every_request_with_a_status_never_a_traceback(
    pages, capfd, method, path, headers, body
):
    port = pages.httpd.server_address[1]
    lines = [f"{method} {path} HTTP/1.0", f"Host: 127.0.0.1:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/") else b""
    assert status.isdigit() and 200 <= int(status) < 600, answer[:200]
    assert "Traceback" not in capfd.readouterr().err
    honest = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        honest.request("GET", "/", headers={"Host": f"127.0.0.1:{port}"})
        assert honest.getresponse().status == 200
    finally:
        honest.close()


def raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_the_pages_concrete_attacks_get_a_status_each(pages, capfd, monkeypatch):
    """`Content-Length: ²` (a digit to str.isdigit, not to int) and a NUL in a /files/ path once
    printed tracebacks; a request trickled a byte at a time held a thread past the 30 s limit,
    which was per read. Here the limit is 2 s for the whole request."""
    port = pages.httpd.server_address[1]
    host = f"Host: 127.0.0.1:{port}\r\n"
    said = raw_request(port, f"POST /verdict HTTP/1.0\r\n{host}Content-Length: ²\r\n\r\n".encode())
    assert said.startswith(b"HTTP/1.0 413")
    said = raw_request(port, f"GET /files/%00 HTTP/1.0\r\n{host}\r\n".encode())
    assert said.startswith(b"HTTP/1.0 400")
    assert "Traceback" not in capfd.readouterr().err
    monkeypatch.setattr("policybench.pages.server.REQUEST_TIMEOUT_S", 2.0)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        try:
            for byte in f"GET / HTTP/1.0\r\n{host}X-Slow: {'a' * 40}\r\n\r\n".encode():
                connection.sendall(bytes([byte]))
                time.sleep(0.25)
                if time.monotonic() - started > 8:
                    break
            cut = connection.recv(1) == b""
        except OSError:
            cut = True
    assert cut and time.monotonic() - started < 5
