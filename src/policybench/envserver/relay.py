"""`policybench env serve`: isolated Evals' envs served over TCP, for runs on other machines
(`--env-url`). Each connection, once its key and protocol are checked, gets an env server of its
own in its Eval's interpreter, and the relay passes frames between the socket and its pipes."""

from __future__ import annotations

import contextlib
import hmac
import os
import select
import socket
import socketserver
import subprocess
import sys
from collections.abc import Iterable
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

READY = "policybench env serve: serving"  # the line a starter waits for; the URL follows
HANDSHAKE_BYTES = 1 << 16  # the most a frame may hold before its key is checked
HANDSHAKE_TIMEOUT_S = 30.0  # how long a connection may take to send its hello and make


@dataclass(frozen=True)
class Served:
    """An Eval whose env a connection may ask for: its name and its isolated make_env."""

    name: str
    make_env: Isolated


def served_of(evals: Iterable[Eval]) -> list[Served]:
    """The isolated ones of `evals`; refused when there is none."""
    evals = list(evals)
    served = [Served(e.name, e.make_env) for e in evals if isinstance(e.make_env, Isolated)]
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
    """Serves `served` to connections that give `api_key` (None: to any)."""

    def __init__(self, served: list[Served], api_key: str | None) -> None:
        self.served = served
        self.api_key = api_key

    def handle(self, connection: socket.socket) -> None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frames = Frames(connection)
        connection.settimeout(HANDSHAKE_TIMEOUT_S)  # a silent client ends as FrameMissing
        try:
            self._check_hello(frames.decoded(frames.read(connection, HANDSHAKE_BYTES)))
            frames.send({"ok": {"protocol": protocol.PROTOCOL}})
            make = memoryview(bytes(frames.read(connection)))  # kept past the next read
            request = frames.decoded(make)
            chosen = self._chosen(request)
            if request.get("op") == VERSIONS:
                frames.send({"ok": installed(chosen.make_env)})
                return
            child = EnvServerProcess(chosen.make_env)
        except Refused as refused:
            log(f"refused {peer_of(connection)}: {refused}")
            frames.send_error(refused.kind.__name__, str(refused))
            return
        except FrameMissing:
            return
        log(f"{peer_of(connection)}: {chosen.name}'s env in env server {child.process.pid}")
        connection.settimeout(None)
        try:
            child.relay(make, frames)
        finally:
            child.end()

    def _check_hello(self, hello: dict[str, Any]) -> None:
        if hello.get("op") != "hello":
            raise Refused(EnvServerError, "a connection's first request is hello")
        given = hello.get(keys.ENV_API_KEY) or ""
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
                f"the proxy speaks env server protocol {hello.get('protocol')}, this server "
                f"{protocol.PROTOCOL}: both must come from the same policybench",
            )

    def _chosen(self, make: dict[str, Any]) -> Served:
        if make.get("op") not in ("make", VERSIONS):
            raise Refused(EnvServerError, f"a connection's second request is make or {VERSIONS}")
        entry, kwargs = make.get("entry"), make.get("kwargs")
        codec = protocol.Codec()
        for served in self.served:
            isolated = served.make_env
            if isolated.entry == entry and codec.pack(dict(isolated.kwargs)) == codec.pack(kwargs):
                return served
        offered = ", ".join(f"{s.name} ({s.make_env.entry})" for s in self.served)
        raise Refused(
            EnvServerError,
            f"this server serves no env {entry} with the arguments {kwargs!r}; it serves "
            f"{offered}. Start it with the Eval the run declares",
        )


def installed(isolated: Isolated) -> dict[str, str]:
    """The distributions installed in `isolated`'s interpreter here (Isolated.versions)."""
    try:
        return installed_versions(python_of(isolated.interpreter))
    except (InterpreterMissing, InterpreterUnreadable) as missing:
        raise Refused(EnvServerError, f"on the serving machine: {missing}") from None


class FrameMissing(Exception):
    """The other side ended before a whole frame came."""


class Frames:
    """Whole frames read from and sent to a socket or a pipe, into one buffer reused."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self._buffer = bytearray(1 << 16)

    def read(self, source: socket.socket | Any, limit: int | None = None) -> memoryview:
        """The next frame of `source` (a socket, or a pipe's file), header included, valid
        until the next read."""
        self._fill(source, 0, protocol.HEADER.size)
        body, raw = protocol.HEADER.unpack_from(self._buffer)
        size = protocol.HEADER.size + protocol._aligned(body) + raw
        if limit is not None and size > limit:
            raise Refused(EnvServerError, f"a first frame holds at most {limit} bytes")
        if size > len(self._buffer):
            grown = bytearray(size)
            grown[: protocol.HEADER.size] = self._buffer[: protocol.HEADER.size]
            self._buffer = grown
        self._fill(source, protocol.HEADER.size, size)
        return memoryview(self._buffer)[:size]

    def _fill(self, source: socket.socket | Any, start: int, end: int) -> None:
        view = memoryview(self._buffer)
        read = source.recv_into if isinstance(source, socket.socket) else source.readinto
        while start < end:
            try:
                count = read(view[start:end])
            except OSError:
                count = 0
            if not count:
                raise FrameMissing
            start += count

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
        command = [str(self.python), str(server_script(isolated.modules))]
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
        the client and the client's next request to the server until either side ends."""
        connection = frames.connection
        hello = memoryview(protocol.Codec().pack({"op": "hello", "protocol": protocol.PROTOCOL}))
        if not self._passed(hello, "hello", frames, to_client=False):
            return
        request = make
        while self._passed(request, op_of(request), frames):
            try:
                request = frames.read(connection)
            except FrameMissing:
                return  # the client hung up

    def _passed(self, request: memoryview, op: str, frames: Frames, to_client: bool = True) -> bool:
        """Whether the server answered `request` (the answer sent on to the client, or, for our
        own hello, checked here); the client is told when the server ended instead."""
        stdout = self.process.stdout
        self._in_flight = True
        try:
            protocol.write_frame(self.process.stdin.fileno(), [request])
            if not self._answered(frames.connection):
                return False  # the client went away while the env was busy
            answer = frames.read(stdout)
        except (FrameMissing, BrokenPipeError):
            frames.send_error(EnvServerGone.__name__, self._stderr.ended(self.python, op))
            return False
        self._in_flight = False
        if to_client:
            frames.send_frame(answer)
            return op != "close"
        decoded = frames.decoded(answer)
        if "error" in decoded:
            frames.send({"error": decoded["error"]})
            return False
        return True

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
        try:
            return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
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
    """A request frame's op, read from its map alone (its arrays' ext headers left undecoded)."""
    body, _ = protocol.HEADER.unpack_from(request)
    start = protocol.HEADER.size
    return str(msgpack.unpackb(request[start : start + body], strict_map_key=False).get("op"))


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.server.relay.handle(self.request)


class RelayServer(socketserver.ThreadingTCPServer):
    """A thread per connection, each owning that connection's env server process."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, relay: Relay, host: str, port: int) -> None:
        self.relay = relay
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.address_family = family
        super().__init__((host, port), _Handler)
