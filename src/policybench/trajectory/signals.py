"""A rollout's signals, as trajectory specs read them: one value (or vector) per control step.

- `time_s`: the step's start in simulated seconds; `period_s`: the control period, the same at
  every step (as the harness keeps it, in whole nanoseconds); `action`: the command sent (T x
  action dims); `action_rate`: how fast each command element changed, |a(t) - a(t-1)| x the
  control rate (0 at the first step); `reward`; `success` (1.0 or 0.0), as the env answered
  the step;
- `obs.NAME`: an observation entry of a few numbers (a state vector; images are not signals), as
  the policy saw it at the step's start;
- the Eval's named quantities (`Eval.signals`: a name to a function of the signals above, such as
  an end effector's position), and those a spec derives for itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from policybench.policy.base import control_period_ns
from policybench.record.episode import TraceStep
from policybench.trajectory.stl import PERIOD, TIME

ACTION, ACTION_RATE, REWARD, SUCCESS = "action", "action_rate", "reward", "success"
BASE = (TIME, PERIOD, ACTION, ACTION_RATE, REWARD, SUCCESS)
OBSERVATION = "obs."  # the prefix of an observation entry's signal
Derive = Callable[[Mapping[str, np.ndarray]], np.ndarray]


def signals_of(
    trace: Sequence[TraceStep],
    states: Mapping[str, Sequence[np.ndarray]],
    control_hz: float,
    derived: Mapping[str, Derive] = {},
) -> dict[str, np.ndarray]:
    """The signals of a rollout of `trace`, its observation entries as a StateRecorder kept them
    (one per step, the first `len(trace)`), and `derived` computed from those in order."""
    steps = len(trace)
    action = np.stack([np.asarray(step.command, dtype=np.float64).reshape(-1) for step in trace])
    signals: dict[str, np.ndarray] = {
        TIME: np.array([step.time_ns for step in trace], dtype=np.float64) / 1e9,
        PERIOD: np.full(steps, control_period_ns(control_hz) / 1e9),
        ACTION: action,
        ACTION_RATE: np.abs(np.diff(action, axis=0, prepend=action[:1])) * control_hz,
        REWARD: np.array([step.reward for step in trace], dtype=np.float64),
        SUCCESS: np.array([float(step.success) for step in trace]),
    }
    for name, rows in states.items():
        if len(rows) >= steps:
            signals[OBSERVATION + name] = np.stack(rows[:steps]).astype(np.float64)
    for name, derive in derived.items():
        try:
            values = np.asarray(derive(signals), dtype=np.float64)
        except KeyError:  # what it derives from was not recorded: it is not a signal here
            continue
        if len(values) != steps:
            raise ValueError(
                f"signal {name!r} has {len(values)} values for a rollout of {steps} steps: "
                "derive one value (or vector) per step"
            )
        signals[name] = values
    return signals


def unknown_names(names: set[str], known: set[str]) -> list[str]:
    """The names no rollout of an Eval can have: neither a base signal, nor one the Eval or the
    spec derives, nor an observation entry (`obs.NAME`, known only once a rollout runs)."""
    return sorted(name for name in names if name not in known and not name.startswith(OBSERVATION))


def element_names(derived: Mapping[str, Derive], entry: str, width: int) -> dict[int, str]:
    """The names the Eval's signals give the numbers of observation entry `entry` (of `width`
    numbers): `hand[0]` for the state's first number where `hand` is a slice of it. Found by
    deriving each signal from two probes whose numbers encode their index; a signal computed from
    several numbers (a distance, a sum) names none of them."""
    index = np.arange(width, dtype=np.float64)[None, :]
    names: dict[int, str] = {}
    for name, derive in derived.items():
        try:
            once = np.asarray(derive({OBSERVATION + entry: index}), np.float64).reshape(-1)
            twice = np.asarray(derive({OBSERVATION + entry: 3 * index + 7}), np.float64)
        except (KeyError, IndexError, ValueError, TypeError):  # it reads another signal
            continue
        for k, (at, check) in enumerate(zip(once, twice.reshape(-1), strict=True)):
            if at.is_integer() and 0 <= at < width and check == 3 * at + 7:
                names.setdefault(int(at), name if once.size == 1 else f"{name}[{k}]")
    return names
