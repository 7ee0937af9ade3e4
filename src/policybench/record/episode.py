"""The record of one rollout: its statics, its step trace and its outcome."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from policybench import keys
from policybench.policy.base import ModelCall


class OutcomeKind(StrEnum):
    SOLVED = "solved"  # the policy ran and the task was achieved
    UNSOLVED = "unsolved"  # the policy ran and the task was not achieved
    ERROR = "error"  # the harness, the env or the policy broke


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    reason: str
    details: str = ""  # the traceback behind an error, for the test report
    # An error of what serves the policy (server gone, too slow), not of the policy or the env:
    # running the rollout again may give it an outcome.
    transient: bool = False

    @property
    def is_error(self) -> bool:
        return self.kind is OutcomeKind.ERROR


class TraceStep(NamedTuple):
    """One control step: the sim time it started at, the action sent, what the env answered."""

    time_ns: int
    command: np.ndarray
    reward: float
    success: bool


@dataclass(frozen=True)
class Episode:
    statics: dict[str, Any]
    trace: tuple[TraceStep, ...]
    outcome: Outcome
    sim_s: float
    wall_s: float
    success_step: int | None
    calls: tuple[ModelCall, ...] = ()  # every model call the session made
    success_reported: bool = False  # the env's step info carried a success key (see World)
    action_bounds: tuple[np.ndarray, np.ndarray] | None = None  # the action space's (low, high)

    @property
    def steps(self) -> int:
        return len(self.trace)

    def record(self) -> dict[str, Any]:
        """One JSON-safe line for results.jsonl: statics, outcome and timing (no trace)."""
        walls = [call.wall_ns for call in self.calls]
        return {
            **self.statics,
            keys.OUTCOME: self.outcome.kind.value,
            keys.REASON: self.outcome.reason,
            keys.STEPS: self.steps,
            keys.SUCCESS_STEP: self.success_step,
            keys.SUCCESS_REPORTED: self.success_reported if self.trace else None,
            keys.SIM_S: self.sim_s,
            keys.WALL_S: round(self.wall_s, 6),
            keys.MODEL_CALLS: len(walls),
            keys.INFER_MS_MEAN: _ms(sum(walls) / len(walls)) if walls else None,
            keys.INFER_MS_MAX: _ms(max(walls)) if walls else None,
            keys.SUM_REWARD: sum(step.reward for step in self.trace),
            keys.MAX_REWARD: max((step.reward for step in self.trace), default=None),
        }


def _ms(nanoseconds: float) -> float:
    return round(nanoseconds / 1e6, 4)
