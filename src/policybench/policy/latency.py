"""Inference latency, charged in simulated time: none, fixed seconds, d control steps, draws from
a latency profile (seeded per rollout), or the measured wall time of each model call."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from policybench.policy.latency_profile import LatencyProfile

STEPS_PREFIX, PROFILE_PREFIX = "steps:", "profile:"
ACCEPTED = (
    "'none', seconds >= 0 (e.g. 0.1), 'steps:D' (D control periods, e.g. steps:2), "
    "'profile:FILE' (a latency profile, see `policybench latency record`) or 'measured'"
)


class LatencyMode(StrEnum):
    NONE = "none"
    FIXED = "fixed"
    STEPS = "steps"
    PROFILE = "profile"
    # The wall time each call took on this host: a score that changes with the host's load.
    # A profile recorded once (`policybench latency record`) is the portable alternative.
    MEASURED = "measured"


@dataclass(frozen=True)
class InferenceLatency:
    """How much simulated time a model call costs. `steps` counts control periods (STEPS);
    `profile` is drawn from per call (PROFILE), with a generator the session seeds per rollout."""

    mode: LatencyMode = LatencyMode.NONE
    seconds: float = 0.0
    steps: int = 0
    profile: LatencyProfile | None = field(default=None, compare=False, repr=False)
    profile_digest: str | None = None  # compared in place of the profile

    @property
    def charged(self) -> bool:
        """Whether a model call costs simulated time at all."""
        return self.mode is not LatencyMode.NONE

    def planned_ns(self, period_ns: int, draws: np.random.Generator) -> int | None:
        """Simulated nanoseconds the next call will cost, known before it is made (a profile
        draws from `draws`); None when it is measured as the call runs."""
        mode = self.mode
        if mode is LatencyMode.NONE:
            return 0
        if mode is LatencyMode.FIXED:
            return round(self.seconds * 1e9)
        if mode is LatencyMode.STEPS:
            return self.steps * period_ns
        if mode is LatencyMode.PROFILE:
            assert self.profile is not None
            return round(self.profile.draw_seconds(draws) * 1e9)
        return None

    def least_steps(self, period_ns: int) -> int | None:
        """The control steps every call keeps the previous chunk playing, when that is fixed
        in advance (none, seconds, steps); None when it varies (a profile, measured)."""
        if self.mode in (LatencyMode.PROFILE, LatencyMode.MEASURED):
            return None
        charged = self.planned_ns(period_ns, np.random.default_rng(0))
        return -(-(charged or 0) // period_ns)

    def __str__(self) -> str:
        if self.mode is LatencyMode.FIXED:
            return f"{self.seconds:g}"
        if self.mode is LatencyMode.STEPS:
            return f"{STEPS_PREFIX}{self.steps}"
        if self.mode is LatencyMode.PROFILE:
            assert self.profile is not None
            return f"{PROFILE_PREFIX}{Path(self.profile.path).name}"
        return self.mode.value

    @classmethod
    def parse(cls, text: str) -> InferenceLatency:
        """`none`, `measured`, seconds such as `0.1`, `steps:2` or `profile:FILE`."""
        stripped = text.strip()
        lowered = stripped.lower()
        if lowered in (LatencyMode.NONE, LatencyMode.MEASURED):
            return cls(LatencyMode(lowered))
        if lowered.startswith(STEPS_PREFIX):
            count = lowered.removeprefix(STEPS_PREFIX).strip()
            if not count.isdigit():
                raise ValueError(
                    f"inference latency steps:D takes a whole number of control steps D >= 0 "
                    f"(e.g. steps:2); got {text!r}"
                )
            steps = int(count)
            return cls(LatencyMode.STEPS, steps=steps) if steps else cls(LatencyMode.NONE)
        if lowered.startswith(PROFILE_PREFIX):
            return cls.of_profile(stripped[len(PROFILE_PREFIX) :].strip())
        try:
            seconds = float(lowered)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"inference latency must be {ACCEPTED}; got {text!r}")
        return cls(LatencyMode.NONE) if seconds == 0 else cls(LatencyMode.FIXED, seconds)

    @classmethod
    def of_profile(cls, path: str | Path) -> InferenceLatency:
        """Latency drawn from the profile in `path`; ValueError if it cannot be read."""
        if not str(path):
            raise ValueError("inference latency profile:FILE needs a file, e.g. profile:pi0.json")
        try:
            from policybench.policy.latency_profile import LatencyProfile
        except ImportError as missing:
            raise ValueError(
                f"inference latency profile:{path} needs latency profiles "
                f"(policybench.policy.latency_profile), which this installation lacks: {missing}"
            ) from None
        profile = LatencyProfile.load(path)
        return cls(LatencyMode.PROFILE, profile=profile, profile_digest=profile.digest)


NO_LATENCY = InferenceLatency()
