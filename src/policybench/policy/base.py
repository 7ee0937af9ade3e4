"""The policy contract: a Policy opens a Session per rollout; a Session answers what to command
now and when to be called next. A Model predicts action Chunks and knows nothing of time."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import numpy as np

Observation = Mapping[str, np.ndarray]
ContextValue = int | float | str


class InfrastructureError(Exception):
    """A fault of what serves a policy (a server unreachable, gone or too slow to answer), not
    of the policy or the env: a rollout that ends in one may be run again from its start."""


class CallHung(Exception):
    """A model call did not return within its limit: the rollout that made it ends in this error
    (not run again: the model would hang again), and it says nothing of the model's contract."""


@dataclass(frozen=True)
class SessionContext:
    """All a policy learns about a rollout besides its observations.

    `fields` holds only the scene fields an Eval declares policy-facing; the scene itself never
    reaches a policy. `draws_key` (a digest of the rollout's Eval and scene) seeds the session's
    latency draws, so a scene gets the same draws in any run order; a model never sees it (see
    `for_model`).
    """

    instruction: str
    control_hz: float
    fields: Mapping[str, ContextValue] = field(default_factory=dict)
    draws_key: str = ""

    def for_model(self) -> SessionContext:
        """What a model is told of its rollout: all but the session's own `draws_key`."""
        return replace(self, draws_key="") if self.draws_key else self

    @property
    def control_period_ns(self) -> int:
        """The control period the harness steps the clock by (an Eval's `control_period_ns`)."""
        return control_period_ns(self.control_hz)


def control_period_ns(control_hz: float) -> int:
    """One control period in whole nanoseconds: the simulated clock's step."""
    return round(1e9 / control_hz)


class Step(NamedTuple):
    """A session's answer: the command for now (None: nothing new) and when to call it next."""

    commands: np.ndarray | None
    resume_at_ns: int


@dataclass(frozen=True)
class EndEpisode:
    """A session's answer when it ends the rollout itself."""

    reason: str


class ModelCall(NamedTuple):
    """One model call: when it was asked and its answer arrived (sim time), how many actions
    it held, how long the call took in real time, and whether its latency was charged (not so
    for a warm start's first chunk, computed before the clock starts)."""

    asked_ns: int
    arrives_ns: int
    horizon: int
    wall_ns: int
    charged: bool = True


class Session(Protocol):
    """Answers what to command at `time_ns`, and accounts for every model call it made in
    `calls` (empty for a session that calls no model): the Episode records them. A session
    that wraps another passes its inner session's calls on.

    A session that holds something for its rollout (a server connection) lets it go in a
    `close()` method, which the harness calls once when the rollout ends, however it ends (see
    `release`); a session that holds nothing needs none."""

    calls: Sequence[ModelCall]

    def __call__(self, obs: Observation, time_ns: int) -> Step | EndEpisode: ...


class Policy(Protocol):
    """Something that can run rollouts. Knows nothing of pytest or envs."""

    name: str

    def new_session(self, context: SessionContext) -> Session: ...

    def describe(self) -> dict[str, Any]:
        """What an Episode records about this policy (name, version, latency, ...)."""
        ...


@dataclass(frozen=True)
class Chunk:
    """An action sequence `[H, D]` meant to be played at `fps`, first action at its anchor."""

    actions: np.ndarray
    fps: float

    def __post_init__(self) -> None:
        actions = self.actions
        if type(actions) is not np.ndarray or actions.ndim != 2 or len(actions) < 1:
            shape = getattr(actions, "shape", type(actions).__name__)
            raise ValueError(
                f"a chunk's actions must be an array of shape [H>=1, D], got {shape}; "
                "a model answering a single action should return actions[None]"
            )
        if not self.fps > 0:
            raise ValueError(f"a chunk's fps must be > 0, got {self.fps!r}")


ChunkSource = Callable[[Observation], Chunk]
"""One rollout's worth of a model: observation in, chunk out. A source that holds something for
its rollout (a server connection) has a `close()`, called when the rollout's session ends."""


def one_action_a_call(act: Callable[[Observation], np.ndarray], fps: float) -> ChunkSource:
    """A ChunkSource whose every chunk is the one action `act(obs)` (a scripted expert's)."""
    return lambda obs: Chunk(np.asarray(act(obs))[None], fps)


class Model(Protocol):
    """Predicts action chunks. `open` starts one rollout (a model may keep per-rollout state):
    what it holds for the rollout belongs to the source it returns, not to the model, so that
    rollouts side by side never share it."""

    name: str

    def open(self, context: SessionContext) -> ChunkSource: ...

    def describe(self) -> dict[str, Any]: ...


def release(part: Session | ChunkSource) -> None:
    """Lets go of what a session or chunk source holds for its rollout (a server connection):
    calls its `close()`, if it has one."""
    close = getattr(part, "close", None)
    if close is not None:
        close()
