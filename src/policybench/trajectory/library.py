"""Trajectory specs: a named formula over a rollout's signals, scored by its robustness margin;
and the common ones (workspace bounds, action-rate and velocity limits, a condition held too
long such as a gripper closed on nothing, no progress for a while)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policybench.trajectory.signals import ACTION_RATE, Derive
from policybench.trajectory.stl import (
    Always,
    Eventually,
    Formula,
    Margin,
    Not,
    Signal,
    Signals,
    margin_of,
    steps_of,
)


@dataclass(frozen=True)
class TrajectorySpec:
    """A property every rollout of an Eval should have. `derives`: signals it computes for itself
    from the rollout's (a name to a function of them)."""

    name: str
    formula: Formula
    derives: Mapping[str, Derive] = field(default_factory=dict)

    def margin(self, signals: Signals) -> Margin:
        if self.derives:
            signals = {**signals, **{n: np.asarray(f(signals)) for n, f in self.derives.items()}}
        return margin_of(self.formula, signals)

    def signal_names(self) -> set[str]:
        """The signals it reads from the rollout (not those it derives)."""
        return self.formula.signal_names() - set(self.derives)

    def __repr__(self) -> str:
        return f"{self.name}: {self.formula!r}"


def workspace(signal: str, low: Sequence[float], high: Sequence[float]) -> TrajectorySpec:
    """`signal` (a position) stays within the box [low, high] at every step."""
    box = f"[{', '.join(f'{v:g}' for v in low)}]-[{', '.join(f'{v:g}' for v in high)}]"
    return TrajectorySpec(f"{signal} in workspace {box}", Always(Signal(signal).within(low, high)))


def action_rate_limit(limit: float | Sequence[float]) -> TrajectorySpec:
    """No command element changes faster than `limit` per second."""
    shown = f"{limit:g}" if np.ndim(limit) == 0 else str(list(limit))  # type: ignore[arg-type]
    return TrajectorySpec(f"action rate <= {shown}/s", Always(Signal(ACTION_RATE) <= limit))


def velocity_limit(signal: str, limit: float, control_hz: float) -> TrajectorySpec:
    """`signal`'s speed (the norm of its change per second) stays at or under `limit`."""
    speed = f"{signal}_speed"

    def derive(signals: Mapping[str, np.ndarray]) -> np.ndarray:
        values = np.asarray(signals[signal], dtype=np.float64).reshape(len(signals[signal]), -1)
        return np.linalg.norm(np.diff(values, axis=0, prepend=values[:1]), axis=1) * control_hz

    formula = Always(Signal(speed) <= limit)
    return TrajectorySpec(f"{signal} speed <= {limit:g}/s", formula, {speed: derive})


def held_at_most(condition: Formula, seconds: float, name: str) -> TrajectorySpec:
    """`condition` never holds for longer than `seconds` at a stretch: at every step it ends
    within `seconds` (a gripper closed on nothing, a robot standing still); the last `seconds`
    of a rollout are judged only as part of a stretch that began before them."""
    return TrajectorySpec(name, Always(Eventually(Not(condition), (0.0, seconds), weak=True)))


def gripper_closed_on_nothing(
    opening: str, closed_below: float, seconds: float = 1.0
) -> TrajectorySpec:
    """The gripper (its opening, `opening`) is not shut on nothing, opening under
    `closed_below`, for more than `seconds` at a stretch."""
    closed = Signal(opening) <= closed_below
    name = f"gripper not closed on nothing ({opening} <= {closed_below:g}) over {seconds:g} s"
    return held_at_most(closed, seconds, name)


@dataclass(frozen=True, eq=False)
class Progress(Formula):
    """`signal` rises by at least `by` within `seconds` of a step: at step t, the greatest rise
    over [t, t + seconds] less `by` (+inf where the rollout ends before t + seconds: too soon to
    judge)."""

    signal: Signal
    seconds: float
    by: float

    def _rises(self, signals: Signals) -> tuple[np.ndarray, np.ndarray]:
        values = self.signal.values(signals)
        if values.ndim > 1:
            raise ValueError(
                f"progress needs a signal of one number a step, {self.signal!r} is not"
            )
        _, last = steps_of((0.0, self.seconds), signals)
        steps = len(values)
        span = min(last or 0, steps - 1)
        padded = np.concatenate([values, np.full(span, -math.inf)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, span + 1)[:steps]
        return windows.max(axis=1) - values - self.by, windows.argmax(axis=1)

    def _robustness(self, signals: Signals, memo: dict[int, np.ndarray]) -> np.ndarray:
        rises, _ = self._rises(signals)
        _, last = steps_of((0.0, self.seconds), signals)
        judged = np.arange(len(rises)) + (last or 0) < len(rises)
        return np.where(judged, rises, math.inf)

    def witness(self, signals: Signals, memo: dict[int, np.ndarray], at: int) -> int:
        _, best = self._rises(signals)
        return at + int(best[at])

    def signal_names(self) -> set[str]:
        return {self.signal.name}

    def __repr__(self) -> str:
        return f"{self.signal!r} rises by {self.by:g} within {self.seconds:g} s"


def no_progress(signal: str, seconds: float, by: float) -> TrajectorySpec:
    """`signal` (a progress measure: reward, say) never goes `seconds` without rising by `by`."""
    name = f"{signal} rises by {by:g} every {seconds:g} s"
    return TrajectorySpec(name, Always(Progress(Signal(signal), seconds, by)))


def spec_values(margin: Margin) -> dict[str, Any]:
    """A margin as a rollout's record holds it: an infinite margin is None (+inf: nothing to
    judge; -inf: nothing could hold it), `held` says which."""
    value = None if math.isinf(margin.value) else round(margin.value, 6)
    return {
        "margin": value,
        "held": margin.held,
        "step": margin.step,
        "time_s": margin.time_s,
        "values": margin.values,
        "first_violated_step": margin.first,
    }


def violated(judged: Mapping[str, Any]) -> bool:
    """Whether a spec's entry in a rollout's record (`spec_values`) says it was violated: its
    `held`, or for records written before it was kept, a negative margin."""
    if "held" in judged:
        return not judged["held"]
    return judged.get("margin") is not None and judged["margin"] < 0
