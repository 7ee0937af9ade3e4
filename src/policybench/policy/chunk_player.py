"""The bottom session: asks a model for a chunk, plays it waypoint by waypoint in simulated time,
asks again when it drains or at its execution horizon, with at most one call in flight."""

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
from policybench.policy.latency import NO_LATENCY, InferenceLatency, LatencyMode


class ChunkAnchor(StrEnum):
    """Where a chunk's first waypoint sits in time.

    OBSERVATION: at the observation it was computed from; waypoints that are already past when
    it arrives are dropped (as real-time chunking does). ARRIVAL: at the moment it arrives.
    Either way, at each call the latest waypoint due is played and earlier ones are dropped.
    """

    OBSERVATION = "observation"
    ARRIVAL = "arrival"


class ChunkPlayer:
    """Plays one rollout's chunks in simulated time.

    A new chunk is asked for when the current one drains, or `execute_steps` control steps after
    the previous call (the real-time chunking paper's execution horizon s: from one call to the
    next, the d steps of delay included), never while a call is in flight. A call costs the
    `latency` in simulated time, during which the current chunk keeps playing; a profile's draws
    come from `draws` (seed it per rollout). A call whose delay d exceeds the horizon (a drawn or
    measured latency; a fixed one must fit) is waited for: the current chunk plays on (once it
    is played out, the Eval's hold), the late chunk plays from its arrival (anchored as usual)
    and the next call is asked for then, so that cycle's horizon is d. In a run with latency
    each request also carries the delay d in steps and the actions of the current chunk still
    to play (keys.INFERENCE_DELAY, keys.ACTION_PREFIX). `warm_start`: the first chunk is
    computed before the clock starts (not charged) and the first charged call is made at once
    from the same observation, as the paper's simulated evaluation does.
    """

    def __init__(
        self,
        source: ChunkSource,
        *,
        execute_steps: int | None = None,
        latency: InferenceLatency = NO_LATENCY,
        anchor: ChunkAnchor = ChunkAnchor.OBSERVATION,
        period_ns: int | None = None,
        draws: np.random.Generator | None = None,
        warm_start: bool = False,
        wall_clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if execute_steps is not None and execute_steps < 1:
            raise ValueError(f"execute_steps must be >= 1 or None, got {execute_steps}")
        if period_ns is None and (
            execute_steps is not None or latency.mode is LatencyMode.STEPS or warm_start
        ):
            raise ValueError(
                "execute_steps, warm_start and a latency in steps count control periods: give "
                "the ChunkPlayer the control period (period_ns)"
            )
        self._delay_steps = None if period_ns is None else latency.least_steps(period_ns)
        check_execute_steps(execute_steps, self._delay_steps)
        self._source = source
        self._execute_steps = execute_steps
        self._latency = latency
        self._anchor = anchor
        self._period_ns = period_ns
        self._draws = np.random.default_rng(0) if draws is None else draws
        self._warm_start = warm_start
        self._tells = latency.charged and period_ns is not None
        self._wall_clock_ns = wall_clock_ns
        self._waypoints: deque[tuple[int, np.ndarray]] = deque()
        self._pending: tuple[ModelCall, Chunk] | None = None
        self._last_asked_ns: int | None = None
        self._measured_steps = 0  # a measured latency's last delay: the next call's estimate
        self.calls: list[ModelCall] = []

    def __call__(self, obs: Observation, time_ns: int) -> Step:
        pending = self._pending
        if pending is not None and pending[0].arrives_ns <= time_ns:
            self._load(*pending)
        if self._pending is None and self._asks(time_ns):
            self._ask(obs, time_ns)
            if self._warm_start and len(self.calls) == 1:
                self._ask(obs, time_ns)
        return Step(self._play_due(time_ns), self._next_call_ns(time_ns))

    def close(self) -> None:
        """Ends the rollout's source (a served model's connection closes)."""
        release(self._source)

    def _asks(self, time_ns: int) -> bool:
        self._drop_past(time_ns)
        if not self._waypoints:
            return True
        ask_at = self._ask_at()
        return ask_at is not None and ask_at <= time_ns

    def _ask_at(self) -> int | None:
        """When the execution horizon asks for the next chunk (None: when this one drains)."""
        if self._execute_steps is None or self._last_asked_ns is None:
            return None
        assert self._period_ns is not None
        return self._last_asked_ns + self._execute_steps * self._period_ns

    def _ask(self, obs: Observation, time_ns: int) -> None:
        free = self._warm_start and not self.calls
        planned = 0 if free else self._latency.planned_ns(self._period_ns or 0, self._draws)
        request = self._told(obs, 0 if free else planned) if self._tells else obs
        started = self._wall_clock_ns()
        chunk = self._source(request)
        wall_ns = self._wall_clock_ns() - started
        if not isinstance(chunk, Chunk):
            raise TypeError(f"a model must answer a Chunk, got {type(chunk).__name__}")
        charged = wall_ns if planned is None else planned
        if planned is None and self._period_ns:
            self._measured_steps = -(-wall_ns // self._period_ns)
        self._check_horizon(len(chunk.actions))
        arrives_ns = time_ns + charged
        call = ModelCall(time_ns, arrives_ns, len(chunk.actions), wall_ns, charged=not free)
        self.calls.append(call)
        self._last_asked_ns = time_ns
        if arrives_ns <= time_ns:
            self._load(call, chunk)
        else:
            self._pending = (call, chunk)

    def _told(self, obs: Observation, planned_ns: int | None) -> Observation:
        """`obs` with what the call cannot change: its delay in steps, and the actions of the
        current chunk that will go on playing (the first `delay` of them for certain)."""
        assert self._period_ns is not None
        period = self._period_ns
        delay = self._measured_steps if planned_ns is None else -(-planned_ns // period)
        left = [action for _, action in self._waypoints]
        prefix = np.stack(left) if left else np.zeros((0, 0))
        return {**obs, keys.INFERENCE_DELAY: np.int64(delay), keys.ACTION_PREFIX: prefix}

    def _check_horizon(self, horizon: int) -> None:
        problem = horizon_problem(self._execute_steps, self._delay_steps, horizon)
        if problem is not None:
            raise ValueError(problem)

    def _load(self, call: ModelCall, chunk: Chunk) -> None:
        anchor_ns = call.asked_ns if self._anchor is ChunkAnchor.OBSERVATION else call.arrives_ns
        actions = chunk.actions
        if len(actions) == 1:  # the common per-step model: no timestamps to compute
            self._waypoints = deque(((anchor_ns, actions[0]),))
        else:
            period = self._period_ns
            if period is None or round(1e9 / chunk.fps) != period:
                period = 1e9 / chunk.fps  # a chunk at its own rate
            self._waypoints = deque(
                [(anchor_ns + round(k * period), action) for k, action in enumerate(actions)]
            )
        self._pending = None

    def _drop_past(self, time_ns: int) -> None:
        waypoints = self._waypoints
        while len(waypoints) > 1 and waypoints[1][0] <= time_ns:
            waypoints.popleft()

    def _play_due(self, time_ns: int) -> np.ndarray | None:
        self._drop_past(time_ns)
        waypoints = self._waypoints
        if waypoints and waypoints[0][0] <= time_ns:
            return waypoints.popleft()[1]
        return None

    def _next_call_ns(self, time_ns: int) -> int:
        """The next waypoint's time, the pending chunk's arrival or the execution horizon's next
        call, whichever is first; the next tick when there is none (the chunk drained)."""
        wake = self._waypoints[0][0] if self._waypoints else None
        if self._pending is not None:
            arrives_ns = self._pending[0].arrives_ns
            wake = arrives_ns if wake is None else min(wake, arrives_ns)
        elif wake is not None:
            ask_at = self._ask_at()
            if ask_at is not None:
                wake = min(wake, ask_at)
        return time_ns + 1 if wake is None or wake <= time_ns else wake


def valid_execute_steps(horizon: int, delay: int) -> str:
    """The execution horizons a chunk of `horizon` actions allows at a delay of `delay` steps."""
    low, high = max(1, delay), horizon - delay
    return f"{low}..{high}" if low <= high else "none"


def horizon_problem(execute_steps: int | None, delay: int | None, horizon: int) -> str | None:
    """Why chunks of `horizon` actions cannot be played at `execute_steps` under a fixed delay
    of `delay` steps (None: they can). Without delay a horizon past the chunk's end just means
    "when it is played out"; with one, the chunk would run dry before the next arrives."""
    if execute_steps is None or not delay or execute_steps + delay <= horizon:
        return None
    return (
        f"execute_steps s={execute_steps} with a delay of d={delay} steps needs chunks of at "
        f"least s + d = {execute_steps + delay} actions, but the model answered {horizon}: "
        f"valid s lie in [max(1, d), H - d] = {valid_execute_steps(horizon, delay)}; "
        "lower --execute-steps or the delay"
    )


def play_problem(
    execute_steps: int | None, latency: InferenceLatency, period_ns: int, horizon: int
) -> str | None:
    """Why a ChunkPlayer at `execute_steps` under `latency` cannot play chunks of `horizon`
    actions at a control period of `period_ns` (None: it can), as its first chunk would find."""
    delay = latency.least_steps(period_ns)
    try:
        check_execute_steps(execute_steps, delay)
    except ValueError as error:
        return str(error)
    return horizon_problem(execute_steps, delay, horizon)


def late_share(execute_steps: int | None, latency: InferenceLatency, period_ns: int) -> float:
    """The share of a latency profile's draws whose delay exceeds the execution horizon (more
    than `execute_steps` control periods): calls the next call waits for (0 for any other
    latency, whose delay is fixed and checked, or measured and unknown in advance)."""
    if execute_steps is None or latency.profile is None:
        return 0.0
    return latency.profile.share_above_s(execute_steps * period_ns / 1e9)


def check_execute_steps(execute_steps: int | None, delay: int | None) -> None:
    """ValueError when the execution horizon is shorter than a fixed delay (it must be at least
    max(1, d): a call cannot be asked for before the one in flight arrives)."""
    if execute_steps is not None and delay is not None and execute_steps < max(1, delay):
        raise ValueError(
            f"--execute-steps {execute_steps} is shorter than the delay of {delay} control steps "
            f"each call costs; the execution horizon s counts from one call to the next, the "
            f"delay included, so it takes at least max(1, d) = {max(1, delay)}"
        )


@dataclass(frozen=True)
class ChunkPolicy:
    """A Policy over a Model: every session is a ChunkPlayer over the model's chunks, the model
    seeing each observation through `codec` and its actions played back through it. `seed` is
    the run's seed: with a session's `draws_key` it seeds the rollout's latency draws."""

    model: Model
    codec: Codec = IDENTITY
    execute_steps: int | None = None
    latency: InferenceLatency = NO_LATENCY
    anchor: ChunkAnchor = ChunkAnchor.OBSERVATION
    seed: int = 0
    warm_start: bool = False

    @property
    def name(self) -> str:
        return self.model.name

    def new_session(self, context: SessionContext) -> ChunkPlayer:
        return ChunkPlayer(
            coded(self.model.open(context.for_model()), self.codec, context),
            execute_steps=self.execute_steps,
            latency=self.latency,
            anchor=self.anchor,
            period_ns=context.control_period_ns,
            draws=rollout_draws(self.seed, context),
            warm_start=self.warm_start,
        )

    def describe(self) -> dict[str, Any]:
        return {
            **self.model.describe(),
            **(self.codec.describe() if self.codec.steps else {}),
            **played(self.execute_steps, self.latency, self.anchor, self.warm_start),
        }


def played(
    execute_steps: int | None,
    latency: InferenceLatency,
    anchor: ChunkAnchor,
    warm_start: bool = False,
) -> dict[str, Any]:
    """How a ChunkPlayer plays a model, as a policy's description records it (a latency
    profile's digest and a warm start only where they are used)."""
    described: dict[str, Any] = {
        keys.EXECUTE_STEPS: execute_steps,
        keys.INFERENCE_LATENCY: str(latency),
        keys.CHUNK_ANCHOR: anchor.value,
    }
    if latency.profile_digest is not None:
        described[keys.LATENCY_PROFILE] = latency.profile_digest
    if warm_start:
        described[keys.WARM_START] = True
    return described


def rollout_draws(seed: int, context: SessionContext) -> np.random.Generator:
    """The latency draws of one rollout: seeded by the run's seed and the rollout's draws key
    (its Eval and scene), so a scene gets the same draws at any -n, in any order."""
    entropy = [abs(seed)]
    if context.draws_key:
        entropy.append(int(context.draws_key, 16))
    return np.random.default_rng(np.random.SeedSequence(entropy))


def coded(source: ChunkSource, codec: Codec, context: SessionContext) -> ChunkSource:
    """`source` seen through `codec`: it gets encoded observations, its chunks play decoded."""
    return _Coded(source, codec, context.instruction) if codec.steps else source


TOLD = (keys.INFERENCE_DELAY, keys.ACTION_PREFIX)


class _Coded:
    """A source behind a codec. What a request is told (delay, prefix) passes the codec by: the
    prefix goes back to the model as the tail of the chunk the model itself answered."""

    def __init__(self, source: ChunkSource, codec: Codec, instruction: str) -> None:
        self.source, self.codec, self.instruction = source, codec, instruction
        self._answered: np.ndarray | None = None

    def __call__(self, obs: Observation) -> Chunk:
        if TOLD[0] in obs:
            bare = {name: value for name, value in obs.items() if name not in TOLD}
            left = len(obs[keys.ACTION_PREFIX])
            answered = self._answered
            prefix = (
                obs[keys.ACTION_PREFIX] if answered is None else answered[len(answered) - left :]
            )
            encoded = {
                **self.codec.encode(bare, self.instruction),
                keys.INFERENCE_DELAY: obs[keys.INFERENCE_DELAY],
                keys.ACTION_PREFIX: prefix,
            }
        else:
            encoded = self.codec.encode(obs, self.instruction)
        chunk = self.source(encoded)
        if not isinstance(chunk, Chunk):
            raise TypeError(f"a model must answer a Chunk, got {type(chunk).__name__}")
        self._answered = chunk.actions
        return Chunk(self.codec.actions(chunk.actions), chunk.fps)

    def close(self) -> None:
        release(self.source)
