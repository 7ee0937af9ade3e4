"""An openpi-protocol websocket server over any policybench Model, batching requests across
connections (`policybench serve`). openpi's own client works against it unchanged.

Per-rollout state: a client may name its rollout's context in the `X-Policybench-Context`
header (policybench's client does, and opens one connection per rollout); otherwise each
(connection, prompt) pair is one rollout, opened at its first observation, as openpi's clients
expect. The scene never reaches the server: only observations and the instruction do.
Observation arrays reach the model read-only, as views of the frame's decoded bytes (as openpi's
own server hands them): a model copies what it means to change.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import json
import math
import os
import ssl
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import websockets
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response

from policybench import keys
from policybench.policy.base import Model, Observation, SessionContext
from policybench.policy.codec import IDENTITY, NATIVE, Codec
from policybench.policy.contract import CONTRACT, actions_only, contract_of
from policybench.serve import event_loop
from policybench.serve.batcher import (
    BatchCounters,
    Batcher,
    ModelCallHung,
    Peer,
    Request,
    RolloutState,
)
from policybench.serve.model_thread import ModelThread
from policybench.serve.wire import (
    ACTIONS,
    DEFAULT_MAX_FRAME_BYTES,
    SERVER_TIMING,
    WireError,
    packb,
    unpackb,
)
from policybench.tls import capped_handshakes

EVAL_HEADER = "X-Policybench-Eval"  # the Eval's name
EVAL_REF_HEADER = "X-Policybench-Eval-Ref"  # where it is declared, `module:attribute`
CODEC_HEADER = "X-Policybench-Codec"  # the convention observations come in (default: openpi)
CONTEXT_HEADER = "X-Policybench-Context"  # JSON: instruction, control_hz, fields
DEFAULT_CODEC = "openpi"
HEALTH_PATH = "/healthz"
SERVED_MODEL = "model"  # the metadata entry describing the model a connection is answered by
MAX_PROMPT_CHARS = 4096  # an instruction longer than this is refused
MAX_CONTROL_HZ = 10_000.0  # a context's control rate above this is no robot's
ROLLOUTS_PER_CONNECTION = 8  # an openpi client's rollouts kept per connection (one per prompt)
SERVED_CACHE = 64  # (Eval name, reference) pairs whose served model is looked up without a call
OFF_LOOP_BYTES = 1 << 18  # a frame this large or larger is decoded off the event loop ...
DECODERS = 2  # ... on one of these threads: at most this many large frames decode at once
# Frames a connection may have waiting beyond the one answered (websockets' default is 16: with
# 64 MiB frames, a client that sends without reading would have a GiB held for it).
FRAMES_QUEUED = 1
TLS_HANDSHAKE_TIMEOUT_S = 5.0  # how long a TLS handshake may take (asyncio's default: 60 s)
TLS_HANDSHAKES = 64  # TLS handshakes under way at once; one more fails at once


@dataclass(frozen=True)
class ServedModel:
    """A model as served for one Eval: the control rate it runs at, the codecs its clients may
    send observations in (decoded to env observations), and the codec the model itself sees
    env observations through."""

    model: Model
    control_hz: float
    codecs: Mapping[str, Codec] = field(default_factory=dict)
    model_codec: Codec = IDENTITY

    def codec(self, name: str) -> Codec:
        if name == NATIVE.name:
            return NATIVE
        if name not in self.codecs:
            known = sorted({NATIVE.name, *self.codecs})
            raise LookupError(f"this server knows no codec {name!r} for its model; known: {known}")
        return self.codecs[name]


ModelFor = Callable[[str | None, str | None], ServedModel]
"""(Eval name, Eval reference) from a client's headers -> the model that serves it. Called on
the model thread, so it may build models and envs."""


def fixed_model(
    model: Model,
    control_hz: float,
    codecs: Mapping[str, Codec] = {},
    model_codec: Codec = IDENTITY,
) -> ModelFor:
    """Serves one model to every client whatever Eval it names (for scripts and benchmarks)."""
    served = ServedModel(model, control_hz, {DEFAULT_CODEC: NATIVE, **codecs}, model_codec)
    return lambda name, ref: served


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 8
    max_wait_ms: float = 2.0
    api_key: str | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    call_timeout_s: float | None = None  # a model call that runs longer hangs the server
    max_connections: int = 256  # more are answered 503 (a client waits and tries again)
    tls: ssl.SSLContext | None = None  # serve wss:// (policybench.tls)


class PolicyServer:
    """Answers each connection's observations with its model's actions, batched by a Batcher."""

    def __init__(self, model_for: ModelFor, config: ServerConfig, name: str = "policy") -> None:
        self._model_for = model_for
        self._served: collections.OrderedDict[tuple[str | None, str | None], ServedModel]
        self._served = collections.OrderedDict()  # the last SERVED_CACHE looked up
        self._connections = 0
        self.config = config
        self.name = name
        self._batchers: dict[int, Batcher] = {}
        # One thread runs every model call and build, off the event loop; large frames are
        # decoded on DECODERS threads of their own, so one never holds up the loop's others.
        self._model_thread = ModelThread()
        self._decoders = ThreadPoolExecutor(DECODERS, thread_name_prefix="decode")
        self._hung: asyncio.Future[str] | None = None  # why the model thread is stuck
        self.metadata = {
            "server": "policybench",
            keys.POLICY: name,
            "max_batch": config.max_batch,
            "max_wait_ms": config.max_wait_ms,
        }

    async def start(self) -> Server:
        config = self.config
        # A client that never finishes its TLS handshake holds its place this long at most, and
        # at most TLS_HANDSHAKES of them are under way at once.
        handshake = {"ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S} if config.tls else {}
        if config.tls is not None:
            capped_handshakes(config.tls, TLS_HANDSHAKES, TLS_HANDSHAKE_TIMEOUT_S)
        return await serve(
            self._handle,
            config.host,
            config.port,
            **handshake,
            compression=None,
            max_size=config.max_frame_bytes,
            max_queue=FRAMES_QUEUED,
            process_request=self._check_request,
            ssl=config.tls,
        )

    def _check_request(self, connection: ServerConnection, request: HttpRequest) -> Response | None:
        if request.path.split("?")[0] == HEALTH_PATH:
            return connection.respond(HTTPStatus.OK, "OK\n")
        if self._connections >= self.config.max_connections:
            return connection.respond(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"this server serves {self.config.max_connections} connections at once, all "
                "open: try again shortly\n",
            )
        key = self.config.api_key
        if key is not None:
            given = request.headers.get_all("Authorization")
            if len(given) > 1:
                return connection.respond(
                    HTTPStatus.UNAUTHORIZED,
                    f"{len(given)} Authorization headers: send one, 'Authorization: Api-Key "
                    "<key>' (a URL's user:password@ sends a second; policybench's client sends "
                    "only the key when it has one)\n",
                )
            if not hmac.compare_digest(
                "".join(given).encode(errors="replace"), f"Api-Key {key}".encode()
            ):
                return connection.respond(
                    HTTPStatus.UNAUTHORIZED,
                    "missing or wrong API key: send the header 'Authorization: Api-Key <key>'\n",
                )
        return None

    async def _handle(self, connection: ServerConnection) -> None:
        self._connections += 1
        try:
            await self._serve_connection(connection)
        finally:
            self._connections -= 1

    async def _serve_connection(self, connection: ServerConnection) -> None:
        try:
            served, codec, context = await self._bind(connection)
            # The model's own description (checkpoint, weights) goes into each record.
            metadata = {**self.metadata, SERVED_MODEL: served_description(served)}
            declared = contract_of(served.model)
            if declared is not None and served.model_codec.steps:
                # The model sees observations through a codec of the server's (a LeRobot
                # checkpoint, in LeRobot's names): its cameras and state are that codec's
                # business; a client can judge its actions' conventions alone.
                declared = actions_only(declared)
            if declared is not None:  # what the model follows, for a client to check
                metadata[CONTRACT] = declared.as_json()
        except Exception as error:
            await _fail(connection, f"cannot serve this connection: {error}", 1008)
            return
        batcher = self._batcher_for(served)
        peer = batcher.connect()
        rollouts: dict[str, RolloutState] = {}  # the connection's rollouts, by prompt
        try:
            # A client that goes away (a worker ending, a killed process) ends this quietly.
            with contextlib.suppress(websockets.ConnectionClosed):
                await connection.send(packb(metadata))
                await self._answer_each(connection, batcher, peer, served, codec, context, rollouts)
        finally:
            batcher.disconnect(peer)
            batcher.release(rollouts.values())

    async def _answer_each(
        self,
        connection: ServerConnection,
        batcher: Batcher,
        peer: Peer,
        served: ServedModel,
        codec: Codec,
        context: SessionContext | None,
        rollouts: dict[str, RolloutState],
    ) -> None:
        previous_total_ms: float | None = None
        async for frame in connection:
            started = time.perf_counter()
            if isinstance(frame, str):
                await _fail(connection, "expected a binary msgpack frame, got a text frame", 1003)
                return
            try:
                obs, prompt = await self._decoded(frame, codec)
            except Exception as error:
                await _fail(connection, f"bad observation frame: {error}", 1007)
                return
            if len(prompt) > MAX_PROMPT_CHARS:
                await _fail(
                    connection,
                    f"bad observation frame: a prompt of {len(prompt)} characters; at most "
                    f"{MAX_PROMPT_CHARS}",
                    1007,
                )
                return
            rollout = self._rollout(rollouts, context or prompt, served, batcher)
            try:
                answer = await batcher.submit(peer, Request(rollout, obs))
            except ModelCallHung as hung:
                await _fail(connection, str(hung), 1011)
                self._hung_by(str(hung))
                return
            except Exception as error:  # the model's: its traceback is the server's to show
                traceback.print_exc()
                await _fail(connection, one_line(error), 1011)
                return
            timing = {
                "infer_ms": answer.infer_ms,
                "queue_ms": answer.queue_ms,
                "batch_size": answer.batch_size,
            }
            if previous_total_ms is not None:
                timing["prev_total_ms"] = previous_total_ms
            await connection.send(packb({ACTIONS: answer.chunk.actions, SERVER_TIMING: timing}))
            previous_total_ms = (time.perf_counter() - started) * 1e3

    async def _decoded(self, frame: bytes, codec: Codec) -> tuple[Observation, str]:
        """The frame's observation and prompt: decoded on the loop when small, on a decoding
        thread when OFF_LOOP_BYTES or more (its budget bounds how long it takes either way)."""

        def decode() -> tuple[Observation, str]:
            return codec.decode(_as_map(unpackb(frame, None, writable=False)))

        if len(frame) < OFF_LOOP_BYTES:
            return decode()
        return await asyncio.get_running_loop().run_in_executor(self._decoders, decode)

    @staticmethod
    def _rollout(
        rollouts: dict[str, RolloutState],
        given: SessionContext | str,
        served: ServedModel,
        batcher: Batcher,
    ) -> RolloutState:
        """The connection's rollout for a request: the one its context header names, else the
        one of its prompt, opened at its first request; past ROLLOUTS_PER_CONNECTION prompts,
        the oldest is ended."""
        if isinstance(given, SessionContext):
            return rollouts.setdefault("", RolloutState(given))
        rollout = rollouts.pop(given, None) or RolloutState(
            SessionContext(given, served.control_hz)
        )
        rollouts[given] = rollout  # the latest last
        if len(rollouts) > ROLLOUTS_PER_CONNECTION:
            oldest = next(iter(rollouts))
            batcher.release([rollouts.pop(oldest)])
        return rollout

    async def _bind(
        self, connection: ServerConnection
    ) -> tuple[ServedModel, Codec, SessionContext | None]:
        headers = connection.request.headers
        name, ref = headers.get(EVAL_HEADER), headers.get(EVAL_REF_HEADER)
        served = self._served.get((name, ref))
        if served is None:
            served = await self._model_thread.call(self._model_for, name, ref)
            self._served[(name, ref)] = served
            if len(self._served) > SERVED_CACHE:
                self._served.popitem(last=False)
        else:
            self._served.move_to_end((name, ref))
        codec = served.codec(headers.get(CODEC_HEADER, DEFAULT_CODEC))
        context = headers.get(CONTEXT_HEADER)
        return served, codec, None if context is None else context_from_json(context)

    def _hung_by(self, reason: str) -> None:
        hung = self.hung()
        if not hung.done():
            hung.set_result(reason)

    def hung(self) -> asyncio.Future[str]:
        """Done, with the reason, once a model call ran past the call timeout: the model's
        thread is stuck, so the server can answer nothing more and should exit."""
        if self._hung is None:
            self._hung = asyncio.get_running_loop().create_future()
        return self._hung

    def _batcher_for(self, served: ServedModel) -> Batcher:
        batcher = self._batchers.get(id(served.model))
        if batcher is None:
            batcher = Batcher(
                served.model,
                self._model_thread,
                self.config.max_batch,
                self.config.max_wait_ms / 1e3,
                served.model_codec,
                self.config.call_timeout_s,
            )
            self._batchers[id(served.model)] = batcher
        return batcher

    def batch_counters(self) -> BatchCounters:
        """What this server's batchers have done, all models together."""
        counters = [batcher.counters for batcher in self._batchers.values()]
        return BatchCounters(
            received=sum(c.received for c in counters),
            batches=sum(c.batches for c in counters),
            requests=sum(c.requests for c in counters),
            windows=sum(c.windows for c in counters),
        )

    async def close(self) -> None:
        for batcher in self._batchers.values():
            batcher.close()
        self._model_thread.shutdown()
        self._decoders.shutdown(wait=False, cancel_futures=True)


def served_description(served: ServedModel) -> dict[str, Any]:
    """The served model's own description (checkpoint, weights) and the codec it sees through,
    as every client is sent it: an absolute path in it (a checkpoint's) shortened to its last
    two parts, which name the checkpoint without telling clients the server's file system (its
    weights' digest identifies it)."""
    codec = served.model_codec.describe() if served.model_codec.steps else {}
    return {
        name: _without_location(value)
        for name, value in {**served.model.describe(), **codec}.items()
    }


def _without_location(value: Any) -> Any:
    if isinstance(value, str) and os.path.isabs(value):
        return "/".join(Path(value).parts[-2:])
    return value


def one_line(error: BaseException) -> str:
    """What a client is told of an error: its type and the first line of its message."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0] if message else ''}"[:1000]


def _as_map(message: Any) -> Mapping[str, Any]:
    if not isinstance(message, Mapping) or not all(isinstance(k, str) for k in message):
        raise WireError(f"an observation must be a map with string keys, got {type(message)}")
    return message


async def _fail(connection: ServerConnection, text: str, code: int) -> None:
    """openpi's error convention: the message as a text frame, then close."""
    try:
        await connection.send(text)
        await connection.close(code=code, reason=text.strip().splitlines()[-1][:120])
    except websockets.ConnectionClosed:
        pass


def context_to_json(context: SessionContext) -> str:
    payload = {
        keys.INSTRUCTION: context.instruction,
        keys.CONTROL_HZ: context.control_hz,
        "fields": dict(context.fields),
    }
    return json.dumps(payload)


def context_from_json(text: str) -> SessionContext:
    try:
        payload = json.loads(text)
        context = SessionContext(
            str(payload[keys.INSTRUCTION]),
            float(payload[keys.CONTROL_HZ]),
            dict(payload["fields"]),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"header {CONTEXT_HEADER} must be JSON with instruction, control_hz and fields; "
            f"got {text[:200]!r} ({error})"
        ) from None
    if not (math.isfinite(context.control_hz) and 0 < context.control_hz <= MAX_CONTROL_HZ):
        raise ValueError(
            f"header {CONTEXT_HEADER}: control_hz must be a rate in (0, {MAX_CONTROL_HZ:g}] Hz, "
            f"got {context.control_hz!r}"
        )
    if len(context.instruction) > MAX_PROMPT_CHARS:
        raise ValueError(
            f"header {CONTEXT_HEADER}: an instruction of {len(context.instruction)} characters; "
            f"at most {MAX_PROMPT_CHARS}"
        )
    return context


class ServerThread:
    """A PolicyServer on its own event loop in a background thread (tests, benchmarks, scripts).
    Use as a context manager; `url` is set once it listens (port 0 picks a free port)."""

    def __init__(self, server: PolicyServer) -> None:
        self.server = server
        self.url = ""
        self._loop = event_loop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._listening: Server | None = None

    def __enter__(self) -> ServerThread:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self.server.start(), self._loop)
        self._listening = future.result(timeout=30)
        host, port = self._listening.sockets[0].getsockname()[:2]
        self.url = f"{'wss' if self.server.config.tls else 'ws'}://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._listening is not None:
            listening, self._listening = self._listening, None
            listening.close()
            asyncio.run_coroutine_threadsafe(listening.wait_closed(), self._loop).result(30)
            asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
