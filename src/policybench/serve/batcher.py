"""Adaptive batching for a served model: a request goes to the model at once unless another
connection is likely to ask within the window; requests that meet are answered by one model call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from policybench.policy.base import (
    Chunk,
    ChunkSource,
    Model,
    Observation,
    SessionContext,
    release,
)
from policybench.policy.chunk_player import coded
from policybench.policy.codec import IDENTITY, Codec
from policybench.serve.model_thread import ModelThread

TURNAROUND_SMOOTHING = 0.25  # weight of a peer's newest answer-to-request gap in its estimates
MIN_SIZE_VARIANCE = 0.1  # of the sizes of the calls seen, for their fixed cost to be fitted


@runtime_checkable
class BatchedModel(Protocol):
    """A Model that can answer many rollouts' observations in one call (a network run on the
    stacked batch). Its chunks depend only on each request's context and observation; a Model
    without `predict_batch` is served one rollout at a time through its `open` sources."""

    def predict_batch(
        self, requests: Sequence[tuple[SessionContext, Observation]]
    ) -> list[Chunk]: ...


@dataclass
class RolloutState:
    """What a server keeps for one rollout: its context and, for an unbatched model, its source
    (opened on the model's thread at the first request)."""

    context: SessionContext
    source: ChunkSource | None = None


@dataclass
class Request:
    rollout: RolloutState
    obs: Observation
    queued_at: float = field(default_factory=time.perf_counter)
    in_model: bool = False  # the model is working on it (set and cleared on the model's thread)

    @functools.cached_property
    def layout(self) -> tuple[Any, ...]:
        """Its observation's keys, shapes and dtypes: only requests of one layout share a
        batched call, so that one client's malformed observation fails its own call alone."""
        return tuple(
            (key, getattr(value, "shape", None), getattr(value, "dtype", type(value)))
            for key, value in self.obs.items()
        )


@dataclass(eq=False)
class _Call:
    """A model call in flight: its call-timeout timer, started once the model begins it."""

    expiry: asyncio.TimerHandle | None = None
    done: bool = False


CALL_HUNG = "model call did not return within"  # how ModelCallHung's message, sent, begins


class ModelCallHung(RuntimeError):
    """A model call ran past the server's call timeout; its message (the error frame its
    requests' clients get) names the limit and the tasks (instructions) of those requests."""


@dataclass(frozen=True)
class Answer:
    chunk: Chunk
    queue_ms: float
    infer_ms: float
    batch_size: int


@dataclass(eq=False)
class Peer:
    """A connection as the batcher sees it: whether it has a request waiting or running, when it
    was last answered, and how long it takes to ask again after an answer, as a smoothed mean
    and mean deviation (as TCP estimates a round trip): a client that asks straight back has a
    short turnaround, a rollout stepping its env between chunks a long one."""

    asking: bool = False
    answered_at: float | None = None
    turnaround_s: float | None = None
    spread_s: float = 0.0

    def asks(self, now: float) -> None:
        if self.answered_at is not None:
            gap = now - self.answered_at
            if self.turnaround_s is None:
                self.turnaround_s = gap
            else:
                deviation = abs(gap - self.turnaround_s)
                self.spread_s += TURNAROUND_SMOOTHING * (deviation - self.spread_s)
                self.turnaround_s += TURNAROUND_SMOOTHING * (gap - self.turnaround_s)
        self.asking = True

    def answered(self, now: float) -> None:
        self.asking, self.answered_at = False, now

    def expected(self, now: float, deadline: float) -> bool:
        """Likely to ask before `deadline`: it is not asking, and its last answer is recent
        enough that it may ask again before the deadline (its usual turnaround less two spreads)
        and not so old that it is late (its usual turnaround plus two spreads: then it is busy
        with something else)."""
        if self.asking or self.answered_at is None or self.turnaround_s is None:
            return False
        due, spread = self.answered_at + self.turnaround_s, 2 * self.spread_s
        return due - spread <= deadline and now <= due + spread


@dataclass
class CallCost:
    """A model call's time as a fixed part and a part per request, fitted to the calls seen by
    least squares, each call's weight decaying by `decay` as newer ones come (so a model that
    warms up or a machine that gets busier is followed)."""

    decay: float = 0.95
    # The decayed sums of 1, size, seconds, size^2 and size * seconds over the calls seen.
    _weight: float = field(default=0.0, init=False)
    _size: float = field(default=0.0, init=False)
    _seconds: float = field(default=0.0, init=False)
    _size2: float = field(default=0.0, init=False)
    _size_seconds: float = field(default=0.0, init=False)

    def add(self, size: int, seconds: float) -> None:
        keep = self.decay
        self._weight = keep * self._weight + 1
        self._size = keep * self._size + size
        self._seconds = keep * self._seconds + seconds
        self._size2 = keep * self._size2 + size * size
        self._size_seconds = keep * self._size_seconds + size * seconds

    def fixed_s(self) -> float | None:
        """The fixed part of a call, or None while the calls seen cannot tell it (too few of
        other sizes than the usual one)."""
        if self._weight == 0:
            return None
        mean_size = self._size / self._weight
        size_variance = self._size2 / self._weight - mean_size**2
        if size_variance < MIN_SIZE_VARIANCE:
            return None
        covariance = self._size_seconds / self._weight - mean_size * self._seconds / self._weight
        return self._seconds / self._weight - covariance / size_variance * mean_size


@dataclass
class BatchCounters:
    """What a Batcher has done: requests received, model calls, requests sent to the model, and
    windows (model calls held back, the model being free, to wait for more requests)."""

    received: int = 0
    batches: int = 0
    requests: int = 0
    windows: int = 0


@dataclass(frozen=True)
class _Waiting:
    peer: Peer
    request: Request
    future: asyncio.Future[Answer]


class Batcher:
    """Answers requests with model calls on `model_thread`, one call at a
    time, each taking the requests waiting (at most `max_batch`). When the model is free, waiting
    requests go at once unless the model has `predict_batch` and another peer is expected to ask
    within the window: then they wait for it. A window runs from when the model became free or
    the first request came, whichever was later, for `max_wait_s`, and no longer than the fixed
    part of a model call once the calls seen tell it: a request that joins a call spares the
    model a call of its own, and the window must not idle the model longer than that call's
    fixed part. A lone client never waits, nor do peers that ask rarely; for a model whose calls
    cost only per request, a window is no longer than a call's own overhead (the hand-off to the
    model's thread and back).

    An exception fails only the request that caused it (a batch that raises is retried request
    by request); a call that runs past `call_timeout_s` fails the requests the model is working
    on with ModelCallHung. The model sees each request's env observation through `codec`, and
    its actions are played back through it. Used from one event loop."""

    def __init__(
        self,
        model: Model,
        model_thread: ModelThread,
        max_batch: int = 8,
        max_wait_s: float = 0.002,
        codec: Codec = IDENTITY,
        call_timeout_s: float | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
        self.model = model
        self.codec = codec
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.model_thread = model_thread
        self.call_timeout_s = call_timeout_s
        self.counters = BatchCounters()
        self.call_cost = CallCost()
        self._batched = isinstance(model, BatchedModel)  # only then can waiting pay off
        self._peers: set[Peer] = set()
        self._waiting: list[_Waiting] = []
        self._running = False
        self._free_since = 0.0  # when the model last finished a call
        self._window: asyncio.TimerHandle | None = None

    def connect(self) -> Peer:
        peer = Peer()
        self._peers.add(peer)
        return peer

    def disconnect(self, peer: Peer) -> None:
        self._peers.discard(peer)
        self._consider()  # a window may have been waiting for it

    async def submit(self, peer: Peer, request: Request) -> Answer:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        peer.asks(request.queued_at)
        self.counters.received += 1
        self._waiting.append(_Waiting(peer, request, future))
        self._consider()
        return await future

    def _consider(self) -> None:
        """Starts a model call if the model is free and requests wait, unless a window is due."""
        if self._running or not self._waiting:
            return
        if self._batched and len(self._waiting) < self.max_batch:
            # A window opens when the model is free and a request waits, whichever comes last.
            now = time.perf_counter()
            opened = max(self._waiting[0].request.queued_at, self._free_since)
            deadline = opened + self._window_s()
            if now < deadline and any(peer.expected(now, deadline) for peer in self._peers):
                if self._window is None:
                    self.counters.windows += 1
                    loop = asyncio.get_running_loop()
                    self._window = loop.call_later(deadline - now, self._dispatch)
                return
        self._dispatch()

    def _window_s(self) -> float:
        fixed_s = self.call_cost.fixed_s()
        return self.max_wait_s if fixed_s is None else min(self.max_wait_s, max(0.0, fixed_s))

    def _dispatch(self) -> None:
        if self._window is not None:
            self._window.cancel()
            self._window = None
        if self._running or not self._waiting:
            return
        batch = self._take()
        self._running = True
        self.counters.batches += 1
        self.counters.requests += len(batch)
        requests = [waiting.request for waiting in batch]
        started = time.perf_counter()
        call = _Call()
        loop = asyncio.get_running_loop()
        begun = None
        if self.call_timeout_s is not None:  # the timeout counts from when the model begins
            begun = functools.partial(loop.call_soon_threadsafe, self._arm, call, batch)
        try:
            running = self.model_thread.call(infer, self.model, self.codec, requests, begun)
        except RuntimeError as error:  # the model thread is shut down: the server is closing
            running = loop.create_future()
            running.set_exception(error)
        running.add_done_callback(functools.partial(self._finish, batch, started, call))

    def _take(self) -> list[_Waiting]:
        """The next call's requests: the first waiting and, for a batched model, those of its
        observation layout after it, up to max_batch."""
        waiting = self._waiting
        if not self._batched:
            batch, self._waiting = waiting[: self.max_batch], waiting[self.max_batch :]
            return batch
        layout = waiting[0].request.layout
        batch, rest = [], []
        for each in waiting:
            fits = len(batch) < self.max_batch and each.request.layout == layout
            (batch if fits else rest).append(each)
        self._waiting = rest
        return batch

    def _arm(self, call: _Call, batch: list[_Waiting]) -> None:
        if not call.done:
            call.expiry = asyncio.get_running_loop().call_later(
                self.call_timeout_s, self._expire, batch
            )

    def _expire(self, batch: list[_Waiting]) -> None:
        """The call runs past the timeout: the requests the model is working on fail with
        ModelCallHung; the others of the call, not begun or done, wait on with the model's
        thread (a server meeting ModelCallHung exits, so their clients run them elsewhere)."""
        hung = [waiting for waiting in batch if waiting.request.in_model] or batch
        tasks = sorted({waiting.request.rollout.context.instruction for waiting in hung})
        error = ModelCallHung(
            f"{CALL_HUNG} {self.call_timeout_s:g} s (the server's call "
            f"timeout) on task {', '.join(map(repr, tasks))}"
        )
        for waiting in hung:
            if not waiting.future.done():
                waiting.future.set_exception(error)

    def _finish(
        self,
        batch: list[_Waiting],
        started: float,
        call: _Call,
        running: asyncio.Future,
    ) -> None:
        call.done = True
        if call.expiry is not None:
            call.expiry.cancel()
        self._running = False
        now = self._free_since = time.perf_counter()
        call_s = now - started
        if running.cancelled():  # the server is closing
            for waiting in batch:
                waiting.future.cancel()
            return
        error = running.exception()  # the model thread was shut down
        results = running.result() if error is None else [error] * len(batch)
        if not any(isinstance(result, BaseException) for result in results):
            self.call_cost.add(len(batch), call_s)
        for waiting, result in zip(batch, results, strict=True):
            waiting.peer.answered(now)
            future = waiting.future
            if future.done():  # cancelled: the server is closing
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                queue_ms = (started - waiting.request.queued_at) * 1e3
                future.set_result(Answer(result, queue_ms, call_s * 1e3, len(batch)))
        self._consider()

    def release(self, rollouts: Iterable[RolloutState]) -> None:
        """Closes the sources of rollouts that ended (their connection closed) on the model's
        thread, after the calls queued before."""
        for rollout in rollouts:
            if rollout.source is not None:
                with contextlib.suppress(RuntimeError):  # the model's thread is shut down
                    self.model_thread.call(_release, rollout.source)

    def close(self) -> None:
        """Cancels the requests still waiting; a running model call finishes on its thread."""
        if self._window is not None:
            self._window.cancel()
            self._window = None
        for waiting in self._waiting:
            waiting.future.cancel()
        self._waiting = []


def infer(
    model: Model,
    codec: Codec,
    requests: Sequence[Request],
    begun: Callable[[], Any] | None = None,
) -> list[Chunk | Exception]:
    """Each request's chunk, or the exception that took its place: one `predict_batch` call for
    them all if the model has one (if it raises, each request alone again: an exception fails
    only the request that caused it), else each rollout's own source, opened at its first
    request (an exception fails only that request); a request with a non-finite observation is
    refused before the model sees it. The model sees each
    env observation through `codec`; its actions come back through it. `begun` is called as the
    model begins."""
    if begun is not None:
        begun()
    refused = {id(r): why for r in requests if (why := _refusal(r)) is not None}
    # What isinstance(model, BatchedModel) checks, without its cost at every call (tens of us).
    if hasattr(model, "predict_batch"):
        valid = [r for r in requests if id(r) not in refused]
        answered = dict(zip(map(id, valid), _batched(model, codec, valid), strict=True))
        return [refused.get(id(r)) or answered[id(r)] for r in requests]
    results: list[Chunk | Exception] = []
    for request in requests:
        if id(request) in refused:
            results.append(refused[id(request)])
            continue
        request.in_model = True
        try:
            rollout = request.rollout
            if rollout.source is None:
                rollout.source = coded(model.open(rollout.context), codec, rollout.context)
            results.append(_checked(rollout.source(request.obs)))
        except Exception as error:
            results.append(error)
        finally:
            request.in_model = False
    return results


def _batched(model: Any, codec: Codec, requests: Sequence[Request]) -> list[Chunk | Exception]:
    """One `predict_batch` call for `requests`; if it raises, each request again alone, so that
    what one request makes the model raise fails that request only, not the others batched
    with it."""
    if not requests:
        return []
    for request in requests:
        request.in_model = True
    try:
        chunks = model.predict_batch(
            [
                (r.rollout.context, codec.encode(r.obs, r.rollout.context.instruction))
                for r in requests
            ]
        )
        if len(chunks) != len(requests):
            raise ValueError(
                f"{model.name}.predict_batch answered {len(chunks)} chunks for "
                f"{len(requests)} requests; it must answer one per request, in order"
            )
        return [Chunk(codec.actions(_checked(chunk).actions), chunk.fps) for chunk in chunks]
    except Exception as error:
        if len(requests) == 1:
            return [error]
    finally:
        for request in requests:
            request.in_model = False
    return [answer for request in requests for answer in _batched(model, codec, [request])]


def _refusal(request: Request) -> Exception | None:
    """Why a request is refused before the model sees it (None: it is not): an observation
    holding NaN or inf, which no model can act on and a batch would share."""
    for name, value in request.obs.items():
        array = np.asarray(value) if not isinstance(value, str | bytes) else None
        if array is not None and array.dtype.kind in "fc" and not np.isfinite(array).all():
            return ValueError(
                f"observation {name!r} holds NaN or inf; send finite numbers (the env's "
                "observation, or the codec that made it, is broken)"
            )
    return None


def _release(source: ChunkSource) -> None:
    """Calls a source's `close()`. Its rollout's record is written by the client by then, so
    what it raises can only be said here, in the server's output."""
    try:
        release(source)
    except Exception as error:
        print(
            f"policybench serve: a rollout's close() raised {type(error).__name__}: {error}",
            file=sys.stderr,
            flush=True,
        )


def _checked(chunk: Any) -> Chunk:
    if not isinstance(chunk, Chunk):
        raise TypeError(f"a model must answer a Chunk, got {type(chunk).__name__}")
    return chunk
