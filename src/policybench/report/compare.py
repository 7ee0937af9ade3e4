"""Comparing two runs task by task: both success rates, the difference, and a two-sided Fisher
exact test, with Benjamini-Hochberg adjusted p-values so many tasks don't cry wolf."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.report.stats import Tally, tally_by

ALPHA = 0.05


@dataclass(frozen=True)
class TaskComparison:
    eval: str
    task: str
    before: Tally
    after: Tally
    p_value: float
    adjusted_p: float
    alpha: float

    @property
    def difference(self) -> float:
        assert self.before.rate is not None and self.after.rate is not None
        return self.after.rate - self.before.rate

    @property
    def regression(self) -> bool:
        """Significantly worse after than before (adjusted p below alpha)."""
        return self.difference < 0 and self.adjusted_p < self.alpha

    @property
    def improvement(self) -> bool:
        return self.difference > 0 and self.adjusted_p < self.alpha


@dataclass(frozen=True)
class Comparison:
    before: str  # what the runs are called in the table (run ids)
    after: str
    tasks: tuple[TaskComparison, ...]
    only_before: tuple[tuple[str, str], ...]  # (eval, task) run only in `before`
    only_after: tuple[tuple[str, str], ...]
    alpha: float

    @property
    def regressions(self) -> tuple[TaskComparison, ...]:
        return tuple(row for row in self.tasks if row.regression)

    def lines(self) -> list[str]:
        return format_comparison(self)

    def as_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "alpha": self.alpha,
            "test": "Fisher exact, two-sided; Benjamini-Hochberg adjusted across tasks",
            "tasks": [
                {
                    keys.EVAL: row.eval,
                    keys.TASK: row.task,
                    "before": [row.before.solved, row.before.rollouts],
                    "after": [row.after.solved, row.after.rollouts],
                    "difference": row.difference,
                    "p_value": row.p_value,
                    "adjusted_p": row.adjusted_p,
                    "regression": row.regression,
                }
                for row in self.tasks
            ],
            "only_before": [list(pair) for pair in self.only_before],
            "only_after": [list(pair) for pair in self.only_after],
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
) -> Comparison:
    """Compares the tasks both runs ran; lists the ones only one of them ran."""
    from scipy.stats import false_discovery_control, fisher_exact

    tallies_before = tally_by(before, keys.EVAL, keys.TASK)
    tallies_after = tally_by(after, keys.EVAL, keys.TASK)
    shared = sorted(tallies_before.keys() & tallies_after.keys())
    p_values = [
        float(
            fisher_exact(
                [
                    [
                        tallies_before[pair].solved,
                        tallies_before[pair].rollouts - tallies_before[pair].solved,
                    ],
                    [
                        tallies_after[pair].solved,
                        tallies_after[pair].rollouts - tallies_after[pair].solved,
                    ],
                ],
                alternative="two-sided",
            ).pvalue
        )
        for pair in shared
    ]
    adjusted = [float(q) for q in false_discovery_control(p_values)] if p_values else []
    rows = tuple(
        TaskComparison(
            eval, task, tallies_before[(eval, task)], tallies_after[(eval, task)], p, q, alpha
        )
        for (eval, task), p, q in zip(shared, p_values, adjusted, strict=True)
    )
    return Comparison(
        before=names[0],
        after=names[1],
        tasks=rows,
        only_before=tuple(sorted(tallies_before.keys() - tallies_after.keys())),
        only_after=tuple(sorted(tallies_after.keys() - tallies_before.keys())),
        alpha=alpha,
    )


def format_comparison(comparison: Comparison) -> list[str]:
    before, after = comparison.before, comparison.after
    header = ("eval", "task", before, after, "change", "p", "adj. p", "")
    cells = [header]
    for row in comparison.tasks:
        flag = "REGRESSION" if row.regression else "improved" if row.improvement else ""
        cells.append(
            (
                row.eval,
                row.task,
                f"{row.before.solved}/{row.before.rollouts} ({row.before.rate:.0%})",
                f"{row.after.solved}/{row.after.rollouts} ({row.after.rate:.0%})",
                f"{row.difference:+.1%}",
                f"{row.p_value:.3g}",
                f"{row.adjusted_p:.3g}",
                flag,
            )
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i < 2 or i == 7 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    ]
    if not comparison.tasks:
        lines.append("(no task was run by both)")
    for name, pairs in ((before, comparison.only_before), (after, comparison.only_after)):
        if pairs:
            lines.append(f"only in {name}: " + ", ".join(f"{e}/{t}" for e, t in pairs))
    count = len(comparison.regressions)
    lines.append(
        f"{count} significant regression{'s' * (count != 1)} (two-sided Fisher exact test, "
        f"Benjamini-Hochberg adjusted p < {comparison.alpha:g})"
    )
    return lines
