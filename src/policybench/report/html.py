"""The HTML report: index.html (an A/B run's arms side by side and compared first, then the
overview (pooled over arms in an A/B run), success-per-task chart, distributions, every rollout)
and one page per rollout, from Jinja2 templates; self-contained, opens from disk."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.report import failures
from policybench.report.compare import Comparison
from policybench.report.robustness import robustness_of
from policybench.report.rollout_page import page_trace, write_plots_js
from policybench.report.rollout_table import broken, page_name, paged, table_columns, table_data
from policybench.report.rows import Row
from policybench.report.specs import violations
from policybench.report.stats import infer_ms, step_wall_ms
from policybench.report.summary import Summary
from policybench.report.sweep import sweep_of
from policybench.run.files import make_folder, write_file
from policybench.run.info import RunInfo
from policybench.run.records import rollout_id
from policybench.run.results import OUTCOMES
from policybench.run.run_verdict import RunVerdict

INDEX = "index.html"
ROLLOUTS = "rollouts"
BINS = 20


@dataclass(frozen=True)
class Findings:
    """Everything a report shows about one run."""

    summary: Summary
    records: tuple[Mapping[str, Any], ...]
    run: RunInfo | None
    verdict: RunVerdict | None = None  # the run's, as summary.json records it
    notes: tuple[str, ...] = ()
    comparison: Comparison | None = None
    breaches: tuple[str, ...] = ()  # the run's failed gates and decisions, as the terminal says


def write_html(run_dir: Path, findings: Findings, all_pages: bool = False) -> Path:
    """Writes index.html and rollouts/<n>.html into `run_dir` (a page for each rollout, or in a
    large run for those rollout_table.paged chooses, unless `all_pages`); returns index.html's
    path."""
    env = _templates()
    chosen = paged(findings.records, all_pages)
    index = run_dir / INDEX
    write_file(index, _index_page(env, run_dir, findings, chosen))
    pages = make_folder(run_dir / ROLLOUTS)
    template = env.get_template("rollout.html.j2")
    plots_js = write_plots_js(pages)
    written = sorted(chosen)
    rollouts = {i: rollout_row(i, findings.records[i]) for i in written}
    for k, i in enumerate(written):
        row, record = rollouts[i], findings.records[i]
        trace = page_trace(run_dir, record)
        write_file(
            pages / row["page"],
            template.render(
                row=row,
                record=record,
                wrapped=loop_run([record]),
                statics=flatten(record),
                trace=trace.embedded,
                no_trace=trace.missing,
                trace_left_out=trace.left_out,
                plots_js=plots_js,
                violations=violations(record),
                previous=rollouts[written[k - 1]]["page"] if k else None,
                next=rollouts[written[k + 1]]["page"] if k + 1 < len(written) else None,
            ),
        )
    return index


def _templates() -> Any:
    """The report's Jinja2 templates, escaped, with its filters."""
    from policybench.report.jinja import environment

    env = environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = percent
    env.filters["points"] = points
    return env


def _index_page(env: Any, run_dir: Path, findings: Findings, chosen: Set[int]) -> str:
    """index.html: the overview, charts, histograms and the table of rollouts (those `chosen`
    with a page of their own)."""
    summary = findings.summary
    judged = bool(summary.specs)  # a column and a filter of the specs each rollout broke
    filters = (
        keys.EVAL,
        keys.TASK,
        *((keys.ARM,) if summary.arms else ()),
        keys.OUTCOME,
        *((BROKEN,) if judged else ()),
    )
    columns = table_columns(findings.records, chosen)
    tasks = summary.arm_tasks or summary.tasks  # an A/B run charts each arm's own rates
    histograms = [
        histogram("Episode length", "steps", NO_STEPS, findings.records, episode_steps),
        histogram("Wall time per step", "ms", NO_STEPS, findings.records, step_wall_ms),
        histogram(
            "Model call wall time (rollout mean)", "ms", NO_CALLS, findings.records, infer_ms
        ),
    ]
    return env.get_template("index.html.j2").render(
        f=findings,
        wrapped=loop_run(findings.records),
        title=findings.run.run_id if findings.run else run_dir.name,
        overview=[*summary.evals, summary.overall],
        chart=task_chart(tasks),
        all_errored=[
            row.label for row in tasks if row.stats.tally.errors == row.stats.tally.rollouts
        ],
        arms=arm_grid(summary.arms),
        latency_sweep=sweep_of(summary, findings.run),
        robustness=robustness_of(summary, findings.run),
        pages={rollout_id(findings.records[i]): page_name(i) for i in chosen},
        cut=failures.CUT,
        sampled=failures.SAMPLED,
        scale_solved=failures.SCALE_SOLVED,
        examples=failures.EXAMPLES,
        realtime=[
            row
            for row in (summary.arms or [*summary.evals, summary.overall])
            if row.stats.realtime is not None
        ],
        histograms=[h for h in histograms if h.edges],  # an empty one would be an empty box
        table=table_data(columns),
        paged_count=len(chosen),
        rollout_count=len(findings.records),
        choices={
            name: sorted({str(value) for cell in columns[name] for value in _choices(cell)})
            for name in filters
        },
        judged=judged,
    )


BROKEN = "broken"  # a rollout row's specs violated (names); NONE_BROKEN when it broke none
NONE_BROKEN = "none"


def _choices(value: Any) -> list[Any]:
    """What a filter offers for a row's value: each of a list's items, else the value."""
    if isinstance(value, list):
        return value or [NONE_BROKEN]
    return [value]


def of_loop(record: Mapping[str, Any]) -> bool:
    """Whether `record` is an episode of a loop policybench.wrap recorded: of no plan (a harness
    rollout's record says how many its Eval planned), in the loop's wall time (no simulated
    clock, no model calls)."""
    return keys.ROLLOUT_COUNT not in record and record.get(keys.SIM_S) is None


def loop_run(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `records` are all episodes of loops (a run policybench.wrap recorded)."""
    return bool(records) and all(of_loop(record) for record in records)


def percent(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def points(change: float | None, sign: str) -> str:
    """A change of success rate in percentage points; None (none within 0..1 detectable) as
    "none"."""
    return "none" if change is None else f"{sign}{100 * change:.0f} pts"


def rollout_row(index: int, record: Mapping[str, Any], paged: bool = True) -> dict[str, Any]:
    """A rollout's row, as its page shows it (the index's table has the same cells:
    rollout_table.table_columns); `paged`: it gets a page of its own."""
    scene = record.get(keys.SCENE) or {}
    wall = step_wall_ms(record)
    return {
        "index": index,
        "page": page_name(index) if paged else None,
        keys.EVAL: record[keys.EVAL],
        keys.TASK: record[keys.TASK],
        keys.SEED: scene.get(keys.SEED, ""),
        keys.OUTCOME: record[keys.OUTCOME],
        keys.STEPS: record[keys.STEPS],
        keys.SIM_S: record[keys.SIM_S],
        "wall_ms": None if wall is None else round(wall, 3),
        keys.REASON: record.get(keys.REASON, ""),
        keys.NODEID: record.get(keys.NODEID, ""),
        keys.VIDEO: record.get(keys.VIDEO),
        keys.VIDEO_MISSING: record.get(keys.VIDEO_MISSING),
        BROKEN: broken(record),
        **({keys.ARM: record[keys.ARM]} if keys.ARM in record else {}),
    }


@dataclass(frozen=True)
class ArmGrid:
    """An A/B run's success rates side by side: a line per Eval (and all), a column per arm."""

    arms: tuple[str, ...]
    lines: tuple[tuple[str, tuple[Row | None, ...]], ...]  # (eval, its row under each arm)


def arm_grid(rows: Sequence[Row]) -> ArmGrid | None:
    if not rows:
        return None
    arms = tuple(dict.fromkeys(str(row.arm) for row in rows))
    evals = list(dict.fromkeys(row.eval for row in rows))
    found = {(row.eval, str(row.arm)): row for row in rows}
    if len(evals) == 2:  # one Eval: its total says it again
        evals = evals[:1]
    return ArmGrid(arms, tuple((e, tuple(found.get((e, arm)) for arm in arms)) for e in evals))


def flatten(record: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested statics as (dotted name, value) rows."""
    rows = []
    for name, value in sorted(record.items()):
        if isinstance(value, Mapping) and value:
            rows += flatten(value, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", "" if value is None else str(value)))
    return rows


@dataclass(frozen=True)
class Bar:
    label: str
    colour: int  # the index of its Eval (of its arm, in an A/B run) in the chart's order
    rate: float
    low: float
    high: float
    solved: int
    rollouts: int


def task_chart(tasks: Sequence[Row]) -> list[Bar]:
    """A bar per task (per task and arm in an A/B run, a task's arms next to each other), but
    for tasks whose every rollout errored: they have no success rate to draw."""
    colours = list(dict.fromkeys(row.eval if row.arm is None else row.arm for row in tasks))
    bars = []
    for row in sorted(tasks, key=lambda row: (row.eval, str(row.task))):  # stable: arm order
        tally, interval = row.stats.tally, row.interval()
        if tally.rate is None or interval is None or tally.errors == tally.rollouts:
            continue
        bars.append(
            Bar(
                row.label if row.arm is None else f"{row.label} [{row.arm}]",
                colours.index(row.eval if row.arm is None else row.arm),
                tally.rate,
                *interval,
                tally.solved,
                tally.rollouts,
            )
        )
    return bars


@dataclass(frozen=True)
class Histogram:
    title: str
    unit: str
    edges: tuple[float, ...]
    counts: Mapping[str, tuple[int, ...]]  # outcome -> count per bin
    tallest: int
    missing: int  # rollouts without a value
    missing_means: str  # why a rollout has none: NO_STEPS, NO_CALLS


NO_STEPS, NO_CALLS = "no steps", "no model calls"


def episode_steps(record: Mapping[str, Any]) -> int | None:
    """A rollout's episode length (None when it made no step)."""
    return record[keys.STEPS] or None


def histogram(
    title: str,
    unit: str,
    missing_means: str,
    records: Sequence[Mapping[str, Any]],
    value: Callable[[Mapping[str, Any]], float | None],
) -> Histogram:
    """Counts per bin, stacked by outcome; `missing_means`: why `value` gives a rollout None."""
    found = [(record[keys.OUTCOME], v) for record in records if (v := value(record)) is not None]
    if not found:
        return Histogram(title, unit, (), {}, 0, len(records), missing_means)
    outcomes, values = np.array([o for o, _ in found]), np.array([v for _, v in found], float)
    # Values that differ only in a float's last bits are one value to the eye, and numpy cannot
    # cut so narrow a range into bins: count them apart at float32's precision.
    distinct = len(np.unique(values.astype(np.float32)))
    edges = np.histogram_bin_edges(values, bins=min(BINS, distinct))
    counts = {
        outcome: tuple(int(n) for n in np.histogram(values[outcomes == outcome], edges)[0])
        for outcome in OUTCOMES
    }
    tallest = int(np.histogram(values, edges)[0].max())
    return Histogram(
        title,
        unit,
        tuple(float(e) for e in edges),
        counts,
        tallest,
        len(records) - len(values),
        missing_means,
    )
