"""The history's gate (`policybench history --fail-on-regression`): each Eval's newest run tested
against its line's reference run (pinned with `--reference RUN`, by default the line's first run)
by `report compare`'s pooled test (exact McNemar over the scenes both ran, each pair within its
task), each call at level alpha / calls.

What that holds, for a policy that did not change: one call raises a false alarm with chance at
most alpha / calls; over `calls` calls after a reference, the chance of any false alarm is at most
alpha (Bonferroni: the calls share their reference, so their alarms are not independent and the
bound is loose), and in any `calls` consecutive calls the number of false alarms expected is at
most alpha, however long the sequence. Each call says its chance to catch a drop of DROP at its
own plan size, and the documented figures (docs/guides/history.md) are checked by simulation
with this code (tests/test_history_gate.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policybench import keys
from policybench.report.compare import pooled_pairs
from policybench.report.history import History, Point, RecordsOf
from policybench.report.paired import mcnemar_p
from policybench.report.power import mcnemar_power
from policybench.run.records import tallies_by

CALLS = 50  # the calls after a reference that alpha is spread over
DROP = 0.2  # the drop each call states its chance to catch


@dataclass(frozen=True)
class GateCall:
    """One Eval's newest run against its reference: the test, and what it could catch."""

    eval: str
    reference: Point
    newest: Point
    call: int  # the newest's place after the reference on their line (1: the run just after)
    level: float  # alpha / calls
    p_value: float | None  # None: no scene in common, nothing to test
    pairs: int
    lost: int
    gained: int
    power: float | None  # the chance to catch a drop of DROP at these pairs; None: not possible

    @property
    def regressed(self) -> bool:
        return self.p_value is not None and self.p_value < self.level and self.lost > self.gained

    def line(self) -> str:
        newest, reference = self.newest, self.reference
        said = (
            f"{self.eval}: {newest.run_id} solved {newest.solved}/{newest.rollouts} "
            f"({_pct(newest.rate)}) against the reference {reference.run_id} at "
            f"{reference.solved}/{reference.rollouts} ({_pct(reference.rate)})"
        )
        if self.p_value is None:
            return f"{said}: no scene in common, nothing tested"
        verdict = "significantly worse" if self.regressed else "not significantly worse"
        power = (
            f"; this plan catches a {DROP:.0%} drop with probability {self.power:.2f}"
            if self.power is not None
            else ""
        )
        needed = pairs_to_reach(self.level)
        if self.pairs < needed:  # even every scene lost could not reach the level
            power += (
                f"; {self.pairs} paired scenes can never reach level {self.level:.3g}, however "
                f"many are lost: run {needed} or more (or spread alpha over fewer --calls)"
            )
        return (
            f"{said}: {verdict} ({self.lost} of {self.pairs} paired scenes lost, {self.gained} "
            f"gained, exact McNemar p = {self.p_value:.3g}, level {self.level:.3g} for call "
            f"{self.call} after the reference){power}"
        )


@dataclass(frozen=True)
class Gate:
    alpha: float
    calls: int
    tested: tuple[GateCall, ...]
    problems: tuple[str, ...]  # a --reference that no line holds, said per Eval

    @property
    def regressions(self) -> tuple[GateCall, ...]:
        return tuple(call for call in self.tested if call.regressed)

    @property
    def failed(self) -> bool:
        return bool(self.regressions or self.problems)

    def lines(self) -> list[str]:
        return [
            f"gate: each Eval's newest run against its reference, at level {self.alpha:g}/"
            f"{self.calls} = {self.alpha / self.calls:.3g} a call (at most {self.alpha:g} "
            f"chance of any false alarm over {self.calls} calls after a reference)",
            *(("REGRESSION " if c.regressed else "ok ") + c.line() for c in self.tested),
            *(f"FAIL {problem}" for problem in self.problems),
        ]


def gate(
    history: History,
    records: RecordsOf,
    alpha: float,
    calls: int = CALLS,
    reference: str | None = None,
) -> Gate:
    """Each Eval's newest run tested against its line's reference (`reference`, a run id, where
    the Eval's newest line holds it; else the line's first run)."""
    tested, problems = [], []
    for eval, points in sorted(history.evals.items()):
        newest = points[-1]
        line = [p for p in points if p.line == newest.line]
        ids = [p.run_id for p in line]
        if reference is not None and reference not in ids:
            if any(p.run_id == reference for p in points):
                problems.append(
                    f"{eval}: the reference {reference} ran another protocol than the newest run "
                    f"{newest.run_id} (its line starts at {ids[0]}); pin a reference on the "
                    "newest line"
                )
            continue  # a reference for other Evals: this Eval did not run in it
        start = ids.index(reference) if reference is not None else 0
        if line[start] is newest:
            continue  # the reference itself: nothing to compare yet
        tested.append(
            called(eval, line[start], newest, len(line) - 1 - start, records, alpha / calls)
        )
    if reference is not None and not tested and not problems:
        problems.append(f"no Eval's history holds the reference run {reference}")
    return Gate(alpha, calls, tuple(tested), tuple(problems))


def called(
    eval: str, reference: Point, newest: Point, call: int, records: RecordsOf, level: float
) -> GateCall:
    """`newest` tested against `reference` at `level` (once: the store keeps the test)."""
    key = (eval, reference.run_id, newest.run_id, level)
    found = records.kept_call(key)
    if found is None:
        before, after = records(reference.run_id, eval), records(newest.run_id, eval)
        pairs = pooled_pairs(before, after)
        found = (None, 0, 0, 0, None)  # no scene in common
        if pairs is not None:  # the power depends on the reference, the pairs and the level
            kept = records.kept_power(eval, reference.run_id, level, pairs.count)
            power = kept[0] if kept is not None else power_at_drop(before, pairs.count, level)
            found = (mcnemar_p(pairs), pairs.count, pairs.lost, pairs.gained, power)
        records.keep_call(key, found)
    return GateCall(eval, reference, newest, call, level, *found)


def power_at_drop(reference: Sequence[Mapping[str, Any]], pairs: int, level: float) -> float | None:
    """The chance the test catches every task's rate dropping by DROP from the reference's (each
    scene's outcomes drawn independently in the two runs), over `pairs` paired scenes; None where
    no task's rate is high enough to drop by it."""
    rates = [tally.rate or 0.0 for tally in tallies_by(reference, keys.TASK).values()]
    if not rates or max(rates) < DROP:
        return None
    lost = sum(p * (1 - (p - DROP)) if p >= DROP else 0.0 for p in rates) / len(rates)
    gained = sum((1 - p) * (p - DROP) if p >= DROP else 0.0 for p in rates) / len(rates)
    return mcnemar_power(pairs, lost, gained, level)


def pairs_to_reach(level: float) -> int:
    """The fewest paired scenes whose exact McNemar test can reach `level` at all: every scene
    lost gives p = 2 / 2**n."""
    return max(1, math.ceil(math.log2(2 / level)))


def _pct(rate: float | None) -> str:
    return "no result" if rate is None else f"{rate:.1%}"
