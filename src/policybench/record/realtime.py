"""Real-time figures of a run with inference latency: per rollout (its record's fields) and
pooled over a group of rollouts (an Eval's row in summary.json, the terminal and the report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import ModelCall, control_period_ns

PERCENTILES = (50, 95, 99)
PERCENTILE_KEYS = (keys.LATENCY_MS_P50, keys.LATENCY_MS_P95, keys.LATENCY_MS_P99)
NO_LATENCY = "none"  # how a policy's description names a run without latency


def charges_latency(statics: Mapping[str, Any]) -> bool:
    """Whether the rollout's model calls cost simulated time (its policy says a latency)."""
    policy = statics.get(keys.POLICY) or {}
    return policy.get(keys.INFERENCE_LATENCY, NO_LATENCY) != NO_LATENCY


def rollout_realtime(
    statics: Mapping[str, Any], calls: Sequence[ModelCall], steps: int
) -> dict[str, Any]:
    """A rollout's real-time fields (see keys.CALL_LATENCY_MS and after); none without latency.

    A step is stale when a call newer than the chunk it plays from was in flight (the previous
    chunk's actions, or the hold, during a delay); the steps before the first chunk landed are
    neither stale nor fresh, and every other step is fresh. A warm start's first chunk, computed
    before the clock starts, is no call of the latency figures.
    """
    if not charges_latency(statics):
        return {}
    period = control_period_ns(statics[keys.CONTROL_HZ])
    charged = [call.arrives_ns - call.asked_ns for call in calls if call.charged]
    latency_ms = [round(ns / 1e6, 4) for ns in charged]
    figures: dict[str, Any] = {
        keys.CALL_LATENCY_MS: latency_ms,
        keys.DELAY_STEPS_MEAN: _mean([_ticks(ns, period) for ns in charged]),
        **dict(zip(PERCENTILE_KEYS, _percentiles(latency_ms), strict=True)),
        keys.STALE_ACTION_SHARE: None,
        keys.FRESH_ACTION_HZ: None,
    }
    horizon = (statics.get(keys.POLICY) or {}).get(keys.EXECUTE_STEPS)
    if horizon is not None:
        figures[keys.CALLS_PAST_HORIZON] = sum(_ticks(ns, period) > horizon for ns in charged)
    if not calls or not steps:
        return figures
    first = min(_ticks(calls[0].arrives_ns, period), steps)  # the tick the first chunk lands
    stale = 0
    for call in calls:
        start = max(_ticks(call.asked_ns, period), first)
        stale += max(0, min(_ticks(call.arrives_ns, period), steps) - start)
    figures[keys.STALE_ACTION_SHARE] = round(stale / steps, 6)
    figures[keys.FRESH_ACTION_HZ] = round((steps - first - stale) / (steps * period / 1e9), 6)
    return figures


@dataclass(frozen=True)
class Realtime:
    """A group's real-time figures: latency percentiles and the mean delay over all its calls,
    the stale share over all its steps, the fresh-action rate over all its simulated time."""

    rollouts: int
    calls: int
    delay_steps_mean: float | None
    latency_ms: tuple[float | None, ...]  # at PERCENTILES
    stale_action_share: float | None
    fresh_action_hz: float | None

    @classmethod
    def of(cls, records: Sequence[Mapping[str, Any]]) -> Realtime | None:
        """None when no record says real-time figures (a run without latency)."""
        timed = [r for r in records if r.get(keys.CALL_LATENCY_MS) is not None]
        if not timed:
            return None
        latency_ms = [ms for r in timed for ms in r[keys.CALL_LATENCY_MS]]
        delays = [
            (r[keys.DELAY_STEPS_MEAN], len(r[keys.CALL_LATENCY_MS]))
            for r in timed
            if r.get(keys.DELAY_STEPS_MEAN) is not None
        ]
        stepped = [r for r in timed if r.get(keys.STALE_ACTION_SHARE) is not None]
        return cls(
            rollouts=len(timed),
            calls=len(latency_ms),
            delay_steps_mean=_weighted(delays),
            latency_ms=_percentiles(latency_ms),
            stale_action_share=_weighted(
                [(r[keys.STALE_ACTION_SHARE], r[keys.STEPS]) for r in stepped]
            ),
            fresh_action_hz=_weighted([(r[keys.FRESH_ACTION_HZ], r[keys.SIM_S]) for r in stepped]),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "rollouts": self.rollouts,
            keys.MODEL_CALLS: self.calls,
            keys.DELAY_STEPS_MEAN: self.delay_steps_mean,
            **dict(zip(PERCENTILE_KEYS, self.latency_ms, strict=True)),
            keys.STALE_ACTION_SHARE: self.stale_action_share,
            keys.FRESH_ACTION_HZ: self.fresh_action_hz,
        }


def _ticks(ns: int, period: int) -> int:
    """Control ticks up to `ns` (the first tick at or after it)."""
    return -(-ns // period)


def _mean(values: Sequence[float]) -> float | None:
    return round(float(np.mean(values)), 6) if values else None


def _percentiles(values: Sequence[float]) -> tuple[float | None, ...]:
    if not values:
        return (None,) * len(PERCENTILES)
    return tuple(round(float(v), 4) for v in np.percentile(values, PERCENTILES))


def _weighted(pairs: Sequence[tuple[float, float]]) -> float | None:
    total = sum(weight for _, weight in pairs)
    return round(sum(v * w for v, w in pairs) / total, 6) if total else None
