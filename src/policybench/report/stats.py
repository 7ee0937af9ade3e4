"""Success-rate statistics: counts per Eval and task with Wilson score intervals."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policybench import keys


@dataclass(frozen=True)
class Tally:
    rollouts: int = 0
    solved: int = 0
    unsolved: int = 0
    errors: int = 0

    def add(self, outcome: str) -> Tally:
        return Tally(
            self.rollouts + 1,
            self.solved + (outcome == "solved"),
            self.unsolved + (outcome == "unsolved"),
            self.errors + (outcome == "error"),
        )

    @property
    def rate(self) -> float | None:
        return self.solved / self.rollouts if self.rollouts else None

    def interval(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """Wilson score interval of the success rate (errors count as attempts not solved)."""
        if not self.rollouts:
            return None
        from scipy.stats import binomtest

        ci = binomtest(self.solved, self.rollouts).proportion_ci(confidence, method="wilson")
        return ci.low, ci.high


def tally_by(records: Iterable[Mapping[str, Any]], *fields: str) -> dict[tuple[str, ...], Tally]:
    tallies: dict[tuple[str, ...], Tally] = {}
    for record in records:
        group = tuple(str(record[name]) for name in fields)
        tallies[group] = tallies.get(group, Tally()).add(record[keys.OUTCOME])
    return tallies
