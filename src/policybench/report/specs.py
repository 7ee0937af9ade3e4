"""Trajectory specs across a run: per Eval and spec, how many rollouts violated it, the
violation rate with its Wilson interval, and the spread of the margins (their least and median;
a rollout too short for the spec to judge has no margin and counts as held; one that nothing
could hold, a margin of -inf, has none either and counts as violated)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policybench import keys
from policybench.run.records import Tally
from policybench.trajectory.library import violated


@dataclass(frozen=True)
class SpecRow:
    eval: str
    spec: str
    judged: int  # rollouts held to it
    violated: int
    least: float | None  # the smallest margin (the worst rollout)
    median: float | None

    @property
    def rate(self) -> float:
        return self.violated / self.judged if self.judged else 0.0

    def interval(self) -> tuple[float, float] | None:
        """The violation rate's 95% Wilson interval."""
        return Tally(self.judged, self.violated, self.judged - self.violated).interval()

    def cells(self) -> tuple[str, ...]:
        low, high = self.interval() or (0.0, 0.0)
        margins = "-" if self.least is None else f"{self.least:.4g} / {self.median:.4g}"
        return (
            self.eval,
            self.spec,
            f"{self.violated}/{self.judged}",
            f"{self.rate:.1%}",
            f"[{low:.1%}, {high:.1%}]",
            margins,
        )

    def as_json(self) -> dict[str, Any]:
        interval = self.interval()
        return {
            keys.EVAL: self.eval,
            "spec": self.spec,
            "rollouts": self.judged,
            "violated": self.violated,
            "violation_rate": self.rate,
            "interval": None if interval is None else list(interval),
            "margin_min": self.least,
            "margin_median": self.median,
        }


HEADER = ("eval", "spec", "violated", "rate", "95% CI", "margin min / median")


def spec_rows(records: Sequence[Mapping[str, Any]]) -> tuple[SpecRow, ...]:
    """A row per Eval and spec, in the order they first appear."""
    judged: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for record in records:
        for name, entry in (record.get(keys.SPECS) or {}).items():
            judged.setdefault((record[keys.EVAL], name), []).append(entry)
    rows = []
    for (eval, spec), entries in judged.items():
        known = [entry["margin"] for entry in entries if entry.get("margin") is not None]
        rows.append(
            SpecRow(
                eval,
                spec,
                len(entries),
                sum(violated(entry) for entry in entries),
                min(known) if known else None,
                statistics.median(known) if known else None,
            )
        )
    return tuple(rows)


def violations(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A rollout's violated specs, as its page marks them on its plots: where each was worst
    and, for an `always`, where it first failed (seconds of simulated time)."""
    period = 1 / float(record.get(keys.CONTROL_HZ) or 1)
    return [
        {
            "spec": name,
            "margin": judged["margin"],
            "time_s": judged.get("time_s"),
            "first_time_s": None
            if judged.get("first_violated_step") is None
            else judged["first_violated_step"] * period,
        }
        for name, judged in (record.get(keys.SPECS) or {}).items()
        if violated(judged)
    ]
