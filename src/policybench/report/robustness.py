"""A perturbation sweep's findings (`--perturb`): per axis, success against the level per Eval
(each level paired by scene with `none`, the scenes as they are), and where the failures
concentrate: every task under every perturbation, ranked by how far its success dropped from
`none`, with the paired interval of the change and McNemar's p adjusted across all those cells
(Benjamini-Hochberg), so that the top of the list is where to look first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from policybench import keys
from policybench.perturbation import NONE
from policybench.report.compare import TaskComparison
from policybench.report.sweep import Sweep, plots, swept_over

if TYPE_CHECKING:
    from policybench.report.summary import Summary
    from policybench.run.info import RunInfo

TOP = 5  # the cells the terminal shows


@dataclass(frozen=True)
class Cell:
    """One task of one Eval under one perturbation, compared (paired) with it under `none`."""

    perturbation: str  # its arm's label, e.g. camera_pose-0.1
    row: TaskComparison  # before: none, after: the perturbation
    adjusted_p: float  # across every cell of the run

    def line(self) -> str:
        row = self.row
        low, high = row.interval
        return (
            f"{row.eval} {row.task} under {self.perturbation}: {row.before.solved}/"
            f"{row.before.rollouts} -> {row.after.solved}/{row.after.rollouts} "
            f"({100 * row.difference:+.1f} pts, 95% CI [{100 * low:+.1f}, {100 * high:+.1f}]), "
            f"adj. p {self.adjusted_p:.3g}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            keys.PERTURBATION: self.perturbation,
            **self.row.as_json(),
            "adjusted_p_across_cells": self.adjusted_p,
        }


@dataclass(frozen=True)
class Robustness:
    axes: Mapping[str, Sweep]  # per axis, its levels' sweep
    cells: tuple[Cell, ...]  # most dropped first

    def lines(self) -> list[str]:
        if not self.cells:
            return []
        shown = self.cells[:TOP]
        return [
            f"where failures concentrate (task x perturbation vs none, paired; p adjusted "
            f"across {len(self.cells)} cells), the {len(shown)} largest drops:",
            *(f"  {cell.line()}" for cell in shown),
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "axes": {axis: sweep.as_json() for axis, sweep in self.axes.items()},
            "cells": [cell.as_json() for cell in self.cells],
        }


def robustness(summary: Summary, run: RunInfo | None) -> Robustness | None:
    """The findings of a run whose arms are perturbations (run.json names each arm's axis and
    level); None for any other run."""
    perturbed = {} if run is None else run.settings.get(keys.PERTURBATION)
    if not isinstance(perturbed, dict) or not perturbed:
        return None
    by_axis: dict[str, list[tuple[float, str]]] = {}
    for label, given in perturbed.items():
        by_axis.setdefault(given["axis"], []).append((float(given["level"]), label))
    named = ("arm", "versus_none")
    axes = {
        axis: swept_over(
            summary, (NONE, *(label for _, label in sorted(levels))), axis, named=named
        )
        for axis, levels in by_axis.items()
    }
    return Robustness(axes, _cells(summary, set(perturbed)))


def _order(levels: list[tuple[float, str]]) -> tuple[str, ...]:
    """An axis's arms by level, `none` (level 0) first."""
    return (NONE, *(label for _, label in sorted(levels)))


def _cells(summary: Summary, perturbed: set[str]) -> tuple[Cell, ...]:
    rows = [
        (versus.comparison.after, row)
        for versus in summary.versus
        if versus.comparison.before == NONE and versus.comparison.after in perturbed
        for row in versus.comparison.tasks
    ]
    if not rows:
        return ()
    from statsmodels.stats.multitest import multipletests

    adjusted = multipletests([row.p_value for _, row in rows], method="fdr_bh")[1]
    cells = [Cell(label, row, float(p)) for (label, row), p in zip(rows, adjusted, strict=True)]
    return tuple(sorted(cells, key=lambda cell: (cell.row.difference, cell.adjusted_p)))


def robustness_of(summary: Summary, run: RunInfo | None) -> Mapping[str, Any]:
    """What the HTML report shows: the findings and each axis's plots (empty: none)."""
    found = robustness(summary, run)
    if found is None:
        return {}
    levels = {label: given["level"] for label, given in run.settings[keys.PERTURBATION].items()}
    levels[NONE] = 0
    drawn = {  # each arm's tick names its level alone: the axis names the rest
        axis: [
            replace(plot, ticks=tuple((f"{levels[label]:g}", x) for label, x in plot.ticks))
            for plot in plots(sweep)
        ]
        for axis, sweep in found.axes.items()
    }
    return {"found": found, "plots": drawn}


def robustness_json(summary: Summary, run: RunInfo | None) -> dict[str, Any]:
    """summary.json's `robustness` (nothing for a run that perturbed nothing)."""
    found = robustness(summary, run)
    return {} if found is None else {"robustness": found.as_json()}
