"""`policybench env serve`: isolated Evals' envs served over TCP, for runs on other machines
(`--env-url`). Each connection, once its key and protocol are checked, gets an env server of its
own in its Eval's interpreter, and the relay passes frames between the socket and its pipes."""

from __future__ import annotations

import contextlib
import hmac
import math
import os
import select
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from policybench import keys
from policybench.envserver import Isolated
from policybench.envserver import server as protocol
from policybench.envserver.interpreters import (
    InterpreterMissing,
    InterpreterUnreadable,
    installed_versions,
    python_of,
)
from policybench.envserver.proxy import (
    CLOSE_WAIT_S,
    EnvServerError,
    EnvServerGone,
    StderrTail,
    server_script,
    widen,
)
from policybench.envserver.remote import VERSIONS
from policybench.lifetime import owned_env
from policybench.spec import Eval
from policybench.text import listed

READY = "policybench env serve: serving"  # the line a starter waits for; the URL follows
HANDSHAKE_BYTES = 1 << 16  # the most a frame may hold before the env is made
HELLO_BYTES, HELLO_ENTRIES = 4096, 16  # a hello: a few short strings, its key among them
HANDSHAKE_TIMEOUT_S = 30.0  # how long a connection may take to send its hello and make, in all
HELLO_TIMEOUT_S = 5.0  # how long it may take to send its hello (before its key is checked)
PRE_HELLO_PLACES = 256  # connections that may wait for their hello at once (a thread each)
# After the handshake an idle connection is probed: a client machine that vanished without a word
# (preempted, partitioned) is found within KEEPALIVE_IDLE_S + KEEPALIVE_COUNT * KEEPALIVE_EVERY_S,
# and an answer it no longer takes fails after USER_TIMEOUT_S; its env server then ends.
KEEPALIVE_IDLE_S, KEEPALIVE_EVERY_S, KEEPALIVE_COUNT = 30, 10, 3
USER_TIMEOUT_S = 60
MADE = ("spaces", "reset", "step", "render", "close")  # what a connection may ask once it has made
REQUEST_HEADROOM = HANDSHAKE_BYTES  # of a request frame beyond its action's bytes


@dataclass(frozen=True)
class Served:
    """An Eval whose env a connection may ask for: its name, its isolated make_env and the tasks
    its plan runs."""

    name: str
    make_env: Isolated
    tasks: frozenset[str]


def served_of(evals: Iterable[Eval]) -> list[Served]:
    """The isolated ones of `evals`; refused when there is none."""
    evals = list(evals)
    served = [
        Served(e.name, e.make_env, frozenset(e.tasks))
        for e in evals
        if isinstance(e.make_env, Isolated)
    ]
    if not served:
        names = ", ".join(e.name for e in evals) or "none"
        raise LookupError(
            f"none of the Evals given ({names}) runs its env in an interpreter of its own; "
            "serve isolated Evals (MetaWorld and PushT are, with $POLICYBENCH_ENV_PYTHON set)"
        )
    return served


class Refused(Exception):
    """A connection's request that the relay answers with an error, then hangs up."""

    def __init__(self, kind: type[Exception], message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Relay:
    """Serves `served` to connections that give `api_key` (None: to any). A connection says
    hello, makes one of the served envs (one of its Eval's tasks, with the Eval's arguments),
    then asks only what an env answers (MADE); anything else ends it with an error."""

    def __init__(self, served: list[Served], api_key: str | None) -> None:
        self.served = served
        self.api_key = api_key

    def handle(
        self,
        connection: socket.socket,
        admission: Admission | None = None,
        started: float | None = None,
    ) -> None:
        """Serves one connection; `admission` gives it a slot once its hello (its key) passed.
        Its hello is due HELLO_TIMEOUT_S after `started` (when it was taken: a TLS handshake
        counts in that time)."""
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.monotonic() if started is None else started
        frames = Frames(connection, deadline=started + HELLO_TIMEOUT_S)
        try:
            self._check_hello(decoded_map(frames.read(connection, HELLO_BYTES), flat_map))
            if admission is not None:
                admission.admit()
            frames.deadline = started + HANDSHAKE_TIMEOUT_S
            frames.send({"ok": {"protocol": protocol.PROTOCOL}})
            make = memoryview(bytes(frames.read(connection, HANDSHAKE_BYTES)))  # kept
            request = decoded_map(make)
            chosen = self._chosen(request)
            if request.get("op") == VERSIONS:
                frames.send({"ok": installed(chosen.make_env)})
                return
            child = EnvServerProcess(chosen.make_env)
        except Refused as refused:
            log(f"refused {peer_of(connection)}: {refused}")
            frames.send_error(refused.kind.__name__, str(refused))
            return
        except FrameMissing as missing:
            if missing.late:
                log(
                    f"{peer_of(connection)}: no hello and make within their deadlines "
                    f"({HELLO_TIMEOUT_S:g} s for the hello, {HANDSHAKE_TIMEOUT_S:g} s in all)"
                )
            return
        log(f"{peer_of(connection)}: {chosen.name}'s env in env server {child.process.pid}")
        frames.deadline = None
        keep_alive(connection)
        try:
            child.relay(make, frames)
        finally:
            child.end()

    def _check_hello(self, hello: dict[str, Any]) -> None:
        if hello.get("op") != "hello":
            raise Refused(EnvServerError, "a connection's first request is hello")
        given = hello.get(keys.ENV_API_KEY) or ""
        if not isinstance(given, str):
            given = ""
        if self.api_key is not None and not hmac.compare_digest(
            given.encode(), self.api_key.encode()
        ):
            raise Refused(
                PermissionError,
                "missing or wrong API key: give this server's key with --env-api-key or "
                "$POLICYBENCH_API_KEY",
            )
        if hello.get("protocol") != protocol.PROTOCOL:
            raise Refused(
                EnvServerError,
                f"the proxy speaks env server protocol {hello.get('protocol')!r:.40}, this "
                f"server {protocol.PROTOCOL}: both must come from the same policybench",
            )

    def _chosen(self, make: dict[str, Any]) -> Served:
        op = make.get("op")
        if op not in ("make", VERSIONS):
            raise Refused(EnvServerError, f"a connection's second request is make or {VERSIONS}")
        entry, kwargs, task = make.get("entry"), make.get("kwargs"), make.get(keys.TASK)
        offered = [s for s in self.served if _same(s.make_env, entry, kwargs)]
        if not offered:
            served = ", ".join(f"{s.name} ({s.make_env.entry})" for s in self.served)
            raise Refused(
                EnvServerError,
                f"this server serves no env {entry!r:.80} with the arguments {kwargs!r:.200}; it "
                f"serves {served}. Start it with the Eval the run declares",
            )
        if op == VERSIONS:
            return offered[0]
        for served in offered:
            if isinstance(task, str) and task in served.tasks:
                return served
        tasks = sorted(set().union(*(s.tasks for s in offered)))
        names = ", ".join(s.name for s in offered)
        raise Refused(
            EnvServerError, f"{names} has no task {task!r:.80}; its tasks: {listed(tasks, 12)}"
        )


def _same(isolated: Isolated, entry: Any, kwargs: Any) -> bool:
    """Whether a make's entry and arguments are `isolated`'s, as they cross the wire."""
    codec = protocol.Codec()
    try:
        return isolated.entry == entry and codec.pack(dict(isolated.kwargs)) == codec.pack(kwargs)
    except (TypeError, ValueError):  # arguments that cannot even cross: not ours
        return False


def decoded_map(
    frame: memoryview, decode: Callable[[memoryview], Any] | None = None
) -> dict[str, Any]:
    """A client's request frame as its map (by `decode`, default Frames.decoded: all of it);
    Refused when it is no msgpack map with string keys."""
    try:
        message = (decode or Frames.decoded)(frame)
    except Exception as error:  # msgpack's own errors, a bad array layout, bad UTF-8 ...
        raise Refused(
            EnvServerError, f"a request is not an env server frame ({type(error).__name__})"
        ) from None
    if not isinstance(message, dict) or not all(isinstance(key, str) for key in message):
        raise Refused(EnvServerError, "a request is a map with string keys")
    return message


def flat_map(frame: memoryview) -> Any:
    """A hello's map, decoded flat: strings and numbers only, no arrays, tuples or nesting to
    decode before the key is checked (an ext is refused, not decoded)."""
    body, raw = protocol.HEADER.unpack_from(frame)
    if raw:
        raise ValueError("a hello carries no arrays")
    start = protocol.HEADER.size
    return msgpack.unpackb(
        frame[start : start + body],
        raw=False,
        max_ext_len=0,
        max_map_len=HELLO_ENTRIES,
        max_array_len=HELLO_ENTRIES,
        max_str_len=HELLO_BYTES,
        max_bin_len=0,
    )


def request_limit(spaces: dict[str, Any]) -> int:
    """The most bytes a request may hold once an env with `spaces` (Server.spaces) is made: its
    action at 8 bytes an element and REQUEST_HEADROOM for the rest (a reset's options)."""
    return REQUEST_HEADROOM + 8 * elements(spaces.get("action_space")) + 16 * protocol.ALIGN


def elements(space: dict[str, Any] | None) -> int:
    """How many numbers an action of a described space (server.describe_space) holds."""
    if space is None:
        return HANDSHAKE_BYTES  # a kind not described: a generous bound still
    kind = space["kind"]
    if kind == "Box":
        return int(space["low"].size)
    if kind == "MultiDiscrete":
        return int(space["nvec"].size)
    if kind == "MultiBinary":
        return math.prod(n) if isinstance(n := space["n"], tuple | list) else int(n)
    if kind in ("Dict", "Tuple"):
        parts = space["spaces"]
        return sum(elements(part) for part in (parts.values() if kind == "Dict" else parts))
    return 1


def keep_alive(connection: socket.socket) -> None:
    """Probes `connection` when idle and bounds how long a sent answer may go unacknowledged, so
    a client machine that vanished ends its connection (Linux; elsewhere what the system has)."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", KEEPALIVE_EVERY_S),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ("TCP_USER_TIMEOUT", USER_TIMEOUT_S * 1000),
    ):
        if hasattr(socket, name):
            connection.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def installed(isolated: Isolated) -> dict[str, str]:
    """The distributions installed in `isolated`'s interpreter here (Isolated.versions)."""
    try:
        return installed_versions(python_of(isolated.interpreter))
    except (InterpreterMissing, InterpreterUnreadable) as missing:
        raise Refused(EnvServerError, f"on the serving machine: {missing}") from None


class FrameMissing(Exception):
    """The other side ended before a whole frame came (`late`: or it did not come by the
    deadline)."""

    def __init__(self, late: bool = False) -> None:
        super().__init__()
        self.late = late


class Frames:
    """Whole frames read from and sent to a socket or a pipe, into one buffer reused; a socket's
    frames must come by `deadline` (time.monotonic()) while one is set."""

    def __init__(self, connection: socket.socket, deadline: float | None = None) -> None:
        self.connection = connection
        self.deadline = deadline
        self._buffer = bytearray(1 << 16)

    def read(self, source: socket.socket | Any, limit: int | None = None) -> memoryview:
        """The next frame of `source` (a socket, or a pipe's file), header included, valid
        until the next read; Refused, before its body is read, when it holds over `limit` bytes."""
        self._fill(source, 0, protocol.HEADER.size)
        try:
            _, rest = protocol.frame_size(self._buffer, limit or protocol.FRAME_LIMIT)
        except protocol.FrameTooLarge as large:
            raise Refused(EnvServerError, str(large)) from None
        size = protocol.HEADER.size + rest
        if size > len(self._buffer):
            grown = bytearray(size)
            grown[: protocol.HEADER.size] = self._buffer[: protocol.HEADER.size]
            self._buffer = grown
        self._fill(source, protocol.HEADER.size, size)
        return memoryview(self._buffer)[:size]

    def _fill(self, source: socket.socket | Any, start: int, end: int) -> None:
        view = memoryview(self._buffer)
        timed = isinstance(source, socket.socket) and self.deadline is not None
        read = source.recv_into if isinstance(source, socket.socket) else source.readinto
        while start < end:
            if timed:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise FrameMissing(late=True)
                source.settimeout(left)
            try:
                count = read(view[start:end])
            except TimeoutError:
                raise FrameMissing(late=True) from None
            except OSError:
                count = 0
            if not count:
                raise FrameMissing
            start += count
        if timed:
            source.settimeout(None)

    @staticmethod
    def decoded(frame: memoryview) -> dict[str, Any]:
        body, _ = protocol.HEADER.unpack_from(frame)
        return protocol.Codec().unpack(frame[protocol.HEADER.size :], body)

    def send(self, message: dict[str, Any]) -> None:
        self.send_frame(memoryview(protocol.Codec().pack(message)))

    def send_frame(self, frame: memoryview) -> None:
        with contextlib.suppress(OSError):  # the client is gone: nobody to tell
            self.connection.sendall(frame)

    def send_error(self, kind: str, message: str) -> None:
        self.send({"error": {"type": kind, "message": message, "traceback": []}})


class EnvServerProcess:
    """The env server a connection gets, in its Eval's interpreter, started by the connection's
    thread (it ends with that thread, at the latest)."""

    def __init__(self, isolated: Isolated) -> None:
        try:
            self.python = python_of(isolated.interpreter)
        except InterpreterMissing as missing:
            raise Refused(EnvServerError, f"on the serving machine: {missing}") from None
        script = server_script(isolated.modules, isolated.data)
        command = [str(self.python), str(script), isolated.entry]
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                env=owned_env(os.environ),
            )
        except OSError as error:
            raise Refused(EnvServerError, f"cannot start {self.python}: {error}") from None
        self._in_flight = False
        for pipe in (self.process.stdin, self.process.stdout):
            widen(pipe.fileno())
        self._stderr = StderrTail(self.process, echo=True)

    def relay(self, make: memoryview, frames: Frames) -> None:
        """Says hello to the server, hands it the client's `make`, then passes each answer to
        the client and the client's next request (only MADE's, each within the env's request
        limit) to the server until either side ends."""
        hello = memoryview(protocol.Codec().pack({"op": "hello", "protocol": protocol.PROTOCOL}))
        answer = self._answer(hello, "hello", frames)
        if answer is None:
            return
        said = frames.decoded(answer)
        if "error" in said:
            frames.send({"error": said["error"]})
            return
        answer = self._answer(make, "make", frames)
        if answer is None:
            return
        made = frames.decoded(answer)
        limit = request_limit(made["ok"]) if "ok" in made else 0
        frames.send_frame(answer)
        if "ok" not in made:
            return  # the env was not made: nothing else to ask
        connection = frames.connection
        while True:
            try:
                request = frames.read(connection, limit)
                op = op_of(request)
                if op not in MADE:
                    raise Refused(
                        EnvServerError,
                        f"a connection that made its env asks {', '.join(MADE)}; got {op!r:.40}",
                    )
            except FrameMissing:
                return  # the client hung up
            except Refused as refused:
                log(f"refused {peer_of(connection)}: {refused}")
                frames.send_error(refused.kind.__name__, str(refused))
                return
            answer = self._answer(request, op, frames)
            if answer is None:
                return
            frames.send_frame(answer)
            if op == "close":
                return

    def _answer(self, request: memoryview, op: str, frames: Frames) -> memoryview | None:
        """The server's answer to `request`; None when the client went away meanwhile or the
        server ended instead (the client is told)."""
        stdout = self.process.stdout
        self._in_flight = True
        try:
            protocol.write_frame(self.process.stdin.fileno(), [request])
            if not self._answered(frames.connection):
                return None  # the client went away while the env was busy
            answer = frames.read(stdout)
        except (FrameMissing, BrokenPipeError):
            frames.send_error(EnvServerGone.__name__, self._stderr.ended(self.python, op))
            return None
        self._in_flight = False
        return answer

    def _answered(self, connection: socket.socket) -> bool:
        """Waits for the server's answer; False when the client hangs up meanwhile."""
        stdout = self.process.stdout
        watched = [stdout, connection]
        while True:
            ready, _, _ = select.select(watched, [], [])
            if stdout in ready:
                return True
            if self._client_gone(connection):
                return False
            watched = [stdout]  # a request before the answer: it waits in the socket

    @staticmethod
    def _client_gone(connection: socket.socket) -> bool:
        try:  # peeks at the socket's own bytes (a TLS socket's encrypted ones): b"" is its end
            peek = socket.socket.recv(connection, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return peek == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def end(self) -> None:
        """Ends the server: the end of its requests closes its env; killed if it is still busy
        after CLOSE_WAIT_S (or right away when a request is still in flight)."""
        process = self.process
        if self._in_flight:  # nobody waits for its answer
            process.kill()
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def log(line: str) -> None:
    print(f"policybench env serve: {line}", file=sys.stderr, flush=True)


def peer_of(connection: socket.socket) -> str:
    with contextlib.suppress(OSError):
        host, port = connection.getpeername()[:2]
        return f"{host}:{port}"
    return "a closed connection"


def op_of(request: memoryview) -> str:
    """A request frame's op, read from its map alone (its arrays' ext headers left undecoded);
    Refused as decoded_map refuses."""
    return str(decoded_map(request, _map_alone).get("op"))


def _map_alone(request: memoryview) -> Any:
    body, _ = protocol.HEADER.unpack_from(request)
    start = protocol.HEADER.size
    return msgpack.unpackb(request[start : start + body], strict_map_key=False)


class Admission:
    """A connection's place: one of the many short pre-hello places until its hello passes (the
    key checked), then one of the `max_connections` slots; a connection without the key never
    holds a slot, so idle unauthenticated connections cannot keep keyed ones out."""

    def __init__(self, server: RelayServer) -> None:
        self.server = server
        self.held: threading.BoundedSemaphore | None = None

    def wait(self) -> bool:
        """Takes a pre-hello place (False: all taken)."""
        if not self.server.waiting.acquire(blocking=False):
            return False
        self.held = self.server.waiting
        return True

    def admit(self) -> None:
        """Trades the pre-hello place for a slot; Refused when every slot is taken."""
        self.release()
        if not self.server.slots.acquire(blocking=False):
            raise Refused(
                EnvServerError,
                f"this server serves {self.server.max_connections} connections at once, all "
                "open: try again later, or start it with a larger --max-connections",
            )
        self.held = self.server.slots

    def release(self) -> None:
        if self.held is not None:
            self.held.release()
            self.held = None


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        admission = Admission(self.server)
        if not admission.wait():
            log(f"refused {peer_of(self.request)}: {PRE_HELLO_PLACES} connections without hello")
            Frames(self.request).send_error(
                EnvServerError.__name__,
                f"this server has {PRE_HELLO_PLACES} connections waiting for their hello: try "
                "again in a few seconds",
            )
            return
        started = time.monotonic()
        try:
            if _shook_hands(self.request, started + HELLO_TIMEOUT_S):
                self.server.relay.handle(self.request, admission, started)
        finally:
            admission.release()


def _shook_hands(connection: socket.socket, deadline: float) -> bool:
    """A TLS connection's handshake, done by `deadline` (time.monotonic()) however slowly its
    bytes come; True at once for plain TCP."""
    if not isinstance(connection, ssl.SSLSocket):
        return True
    connection.setblocking(False)
    try:
        while True:
            try:
                connection.do_handshake()
                break
            except ssl.SSLWantReadError:
                ready = select.select([connection], [], [], max(0.0, deadline - time.monotonic()))
            except ssl.SSLWantWriteError:
                ready = select.select([], [connection], [], max(0.0, deadline - time.monotonic()))
            if not any(ready):
                raise TimeoutError(f"not done within {HELLO_TIMEOUT_S:g} s")
    except (ssl.SSLError, OSError) as error:  # TimeoutError is an OSError
        log(f"refused {peer_of(connection)}: no TLS handshake ({type(error).__name__}: {error})")
        return False
    connection.setblocking(True)
    return True


class RelayServer(socketserver.ThreadingTCPServer):
    """A thread per connection, each owning that connection's env server process; at most
    `max_connections` whose hello passed are served at once (more are refused), and at most
    PRE_HELLO_PLACES wait for their hello, each for HELLO_TIMEOUT_S at most."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(
        self,
        relay: Relay,
        host: str,
        port: int,
        max_connections: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.relay = relay
        self.tls = tls  # connections wrapped here; their handshakes run in their own threads
        self.max_connections = max_connections
        self.slots = threading.BoundedSemaphore(max_connections)
        self.waiting = threading.BoundedSemaphore(PRE_HELLO_PLACES)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.address_family = family
        super().__init__((host, port), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        if self.tls is not None:  # no handshake here: a client that never sends one holds nothing
            connection = self.tls.wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
        return connection, address
