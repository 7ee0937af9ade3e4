"""Dynamic batching for a served model: requests from many connections that arrive within a short
window are answered by one model call on a worker thread, each answer going back to its asker."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from policybench.policy.base import Chunk, ChunkSource, Model, Observation, SessionContext
from policybench.policy.chunk_player import coded
from policybench.policy.codec import IDENTITY, Codec


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


@dataclass(frozen=True)
class Answer:
    chunk: Chunk
    queue_ms: float
    infer_ms: float
    batch_size: int


class Batcher:
    """Collects requests for up to `max_wait_s` after the first (at most `max_batch`, and never
    waiting for more than `clients`, as each client has one request in flight), answers
    them with one model call on `executor` (one thread: the model's), and scatters the chunks
    back. While a batch runs, the next one gathers. An exception fails only the batch it
    happened in (for a model without `predict_batch`, only the request). The model sees each
    request's env observation through `codec`, and its actions are played back through it."""

    def __init__(
        self,
        model: Model,
        executor: ThreadPoolExecutor,
        max_batch: int = 8,
        max_wait_s: float = 0.002,
        codec: Codec = IDENTITY,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
        self.model = model
        self.codec = codec
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.executor = executor
        self.clients = 0  # connections that may send; a batch waits for no more than these
        self._queue: asyncio.Queue[tuple[Request, asyncio.Future[Answer]]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def submit(self, request: Request) -> Answer:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._serve(self._queue))
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        await self._queue.put((request, future))
        return await future

    async def _serve(self, queue: asyncio.Queue[tuple[Request, asyncio.Future[Answer]]]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            deadline = loop.time() + self.max_wait_s
            while len(batch) < min(self.max_batch, max(self.clients, 1)):
                if not queue.empty():
                    batch.append(queue.get_nowait())
                    continue
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), remaining))
                except TimeoutError:
                    break
            requests = [request for request, _ in batch]
            started = time.perf_counter()
            results = await loop.run_in_executor(self.executor, self._infer, requests)
            infer_ms = (time.perf_counter() - started) * 1e3
            for (request, future), result in zip(batch, results, strict=True):
                if future.done():  # its connection went away while the batch ran
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    queue_ms = (started - request.queued_at) * 1e3
                    future.set_result(Answer(result, queue_ms, infer_ms, len(batch)))

    def _infer(self, requests: list[Request]) -> list[Chunk | BaseException]:
        codec = self.codec
        if isinstance(self.model, BatchedModel):
            try:
                chunks = self.model.predict_batch(
                    [
                        (r.rollout.context, codec.encode(r.obs, r.rollout.context.instruction))
                        for r in requests
                    ]
                )
                if len(chunks) != len(requests):
                    raise ValueError(
                        f"{self.model.name}.predict_batch answered {len(chunks)} chunks for "
                        f"{len(requests)} requests; it must answer one per request, in order"
                    )
                return [
                    Chunk(codec.actions(_checked(chunk).actions), chunk.fps) for chunk in chunks
                ]
            except Exception as error:
                return [error] * len(requests)
        results: list[Chunk | BaseException] = []
        for request in requests:
            try:
                rollout = request.rollout
                if rollout.source is None:
                    rollout.source = coded(self.model.open(rollout.context), codec, rollout.context)
                results.append(_checked(rollout.source(request.obs)))
            except Exception as error:
                results.append(error)
        return results

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _checked(chunk: Any) -> Chunk:
    if not isinstance(chunk, Chunk):
        raise TypeError(f"a model must answer a Chunk, got {type(chunk).__name__}")
    return chunk
