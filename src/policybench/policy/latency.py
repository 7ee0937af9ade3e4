"""Inference latency, charged in simulated time: none, a fixed number of seconds, or the
measured wall time of each model call."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class LatencyMode(StrEnum):
    NONE = "none"
    FIXED = "fixed"
    MEASURED = "measured"


@dataclass(frozen=True)
class InferenceLatency:
    mode: LatencyMode = LatencyMode.NONE
    seconds: float = 0.0

    def charge_ns(self, wall_ns: int) -> int:
        """Simulated nanoseconds a model call that took `wall_ns` of real time costs."""
        if self.mode is LatencyMode.NONE:
            return 0
        if self.mode is LatencyMode.FIXED:
            return round(self.seconds * 1e9)
        return wall_ns

    def __str__(self) -> str:
        return f"{self.seconds:g}" if self.mode is LatencyMode.FIXED else self.mode.value

    @classmethod
    def parse(cls, text: str) -> InferenceLatency:
        """`none`, `measured`, or a number of seconds such as `0.1`."""
        lowered = text.strip().lower()
        if lowered in (LatencyMode.NONE, LatencyMode.MEASURED):
            return cls(LatencyMode(lowered))
        try:
            seconds = float(lowered)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(
                f"inference latency must be 'none', 'measured' or seconds >= 0 (e.g. 0.1); "
                f"got {text!r}"
            )
        return cls(LatencyMode.NONE) if seconds == 0 else cls(LatencyMode.FIXED, seconds)


NO_LATENCY = InferenceLatency()
