"""The bottom session: asks a model for a chunk, plays it waypoint by waypoint in simulated time,
asks again when it drains or every `replan_every` waypoints, with at most one call in flight."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import (
    Chunk,
    ChunkSource,
    Model,
    ModelCall,
    Observation,
    SessionContext,
    Step,
    release,
)
from policybench.policy.codec import IDENTITY, Codec
from policybench.policy.latency import NO_LATENCY, InferenceLatency


class ChunkAnchor(StrEnum):
    """Where a chunk's first waypoint sits in time.

    OBSERVATION: at the observation it was computed from; waypoints that are already past when
    it arrives are dropped (as real-time chunking does). ARRIVAL: at the moment it arrives.
    Either way, at each call the latest waypoint due is played and earlier ones are dropped.
    """

    OBSERVATION = "observation"
    ARRIVAL = "arrival"


class ChunkPlayer:
    def __init__(
        self,
        source: ChunkSource,
        *,
        replan_every: int | None = None,
        latency: InferenceLatency = NO_LATENCY,
        anchor: ChunkAnchor = ChunkAnchor.OBSERVATION,
        wall_clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if replan_every is not None and replan_every < 1:
            raise ValueError(f"replan_every must be >= 1 or None, got {replan_every}")
        self._source = source
        self._replan_every = replan_every
        self._latency = latency
        self._anchor = anchor
        self._wall_clock_ns = wall_clock_ns
        self._waypoints: deque[tuple[int, np.ndarray]] = deque()
        self._pending: tuple[ModelCall, Chunk] | None = None
        self._played_of_chunk = 0
        self.calls: list[ModelCall] = []

    def __call__(self, obs: Observation, time_ns: int) -> Step:
        pending = self._pending
        if pending is not None and pending[0].arrives_ns <= time_ns:
            self._load(*pending)
        if self._pending is None and (
            not self._waypoints
            or (self._replan_every is not None and self._played_of_chunk >= self._replan_every)
        ):
            self._ask(obs, time_ns)
        return Step(self._play_due(time_ns), self._next_call_ns(time_ns))

    def close(self) -> None:
        """Ends the rollout's source (a served model's connection closes)."""
        release(self._source)

    def _ask(self, obs: Observation, time_ns: int) -> None:
        started = self._wall_clock_ns()
        chunk = self._source(obs)
        wall_ns = self._wall_clock_ns() - started
        if not isinstance(chunk, Chunk):
            raise TypeError(f"a model must answer a Chunk, got {type(chunk).__name__}")
        arrives_ns = time_ns + self._latency.charge_ns(wall_ns)
        call = ModelCall(time_ns, arrives_ns, len(chunk.actions), wall_ns)
        self.calls.append(call)
        if arrives_ns <= time_ns:
            self._load(call, chunk)
        else:
            self._pending = (call, chunk)

    def _load(self, call: ModelCall, chunk: Chunk) -> None:
        anchor_ns = call.asked_ns if self._anchor is ChunkAnchor.OBSERVATION else call.arrives_ns
        actions = chunk.actions
        if len(actions) == 1:  # the common per-step model: no timestamps to compute
            self._waypoints = deque(((anchor_ns, actions[0]),))
        else:
            period_ns = 1e9 / chunk.fps
            self._waypoints = deque(
                [(anchor_ns + round(k * period_ns), action) for k, action in enumerate(actions)]
            )
        self._pending = None
        self._played_of_chunk = 0

    def _play_due(self, time_ns: int) -> np.ndarray | None:
        waypoints = self._waypoints
        while len(waypoints) > 1 and waypoints[1][0] <= time_ns:
            waypoints.popleft()
        if waypoints and waypoints[0][0] <= time_ns:
            self._played_of_chunk += 1
            return waypoints.popleft()[1]
        return None

    def _next_call_ns(self, time_ns: int) -> int:
        """The next waypoint's time or the pending chunk's arrival, whichever is first; the next
        tick when there is neither (the chunk drained: ask again)."""
        wake = self._waypoints[0][0] if self._waypoints else None
        if self._pending is not None:
            arrives_ns = self._pending[0].arrives_ns
            wake = arrives_ns if wake is None else min(wake, arrives_ns)
        return time_ns + 1 if wake is None or wake <= time_ns else wake


@dataclass(frozen=True)
class ChunkPolicy:
    """A Policy over a Model: every session is a ChunkPlayer over the model's chunks, the model
    seeing each observation through `codec` and its actions played back through it."""

    model: Model
    codec: Codec = IDENTITY
    replan_every: int | None = None
    latency: InferenceLatency = NO_LATENCY
    anchor: ChunkAnchor = ChunkAnchor.OBSERVATION

    @property
    def name(self) -> str:
        return self.model.name

    def new_session(self, context: SessionContext) -> ChunkPlayer:
        return ChunkPlayer(
            coded(self.model.open(context), self.codec, context),
            replan_every=self.replan_every,
            latency=self.latency,
            anchor=self.anchor,
        )

    def describe(self) -> dict[str, Any]:
        codec = self.codec.describe() if self.codec.steps else {}
        return {
            **self.model.describe(),
            **codec,
            "replan_every": self.replan_every,
            keys.INFERENCE_LATENCY: str(self.latency),
            keys.CHUNK_ANCHOR: self.anchor.value,
        }


def coded(source: ChunkSource, codec: Codec, context: SessionContext) -> ChunkSource:
    """`source` seen through `codec`: it gets encoded observations, its chunks play decoded."""
    return _Coded(source, codec, context.instruction) if codec.steps else source


@dataclass(frozen=True)
class _Coded:
    source: ChunkSource
    codec: Codec
    instruction: str

    def __call__(self, obs: Observation) -> Chunk:
        chunk = self.source(self.codec.encode(obs, self.instruction))
        if not isinstance(chunk, Chunk):
            raise TypeError(f"a model must answer a Chunk, got {type(chunk).__name__}")
        return Chunk(self.codec.actions(chunk.actions), chunk.fps)

    def close(self) -> None:
        release(self.source)
