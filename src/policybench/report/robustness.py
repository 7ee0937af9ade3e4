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
from policybench.perturbation import GRID, NONE, from_json
from policybench.report.compare import TaskComparison
from policybench.report.sweep import Sweep, plots, swept_over
from policybench.run.records import Tally

if TYPE_CHECKING:
    from policybench.report.rows import RunRows
    from policybench.run.info import RunInfo

TOP = 5  # the cells the terminal shows


@dataclass(frozen=True)
class Cell:
    """One task of one Eval under one perturbation, compared (paired) with it under `none`."""

    perturbation: str  # its arm's label, e.g. camera_pose-0.1
    row: TaskComparison  # before: none, after: the perturbation
    adjusted_p: float  # across every cell of the run, as its comparison's table shows it

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
class GridTable:
    """One Eval's success over a grid of two axes (--perturb-grid): a row per level of the
    first (0: not perturbed along it), a column per level of the second; the corner is `none`,
    the first row and column the axes' own arms."""

    eval: str
    axes: tuple[str, str]
    rows: tuple[float, ...]  # the first axis's levels, 0 first
    columns: tuple[float, ...]
    cells: tuple[tuple[Tally | None, ...], ...]  # [row][column]; None: that arm did not run

    def lines(self) -> list[str]:
        first, second = self.axes
        width = max(len(f"{level:g}") for level in self.rows)
        lines = [f"{self.eval}: solved over the grid, rows {first}, columns {second}:"]
        lines.append(f"  {'':<{width}}  " + "  ".join(f"{level:>7g}" for level in self.columns))
        for level, row in zip(self.rows, self.cells, strict=True):
            shown = ("-" if t is None else f"{t.solved}/{t.rollouts}" for t in row)
            lines.append(f"  {level:<{width}g}  " + "  ".join(f"{cell:>7}" for cell in shown))
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            keys.EVAL: self.eval,
            "axes": list(self.axes),
            "rows": list(self.rows),
            "columns": list(self.columns),
            "solved": [[None if t is None else t.solved for t in row] for row in self.cells],
            "rollouts": [[None if t is None else t.rollouts for t in row] for row in self.cells],
        }


@dataclass(frozen=True)
class Robustness:
    axes: Mapping[str, Sweep]  # per axis, its levels' sweep
    cells: tuple[Cell, ...]  # most dropped first
    grids: tuple[GridTable, ...] = ()  # per Eval and pair of axes, under --perturb-grid

    def lines(self) -> list[str]:
        if not self.cells:
            return []
        shown = self.cells[:TOP]
        return [
            *(line for grid in self.grids for line in [*grid.lines(), ""]),
            f"where failures concentrate (task x perturbation vs none, paired; p adjusted "
            f"across {len(self.cells)} cells), the {len(shown)} largest drops:",
            *(f"  {cell.line()}" for cell in shown),
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "axes": {axis: sweep.as_json() for axis, sweep in self.axes.items()},
            "cells": [cell.as_json() for cell in self.cells],
            **({"grids": [grid.as_json() for grid in self.grids]} if self.grids else {}),
        }


def robustness(summary: RunRows, run: RunInfo | None) -> Robustness | None:
    """The findings of a run whose arms are perturbations (run.json names each arm's axis and
    level); None for any other run."""
    perturbed = {} if run is None else run.settings.get(keys.PERTURBATION)
    if not isinstance(perturbed, dict) or not perturbed:
        return None
    by_axis: dict[str, list[tuple[float, str]]] = {}
    for label, given in perturbed.items():
        if GRID not in given:  # a grid's cells are tabled, not swept
            by_axis.setdefault(given["axis"], []).append((float(given["level"]), label))
    named = ("arm", "versus_none")
    axes = {
        axis: swept_over(
            summary, (NONE, *(label for _, label in sorted(levels))), axis, named=named
        )
        for axis, levels in by_axis.items()
    }
    return Robustness(axes, _cells(summary, set(perturbed)), _grids(summary, perturbed))


def _grids(summary: RunRows, perturbed: Mapping[str, Any]) -> tuple[GridTable, ...]:
    """A table per Eval and pair of axes a grid combined (cells of two parts)."""
    cells = {label: from_json(given) for label, given in perturbed.items() if GRID in given}
    pairs = dict.fromkeys(
        tuple(part.axis for part in cell.parts) for cell in cells.values() if len(cell.parts) == 2
    )
    tallies = {(row.eval, row.arm): row.stats.tally for row in summary.arms}
    tables = []
    for eval in dict.fromkeys(row.eval for row in summary.evals):
        for first, second in pairs:
            arm: dict[tuple[float, float], str] = {(0.0, 0.0): NONE}
            for label, given in perturbed.items():
                parts = from_json(given).parts
                levels = {part.axis: part.level for part in parts}
                if set(levels) <= {first, second} and len(parts) == len(levels):
                    arm[(levels.get(first, 0.0), levels.get(second, 0.0))] = label
            rows = tuple(sorted({a for a, _ in arm}))
            columns = tuple(sorted({b for _, b in arm}))
            table = tuple(
                tuple(tallies.get((eval, arm.get((a, b), ""))) for b in columns) for a in rows
            )
            tables.append(GridTable(eval, (first, second), rows, columns, table))
    return tuple(tables)


def _cells(summary: RunRows, perturbed: set[str]) -> tuple[Cell, ...]:
    rows = [
        (versus.comparison.after, row)
        for versus in summary.versus
        if versus.comparison.before == NONE and versus.comparison.after in perturbed
        for row in versus.comparison.tasks
    ]
    if not rows:
        return ()
    # The comparisons' tasks are adjusted as one family already (compare.adjusted_together).
    cells = [Cell(label, row, float(row.adjusted_p or 1.0)) for label, row in rows]
    return tuple(sorted(cells, key=lambda cell: (cell.row.difference, cell.adjusted_p)))


def robustness_of(summary: RunRows, run: RunInfo | None) -> Mapping[str, Any]:
    """What the HTML report shows: the findings and each axis's plots (empty: none)."""
    found = robustness(summary, run)
    if found is None:
        return {}
    perturbed = run.settings[keys.PERTURBATION]
    levels = {label: given["level"] for label, given in perturbed.items() if GRID not in given}
    levels[NONE] = 0
    drawn = {  # each arm's tick names its level alone: the axis names the rest
        axis: [
            replace(plot, ticks=tuple((f"{levels[label]:g}", x) for label, x in plot.ticks))
            for plot in plots(sweep)
        ]
        for axis, sweep in found.axes.items()
    }
    return {"found": found, "plots": drawn}


def robustness_json(summary: RunRows, run: RunInfo | None) -> dict[str, Any]:
    """summary.json's `robustness` (nothing for a run that perturbed nothing)."""
    found = robustness(summary, run)
    return {} if found is None else {"robustness": found.as_json()}
