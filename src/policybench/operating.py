"""The exact operating characteristic of a `--decide` plan: the chances that the sequential test
(policybench.decide), truncated at the plan's end, says PASS, FAIL or INCONCLUSIVE at a given
success rate, by dynamic programming over the outcomes (how many were solved after each).

Wald's boundaries hold the error rates only approximately, and a plan that ends before the test
decides leaves it INCONCLUSIVE; these figures say exactly what a plan of N rollouts does, before
any runs. A paired test's figures (`--decide baseline`) are for every scene differing from the
baseline's, the case in which an identical policy FAILs and one worse by the margin PASSes most
often (fewer differing scenes weigh fewer, and a worse policy wins a smaller share of them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from policybench.decide import SequentialTest, Verdict


@dataclass(frozen=True)
class Chances:
    """Where a plan's test ends at one rate: PASS, FAIL or INCONCLUSIVE (summing to 1)."""

    rate: float
    passes: float
    fails: float

    @property
    def inconclusive(self) -> float:
        return max(0.0, 1.0 - self.passes - self.fails)

    def line(self) -> str:
        return (
            f"at {self.rate:g}: PASS {self.passes:.1%}, FAIL {self.fails:.1%}, "
            f"INCONCLUSIVE {self.inconclusive:.1%}"
        )


def chances(test: SequentialTest, planned: int, rate: float, weighs: float = 1.0) -> Chances:
    """The exact chances of each verdict over `planned` outcomes, each solved (won) with
    probability `rate`; `weighs`: the chance an outcome weighs at all (a paired scene that
    differs from the baseline's), the number weighing then binomial."""
    decided = _decided_by(test, planned, rate)
    if weighs >= 1.0:
        passes, fails = decided[planned]
    else:
        from scipy.stats import binom

        weights = binom.pmf(np.arange(planned + 1), planned, weighs)
        passes, fails = (weights[:, None] * decided).sum(axis=0)
    return Chances(rate, float(passes), float(fails))


def _decided_by(test: SequentialTest, most: int, rate: float) -> np.ndarray:
    """[k] = (chance it has said PASS, chance it has said FAIL) after k outcomes weighed, for
    k = 0 .. most: the chance of each count of wins among the undecided paths, advanced one
    outcome at a time, a path leaving once its count crosses a boundary."""
    alive = np.zeros(most + 1)
    alive[0] = 1.0
    found = np.zeros((most + 1, 2))
    passed = failed = 0.0
    wins = np.arange(most + 1)
    for k in range(1, most + 1):
        alive[1:] = alive[1:] * (1 - rate) + alive[:-1] * rate
        alive[0] *= 1 - rate
        verdict = test.verdict_at(wins[: k + 1], k - wins[: k + 1])
        passing, failing = verdict == Verdict.PASS, verdict == Verdict.FAIL
        passed += alive[: k + 1][passing].sum()
        failed += alive[: k + 1][failing].sum()
        alive[: k + 1][passing | failing] = 0.0
        found[k] = passed, failed
    return found


@dataclass(frozen=True)
class Characteristic:
    """A plan's chances at the rates that define its test: for `--decide RATE`, the failing
    rate (RATE - DELTA), RATE and the passing rate (RATE + DELTA); for `--decide baseline`, a
    policy worse by the margin and an identical one."""

    test: SequentialTest
    planned: int
    at: tuple[Chances, ...]

    @classmethod
    def of(cls, test: SequentialTest, planned: int) -> Characteristic:
        rates = (test.low, test.high) if test.paired else (test.low, test.rate, test.high)
        return cls(test, planned, tuple(chances(test, planned, rate) for rate in rates))

    @property
    def power(self) -> tuple[float, float]:
        """The chance of the right verdict at the failing and the passing end: FAIL at `low`,
        PASS at `high`."""
        return self.at[0].fails, self.at[-1].passes

    @property
    def enough(self) -> bool:
        """Whether the plan decides rightly as often as the test's error rates promise."""
        return _enough(self.test, *self.power)

    def line(self) -> str:
        if self.test.paired:
            worse, same = self.at
            return (
                f"{self.planned} scenes planned; every one differing from the baseline's (the "
                f"most error-prone case): worse by {self.test.delta:g}: FAIL {worse.fails:.1%}, "
                f"PASS {worse.passes:.1%}; identical: PASS {same.passes:.1%}, FAIL "
                f"{same.fails:.1%}"
            )
        return f"{self.planned} rollouts planned; " + "; ".join(c.line() for c in self.at)


def _enough(test: SequentialTest, fails: float, passes: float) -> bool:
    """Whether a plan that FAILs at `low` with chance `fails` and PASSes at `high` with chance
    `passes` decides rightly as often as the test's error rates promise: at least 1 - (its
    false PASS) and 1 - (its false FAIL)."""
    return fails >= 1 - test.false_pass and passes >= 1 - test.false_fail


def first_enough(test: SequentialTest, sizes: Sequence[int]) -> int | None:
    """The first of the plan sizes `sizes` whose plan is enough (Characteristic.enough), each
    rate's dynamic programme run once up to the largest: its chances after k outcomes are
    those of a plan of k."""
    if not sizes:
        return None
    most = max(sizes)
    at_low, at_high = (_decided_by(test, most, rate) for rate in (test.low, test.high))
    return next((n for n in sizes if _enough(test, at_low[n][1], at_high[n][0])), None)
