"""Comparing two runs task by task: rollouts paired by scene get the exact McNemar test and
Newcombe's paired interval, unpaired ones Fisher's test; p-values adjusted across tasks."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.record.protocol import Difference, Protocol
from policybench.report.paired import (
    CONFIDENCE,
    Adjustment,
    Pairs,
    adjust,
    fisher_p,
    mcnemar_p,
    paired_interval,
    unpaired_interval,
)
from policybench.report.pairing import match
from policybench.report.stats import Tally, group, tally_of

ALPHA = 0.05
ALL_TASKS = "(all tasks)"


class Design(StrEnum):
    PAIRED = "paired"  # the same scenes under both runs: exact McNemar on the discordant pairs
    UNPAIRED = "unpaired"  # no shared scenes: Fisher's exact test on the two counts

    @property
    def test(self) -> str:
        return "McNemar" if self is Design.PAIRED else "Fisher"


@dataclass(frozen=True)
class TaskComparison:
    """One task (or, with `task` None, all the tasks of an Eval both runs ran) in both runs."""

    eval: str
    task: str | None
    design: Design
    before: Tally  # the rollouts the test used: with pairs, the paired ones
    after: Tally
    pairs: Pairs | None
    left_out: tuple[int, int]  # rollouts of (before, after) without a partner in a paired test
    p_value: float
    adjusted_p: float | None  # across tasks; None for an Eval's pooled row
    interval: tuple[float, float]  # of the difference, after - before
    alpha: float

    @property
    def label(self) -> str:
        return self.task if self.task is not None else ALL_TASKS

    @property
    def difference(self) -> float:
        assert self.before.rate is not None and self.after.rate is not None
        return self.after.rate - self.before.rate

    @property
    def significant(self) -> bool:
        return self.adjusted_p is not None and self.adjusted_p < self.alpha

    @property
    def regression(self) -> bool:
        """Significantly worse after than before (adjusted p below alpha)."""
        return self.difference < 0 and self.significant

    @property
    def improvement(self) -> bool:
        return self.difference > 0 and self.significant

    def as_json(self) -> dict[str, Any]:
        pairs = self.pairs
        return {
            keys.EVAL: self.eval,
            keys.TASK: self.task,
            "design": self.design.value,
            "before": [self.before.solved, self.before.rollouts],
            "after": [self.after.solved, self.after.rollouts],
            "difference": self.difference,
            "interval": list(self.interval),
            "pairs": None
            if pairs is None
            else {"both": pairs.both, "lost": pairs.lost, "gained": pairs.gained},
            "left_out": list(self.left_out),
            "p_value": self.p_value,
            "adjusted_p": self.adjusted_p,
            "regression": self.regression,
        }


@dataclass(frozen=True)
class Comparison:
    before: str  # what the runs are called in the table (run ids)
    after: str
    tasks: tuple[TaskComparison, ...]
    evals: tuple[TaskComparison, ...]  # each Eval's shared tasks pooled
    only_before: tuple[tuple[str, str], ...]  # (eval, task) run only in `before`
    only_after: tuple[tuple[str, str], ...]
    protocol: tuple[Difference, ...]  # empty when both ran the same protocol (policy aside)
    alpha: float
    adjustment: Adjustment = Adjustment.BH
    confidence: float = CONFIDENCE

    @property
    def regressions(self) -> tuple[TaskComparison, ...]:
        return tuple(row for row in self.tasks if row.regression)

    @property
    def method(self) -> str:
        return (
            "exact McNemar test on rollouts paired by scene (Fisher's exact test where unpaired), "
            f"p adjusted across tasks by {self.adjustment.title}; {self.confidence:.0%} intervals "
            "of the change by Newcombe's method 10 (Stat Med 1998; paired 17:2635, unpaired 17:873)"
        )

    def protocol_lines(self) -> list[str]:
        return [difference.line(self.before, self.after) for difference in self.protocol]

    def lines(self) -> list[str]:
        return format_comparison(self)

    def as_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "adjustment": self.adjustment.value,
            "test": self.method,
            "tasks": [row.as_json() for row in self.tasks],
            "evals": [row.as_json() for row in self.evals],
            "only_before": [list(pair) for pair in self.only_before],
            "only_after": [list(pair) for pair in self.only_after],
            "protocol": [asdict(difference) for difference in self.protocol],
        }

    def write(self, directory: Path, stem: str = "compare") -> tuple[Path, Path]:
        text, data = directory / f"{stem}.txt", directory / f"{stem}.json"
        text.write_text("\n".join(self.lines()) + "\n")
        data.write_text(json.dumps(self.as_json(), indent=2, sort_keys=True) + "\n")
        return text, data


def compare_runs(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    names: tuple[str, str] = ("A", "B"),
    alpha: float = ALPHA,
    adjustment: Adjustment = Adjustment.BH,
    confidence: float = CONFIDENCE,
    protocols: tuple[Protocol, Protocol] | None = None,
) -> Comparison:
    """Compares the tasks both runs ran, each and pooled per Eval; lists the ones only one of
    them ran and every protocol field that differs (of `protocols`, the runs' own with their
    settings; by default read from the records alone)."""
    was, now = protocols or (Protocol.of(before), Protocol.of(after))
    tasks_before = group(before, keys.EVAL, keys.TASK)
    tasks_after = group(after, keys.EVAL, keys.TASK)
    shared = sorted(tasks_before.keys() & tasks_after.keys())
    tested = [
        _compared(
            eval, task, tasks_before[(eval, task)], tasks_after[(eval, task)], alpha, confidence
        )
        for eval, task in shared
    ]
    adjusted = adjust([row.p_value for row in tested], adjustment)
    pooled = []
    for eval in sorted({eval for eval, _ in shared}):
        mine = [pair for pair in shared if pair[0] == eval]
        pooled_before = [record for pair in mine for record in tasks_before[pair]]
        pooled_after = [record for pair in mine for record in tasks_after[pair]]
        pooled.append(_compared(eval, None, pooled_before, pooled_after, alpha, confidence))
    return Comparison(
        before=names[0],
        after=names[1],
        tasks=tuple(replace(row, adjusted_p=q) for row, q in zip(tested, adjusted, strict=True)),
        evals=tuple(pooled),
        only_before=tuple(sorted(tasks_before.keys() - tasks_after.keys())),
        only_after=tuple(sorted(tasks_after.keys() - tasks_before.keys())),
        protocol=was.differences(now, policy=False),  # the policy is what is compared
        alpha=alpha,
        adjustment=adjustment,
        confidence=confidence,
    )


def nothing_compared(comparison: Comparison) -> str:
    """Why a comparison of runs that share no task compared nothing, and what to do."""

    def ran(tasks: tuple[tuple[str, str], ...]) -> str:
        named = ", ".join(f"{eval}/{task}" for eval, task in tasks[:4]) or "no task"
        return named + (f" and {len(tasks) - 4} more" if len(tasks) > 4 else "")

    return (
        f"{comparison.before} and {comparison.after} share no task, so nothing was compared "
        f"({comparison.before} ran {ran(comparison.only_before)}; {comparison.after} ran "
        f"{ran(comparison.only_after)}); compare runs of the same Evals and tasks"
    )


def _compared(
    eval: str,
    task: str | None,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    alpha: float,
    confidence: float,
) -> TaskComparison:
    """One group of rollouts compared, not yet adjusted. Paired when at least half the smaller
    run's rollouts share a scene with the other run (a stray shared seed does not decide it)."""
    matched = match(before, after)
    if matched.pairs and 2 * len(matched.pairs) >= min(len(before), len(after)):
        pairs = _pairs(matched.pairs)
        return TaskComparison(
            eval,
            task,
            Design.PAIRED,
            tally_of(b for b, _ in matched.pairs),
            tally_of(a for _, a in matched.pairs),
            pairs,
            (len(matched.only_before), len(matched.only_after)),
            mcnemar_p(pairs),
            None,
            paired_interval(pairs, confidence),
            alpha,
        )
    was, now = tally_of(before), tally_of(after)
    return TaskComparison(
        eval,
        task,
        Design.UNPAIRED,
        was,
        now,
        None,
        (0, 0),
        fisher_p(was.solved, was.rollouts, now.solved, now.rollouts),
        None,
        unpaired_interval(was.solved, was.rollouts, now.solved, now.rollouts, confidence),
        alpha,
    )


def _pairs(matched: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Pairs:
    solved = [
        (
            OutcomeKind(b[keys.OUTCOME]) is OutcomeKind.SOLVED,
            OutcomeKind(a[keys.OUTCOME]) is OutcomeKind.SOLVED,
        )
        for b, a in matched
    ]
    return Pairs(
        both=sum(was and now for was, now in solved),
        lost=sum(was and not now for was, now in solved),
        gained=sum(now and not was for was, now in solved),
        neither=sum(not was and not now for was, now in solved),
    )


def format_comparison(comparison: Comparison) -> list[str]:
    before, after = comparison.before, comparison.after
    ci = f"{comparison.confidence:.0%} CI"
    header = ("eval", "task", "test", before, after, "change", ci, "lost/gained", "p", "adj. p", "")
    cells = [header]
    for row in (*comparison.tasks, *comparison.evals):
        flag = "REGRESSION" if row.regression else "improved" if row.improvement else ""
        low, high = row.interval
        cells.append(
            (
                row.eval,
                row.label,
                row.design.test,
                f"{row.before.solved}/{row.before.rollouts} ({row.before.rate:.0%})",
                f"{row.after.solved}/{row.after.rollouts} ({row.after.rate:.0%})",
                f"{row.difference:+.1%}",
                f"[{low:+.1%}, {high:+.1%}]",
                "-" if row.pairs is None else f"{row.pairs.lost}/{row.pairs.gained}",
                f"{row.p_value:.3g}",
                "-" if row.adjusted_p is None else f"{row.adjusted_p:.3g}",
                flag,
            )
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    table = [
        "  ".join(
            cell.ljust(width) if i < 3 or i == 10 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    ]
    lines = [f"PROTOCOL DIFFERS: {line}" for line in comparison.protocol_lines()] + table
    if not comparison.tasks:
        lines.append("(no task was run by both)")
    for name, pairs in ((before, comparison.only_before), (after, comparison.only_after)):
        if pairs:
            lines.append(f"only in {name}: " + ", ".join(f"{e}/{t}" for e, t in pairs))
    for row in comparison.tasks:
        for name, other, count in zip((before, after), (after, before), row.left_out, strict=True):
            if count:
                lines.append(
                    f"{row.eval}/{row.label}: {count} rollouts of {name} have no scene in "
                    f"{other}; left out of the paired test"
                )
    count = len(comparison.regressions)
    lines.append(f"tests: {comparison.method}")
    lines.append(
        f"{count} significant regression{'s' * (count != 1)} (adjusted p < {comparison.alpha:g}; "
        f"the pooled {ALL_TASKS} rows are not adjusted and do not count)"
    )
    return lines
