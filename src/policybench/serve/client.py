"""A Model served over openpi's websocket protocol (an openpi server, or `policybench serve`).

It sends the observations it is given as they are: a ChunkPolicy's codec has already put them in
the server's convention, whose name travels in a header. Each rollout opens its own connection,
reads the server's metadata frame, then sends one observation per model call. A receive timeout
closes the connection, so a late answer can never be paired with the next observation; the next
rollout connects afresh.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

import websockets
from websockets.sync.client import ClientConnection, connect

from policybench import keys
from policybench.policy.base import (
    CallHung,
    Chunk,
    ChunkSource,
    InfrastructureError,
    Observation,
    SessionContext,
)
from policybench.policy.codec import NATIVE
from policybench.policy.contract import CONTRACT
from policybench.serve.batcher import CALL_HUNG
from policybench.serve.server import (
    CODEC_HEADER,
    CONTEXT_HEADER,
    EVAL_HEADER,
    EVAL_REF_HEADER,
    SERVED_MODEL,
    context_to_json,
)
from policybench.serve.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    SERVER_TIMING,
    actions_of,
    packb,
    unpackb,
)

# websockets >= 17 asks to be told that a connection is used without a `with` block.
_DIRECT = {"legacy": True} if int(websockets.__version__.split(".")[0]) >= 17 else {}
DEFAULT_URL = "ws://localhost:8000"
CLOSE_TIMEOUT_S = 2.0  # the longest a closing handshake may take
HOW_TO_SERVE = "start one with `policybench serve --policy=NAME --port PORT`"
# The longest pause between two tries to reach a server: a refused connect costs nothing, and a
# rollout waiting for a restarted server starts again within this of its return.
MAX_BACKOFF_S = 0.5
LOG = logging.getLogger("policybench.serve")


class RemotePolicyError(RuntimeError):
    """The server answered an error (openpi's text frame); the message is the server's."""


class RemoteCallHung(RemotePolicyError, CallHung):
    """The server gave up on the model call this rollout's observation was in (its call
    timeout): this rollout's error, not the next one's."""


class RemoteUnavailable(ConnectionError):
    """The server could not be used: it could not be reached, refused the connection, or
    dropped it."""


class RemoteDown(RemoteUnavailable, InfrastructureError):
    """Nothing answered at the URL, or the server went away mid-rollout: a rollout may be run
    again once it is back."""


class RemoteTimeout(InfrastructureError, TimeoutError):
    """The server did not answer within the receive timeout."""


class RemoteGone(RemoteUnavailable):
    """The server is gone for good (the run that started it gave it up): no rollout waits for
    it, and none is run again for it."""


T = TypeVar("T")  # what a connection attempt gives: a connection, and what came on it


class _Unreachable(Exception):
    """Nothing answered at the URL (yet): a server that is down, starting or restarting."""


@dataclass(frozen=True)
class Endpoint:
    """Where a policy is served and how long to wait for it."""

    url: str = DEFAULT_URL
    api_key: str | None = None
    infer_timeout_s: float = 300.0
    connect_timeout_s: float = 10.0
    server_wait_s: float = 0.0  # how long to wait for an unreachable server to come (back)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES

    @property
    def shown(self) -> str:
        """The URL as messages and records show it: a user:password in it hidden."""
        return without_secrets(self.url)

    def __post_init__(self) -> None:
        if not self.url.startswith(("ws://", "wss://")):
            raise ValueError(f"a policy URL must start with ws:// or wss://, got {self.url!r}")
        if not self.infer_timeout_s > 0:
            raise ValueError(f"the inference timeout must be > 0 s, got {self.infer_timeout_s}")
        if not self.server_wait_s >= 0:
            raise ValueError(f"the server wait must be >= 0 s, got {self.server_wait_s}")


class RemoteModel:
    """A Model whose chunks come from a server. `codec` names the convention its observations
    are in (an Eval's `openpi` codec for an openpi server; NATIVE for `policybench serve`); the
    Eval's name and reference tell a policybench server which model to answer with."""

    def __init__(
        self,
        endpoint: Endpoint,
        codec: str = NATIVE.name,
        eval_name: str | None = None,
        eval_ref: str | None = None,
        name: str = "openpi",
        shared: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.codec = codec
        self.name = name
        self.metadata: dict[str, Any] | None = None
        self._shared = shared  # the run's own shared server, on a port that changes every run
        self._eval_headers = {EVAL_HEADER: eval_name, EVAL_REF_HEADER: eval_ref}

    def open(self, context: SessionContext) -> ChunkSource:
        """The rollout's own connection to the server (closed when its session ends): rollouts
        run side by side each hold one."""
        return _Connection(self._connect(context), self.endpoint, context.control_hz)

    def _connect(self, context: SessionContext) -> ClientConnection:
        endpoint = self.endpoint
        headers = {name: value for name, value in self._eval_headers.items() if value}
        headers[CODEC_HEADER] = self.codec
        headers[CONTEXT_HEADER] = context_to_json(context)
        url = endpoint.url
        if endpoint.api_key:
            # One Authorization header: the key's; a URL's user:password would add a second.
            headers["Authorization"] = f"Api-Key {endpoint.api_key}"
            url = without_userinfo(url)
        connection, first = _OUTAGES.wait_for(endpoint, lambda: self._greeted(url, headers))
        if isinstance(first, str):
            connection.close()
            raise RemotePolicyError(_server_error(endpoint.shown, first))
        self.metadata = unpackb(first, endpoint.max_frame_bytes)
        return connection

    def _greeted(self, url: str, headers: dict[str, str]) -> tuple[ClientConnection, Any]:
        """A connection and the first frame it brought (the metadata, or an error's text). The
        run's own server that accepts and then sends nothing is restarting (it exits when a
        model call hangs, and its successor takes the port): waited for as an outage, so the
        rollouts that meet one restart count it once."""
        endpoint = self.endpoint
        connection = self._open(url, headers)
        try:
            return connection, connection.recv(timeout=endpoint.infer_timeout_s)
        except (TimeoutError, websockets.ConnectionClosed) as error:
            connection.close()
            said = f"sent no metadata frame after connecting ({type(error).__name__}: {error})"
            if self._shared:
                raise _Unreachable(said) from None
            raise RemoteDown(
                f"policy server {endpoint.shown} {said}; is it an openpi-protocol server?"
            ) from None

    def _open(self, url: str, headers: dict[str, str]) -> ClientConnection:
        endpoint = self.endpoint
        try:
            return connect(
                url,
                additional_headers=headers,
                compression=None,
                max_size=endpoint.max_frame_bytes,
                open_timeout=endpoint.connect_timeout_s,
                proxy=None,
                close_timeout=CLOSE_TIMEOUT_S,
                **_DIRECT,
            )
        except websockets.InvalidStatus as refused:
            status = refused.response.status_code
            if status == HTTPStatus.SERVICE_UNAVAILABLE:
                # A server closing (a run's own server exiting to be restarted) turns new
                # connections away with 503 until its port is free: an outage, not a refusal.
                raise _Unreachable(
                    f"HTTP 503: {refused.response.body.decode(errors='replace').strip()}"
                ) from None
            hint = "pass the right key with --policy-api-key" if status == 401 else HOW_TO_SERVE
            raise RemoteUnavailable(
                f"policy server {endpoint.shown} refused the connection (HTTP {status}: "
                f"{refused.response.body.decode(errors='replace').strip()}); {hint}"
            ) from None
        except (
            OSError,
            TimeoutError,
            websockets.InvalidHandshake,
            websockets.ConnectionClosed,  # a server going away mid-handshake
        ) as error:
            raise _Unreachable(f"{type(error).__name__}: {error}") from None

    @property
    def contract(self) -> Mapping[str, Any] | None:
        """The action contract the server's metadata declares (read once connected), if any."""
        declared = (self.metadata or {}).get(CONTRACT)
        return declared if isinstance(declared, Mapping) else None

    def describe(self) -> dict[str, Any]:
        """Name and where it is served; once connected to a policybench server, also the served
        model's own description."""
        served = (self.metadata or {}).get(SERVED_MODEL)
        where = {"served": "shared"} if self._shared else {"url": self.endpoint.shown}
        return {
            keys.POLICY_NAME: self.name,
            **where,
            **({SERVED_MODEL: served} if isinstance(served, dict) else {}),
        }


class _Connection:
    """One rollout's connection: sends each observation, answers the server's chunk."""

    def __init__(self, connection: ClientConnection, endpoint: Endpoint, fps: float) -> None:
        self._connection, self._endpoint, self._fps = connection, endpoint, fps
        # What the server said of the last answer's timing (openpi's `server_timing`), if it did.
        self.server_timing: dict[str, Any] | None = None

    def __call__(self, obs: Observation) -> Chunk:
        connection, endpoint = self._connection, self._endpoint
        frame = packb(obs)
        try:
            connection.send(frame)
            answer = connection.recv(timeout=endpoint.infer_timeout_s)
        except TimeoutError:
            _drop(connection)
            raise RemoteTimeout(
                f"policy server {endpoint.shown} did not answer within "
                f"{endpoint.infer_timeout_s:g} s (--infer-timeout); the connection was closed "
                "and the next rollout reconnects"
            ) from None
        except websockets.ConnectionClosed as closed:
            raise RemoteDown(
                f"policy server {endpoint.shown} dropped the connection mid-rollout ({closed}); "
                "the next rollout reconnects"
            ) from None
        if isinstance(answer, str):
            _drop(connection)
            hung = answer.startswith(CALL_HUNG)
            error = RemoteCallHung if hung else RemotePolicyError
            raise error(_server_error(endpoint.shown, answer))
        reply = unpackb(answer, endpoint.max_frame_bytes)
        timing = reply.get(SERVER_TIMING) if isinstance(reply, dict) else None
        self.server_timing = timing if isinstance(timing, dict) else None
        return Chunk(actions_of(reply), self._fps)

    def close(self) -> None:
        self._connection.close()


class Outages:
    """Waits for unreachable servers, with backoff, up to the endpoint's `server_wait_s`; says
    so once per outage (not once per rollout) and when the server is back. Once a wait has run
    its full length for a URL, later waits for it try once and fail at once with the same
    reason, until a try reaches it; with `share_in(directory)` that holds for every process
    sharing the directory (a run's workers), so a run waits out one --server-wait, not one per
    worker. Each wait runs inside `paused()`, so a clock bounding a rollout's wall time (a hang
    watchdog) can stand still while a server is awaited."""

    def __init__(self) -> None:
        self._down_since: dict[str, float] = {}
        self._absent: dict[str, str] = {}  # URL -> why the last full wait for it gave up
        self._gone: dict[str, Callable[[], str | None]] = {}  # URL -> why it is gone, if it is
        self._shared: Path | None = None  # where processes of one run tell each other of absences
        self.paused: Callable[[], contextlib.AbstractContextManager[object]] = (
            contextlib.nullcontext
        )

    def wait_for(self, endpoint: Endpoint, connect_once: Callable[[], T]) -> T:
        url = endpoint.url
        try:
            connection = connect_once()
        except _Unreachable as error:
            self._raise_if_gone(url)
            absent = self._absent.get(url) or self._absent_elsewhere(url)
            if absent is not None:
                raise RemoteDown(absent) from None
            with self.paused():
                connection = self._wait(endpoint, connect_once, error)
        self._absent.pop(url, None)
        if self._shared is not None:
            with contextlib.suppress(OSError):
                self._absence_file(url).unlink(missing_ok=True)
        down_since = self._down_since.pop(url, None)
        if down_since is not None:
            LOG.warning(
                "policy server %s reachable again after %.1f s",
                endpoint.shown,
                time.monotonic() - down_since,
            )
        return connection

    def _wait(
        self,
        endpoint: Endpoint,
        connect_once: Callable[[], T],
        error: _Unreachable,
    ) -> T:
        url, wait_s, started, delay = endpoint.url, endpoint.server_wait_s, time.monotonic(), 0.1
        if url not in self._down_since:
            self._down_since[url] = started
            LOG.warning(
                "policy server %s unreachable (%s); waiting up to %g s for it",
                endpoint.shown,
                error,
                wait_s,
            )
        while (waited := time.monotonic() - started) < wait_s:
            time.sleep(min(delay, wait_s - waited))
            delay = min(delay * 2, MAX_BACKOFF_S)
            try:
                return connect_once()
            except _Unreachable as again:
                error = again
                self._raise_if_gone(url)
        self._absent[url] = (
            f"cannot reach a policy server at {endpoint.shown} after {waited:.0f} s (--server-wait "
            f"{wait_s:g}; last try: {error}); {HOW_TO_SERVE}, or point --policy-url at a "
            "running one"
        )
        if self._shared is not None:
            with contextlib.suppress(OSError):
                self._absence_file(url).write_text(self._absent[url])
        raise RemoteDown(self._absent[url])

    def share_in(self, directory: Path) -> None:
        """Tells the other processes using `directory` when a full wait for a URL gave up, and
        takes their word for it."""
        self._shared = directory

    def _absence_file(self, url: str) -> Path:
        assert self._shared is not None
        return self._shared / f"unreachable-{zlib.crc32(url.encode()):08x}.txt"

    def _absent_elsewhere(self, url: str) -> str | None:
        if self._shared is None:
            return None
        try:
            return self._absence_file(url).read_text() or None
        except OSError:
            return None

    def give_up_when(self, url: str, why_gone: Callable[[], str | None]) -> None:
        """Ends every wait for `url` at once, with RemoteGone, when `why_gone()` says why its
        server is gone for good (the run that owns it gave it up)."""
        self._gone[url] = why_gone

    def _raise_if_gone(self, url: str) -> None:
        why_gone = self._gone.get(url)
        why = None if why_gone is None else why_gone()
        if why is not None:
            raise RemoteGone(
                f"policy server {without_secrets(url)} is gone for good: {why}"
            ) from None


_OUTAGES = Outages()  # one per process: an outage is logged once, whichever rollout meets it
give_up_waiting_when = _OUTAGES.give_up_when  # for every wait of this process
share_outages_in = _OUTAGES.share_in  # with the other processes of a run


def pause_while_waiting(paused: Callable[[], contextlib.AbstractContextManager[object]]) -> None:
    """Runs every wait of this process for an unreachable server inside `paused()`."""
    _OUTAGES.paused = paused


def _drop(connection: ClientConnection) -> None:
    """Closes a connection now, without waiting for a close handshake a hung server would not
    answer: nothing it sends later can be read as the answer to another observation."""
    with contextlib.suppress(OSError):
        connection.socket.shutdown(socket.SHUT_RDWR)
    connection.close()


# The user:password a URL may carry (ws://user:password@host), its query (?token=...), and what
# is shown instead of each secret.
USERINFO, HIDDEN = re.compile(r"(wss?://)[^/@\s]+@"), "***"
QUERY = re.compile(r"(wss?://[^\s'\"?#]*\?)([^\s'\"#]*)")


def without_secrets(text: str) -> str:
    """`text` with the secrets of every ws:// or wss:// URL in it shown as ***: its
    user:password, and the value of each parameter of its query (a token passed as
    `?token=...`), whose names stay."""
    return QUERY.sub(_hide_query, USERINFO.sub(rf"\1{HIDDEN}@", text))


def _hide_query(match: re.Match[str]) -> str:
    def hidden(parameter: str) -> str:
        name, equals, _ = parameter.partition("=")
        return f"{name}={HIDDEN}" if equals else (parameter and HIDDEN)

    return match[1] + "&".join(map(hidden, match[2].split("&")))


def without_userinfo(url: str) -> str:
    """`url` with no user:password in it."""
    return USERINFO.sub(r"\1", url, count=1)


def _server_error(url: str, text: str) -> str:
    lines = text.strip().splitlines() or ["(empty message)"]
    said = f"policy server {url} answered an error: {lines[-1]}"
    return said if len(lines) == 1 else f"{said}\n{text.rstrip()}"  # then its traceback
