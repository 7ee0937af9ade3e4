"""A sweep's findings: per Eval, the success rate under each setting with its interval, and each
setting compared, paired by scene, with the reference arm `none`: a latency sweep's
(`--latency-sweep`: `none` is zero latency) and a perturbation sweep's, one per axis
(`--perturb`: `none` is the scenes as they are)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from policybench import keys
from policybench.perturbation import NONE as NO_PERTURBATION
from policybench.policy.latency import NO_LATENCY as ZERO
from policybench.report.compare import TaskComparison
from policybench.report.paired import Pairs
from policybench.run.arms import ARMS

if TYPE_CHECKING:
    from policybench.report.rows import RunRows
    from policybench.run.info import RunInfo

NO_LATENCY = str(ZERO)  # the zero-latency arm's label: every other setting is compared with it
# Every sweep compares its settings with the arm `none`: zero latency's, the unperturbed scenes'.
REFERENCE = NO_LATENCY
assert NO_PERTURBATION == REFERENCE, (
    "a perturbation sweep's reference arm is named as zero latency's"
)


@dataclass(frozen=True)
class Point:
    """One setting of one Eval: its rollouts' success rate and interval, and the change from
    the reference `none` (None for `none` itself)."""

    setting: str
    rollouts: int
    solved: int
    errors: int
    rate: float
    low: float
    high: float
    versus: TaskComparison | None

    def as_json(self, named: tuple[str, str]) -> dict[str, Any]:
        """`named`: what the setting and the comparison with `none` are called."""
        setting, versus = named
        return {
            setting: self.setting,
            "rollouts": self.rollouts,
            "solved": self.solved,
            "errors": self.errors,
            "success_rate": self.rate,
            "interval": [self.low, self.high],
            versus: None if self.versus is None else self.versus.as_json(),
        }


@dataclass(frozen=True)
class Curve:
    """Success against the swept setting for one Eval, in the sweep's order of settings."""

    eval: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Sweep:
    settings: tuple[str, ...]  # `none`, then the others in the run's order (the command's)
    curves: tuple[Curve, ...]
    quantity: str = "inference latency"  # what is swept, as the plots' axis names it
    named: tuple[str, str] = (keys.INFERENCE_LATENCY, "versus_no_latency")  # as_json's names

    def as_json(self) -> dict[str, Any]:
        return {
            "reference": REFERENCE,
            "settings": list(self.settings),
            "evals": [
                {
                    keys.EVAL: curve.eval,
                    "points": [point.as_json(self.named) for point in curve.points],
                }
                for curve in self.curves
            ],
        }


def compared_arms(by_arm: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """The pairs of arms an A/B run compares, `before` first, from each arm's records in the
    run's order of arms. A latency sweep's (its arms differ in their latency alone, one being
    zero: as the records' policies say, so not while blinded) compares each setting with zero
    latency only, zero as `before`; a perturbation sweep's (--perturb: every arm but `none`
    perturbed) each perturbation with `none`; any other run compares every pair, the earlier
    arm first."""
    order = list(by_arm)
    perturbed = {arm for arm, records in by_arm.items() if _perturbed(records)}
    if perturbed and set(order) - perturbed == {NO_PERTURBATION}:
        return [(NO_PERTURBATION, arm) for arm in order if arm != NO_PERTURBATION]
    latencies = {arm: _latency_of(records) for arm, records in by_arm.items()}
    swept = (
        latencies.get(NO_LATENCY) == NO_LATENCY
        and None not in latencies.values()
        and len(set(latencies.values())) == len(latencies)
    )
    if swept:
        return [(NO_LATENCY, arm) for arm in order if arm != NO_LATENCY]
    return [(before, after) for i, before in enumerate(order) for after in order[i + 1 :]]


def _perturbed(records: Sequence[Mapping[str, Any]]) -> bool:
    return bool(records) and all(record.get(keys.PERTURBATION) for record in records)


def _latency_of(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The one latency setting an arm's records' policies say (None: none, or several)."""
    said = {str((r.get(keys.POLICY) or {}).get(keys.INFERENCE_LATENCY)) for r in records}
    return said.pop() if len(said) == 1 and "None" not in said else None


def latency_sweep(summary: RunRows, run: RunInfo | None) -> Sweep | None:
    """The sweep of a run whose arms are latency settings (run.json's inference latency lists
    them); None for any other run, and for a blinded one (its letters hide which is zero)."""
    settings = {} if run is None else run.settings
    swept, arms = settings.get(keys.INFERENCE_LATENCY), settings.get(ARMS)
    if not isinstance(swept, list) or not arms or set(arms) != set(swept):
        return None
    if NO_LATENCY not in arms:
        return None
    return swept_over(summary, (NO_LATENCY, *(arm for arm in arms if arm != NO_LATENCY)))


def swept_over(
    summary: RunRows, order: Sequence[str], quantity: str = "inference latency", **named: Any
) -> Sweep:
    """The Sweep of the run's arms `order` (`none` first): per Eval, each arm's success and
    interval, and its pooled comparison with `none`."""
    versus = _versus_reference(summary)
    rows = {(row.eval, row.arm): row for row in summary.arms}
    curves = []
    for eval in (row.eval for row in summary.evals):
        points = []
        for setting in order:
            row = rows.get((eval, setting))
            tally = None if row is None else row.stats.tally
            interval = None if tally is None else tally.interval()
            if tally is None or tally.rate is None or interval is None:
                continue
            compared = None if setting == REFERENCE else versus.get((eval, setting))
            points.append(
                Point(
                    setting,
                    tally.rollouts,
                    tally.solved,
                    tally.errors,
                    tally.rate,
                    *interval,
                    compared,
                )
            )
        curves.append(Curve(eval, tuple(points)))
    return Sweep(tuple(order), tuple(curves), quantity, **named)


def _versus_reference(summary: RunRows) -> dict[tuple[str, str], TaskComparison]:
    """Each Eval's pooled comparison of a setting with `none`, `none` as `before` (an arm
    listed before it, as unblinding may order them, was compared the other way round)."""
    found: dict[tuple[str, str], TaskComparison] = {}
    for arm_comparison in summary.versus:
        comparison = arm_comparison.comparison
        for row in comparison.evals:
            if comparison.before == REFERENCE:
                found[(row.eval, comparison.after)] = row
            elif comparison.after == REFERENCE:
                found[(row.eval, comparison.before)] = _reversed(row)
    return found


def _reversed(row: TaskComparison) -> TaskComparison:
    """A comparison with its sides swapped: Newcombe's interval negated, McNemar's p the same."""
    pairs = row.pairs
    if pairs is not None:
        pairs = Pairs(pairs.both, pairs.gained, pairs.lost, pairs.neither)
    low, high = row.interval
    return replace(
        row,
        before=row.after,
        after=row.before,
        pairs=pairs,
        left_out=(row.left_out[1], row.left_out[0]),
        interval=(-high, -low),
    )


@dataclass(frozen=True)
class Mark:
    """A point of a drawn curve: where it is (pixels), its interval's ends, what it says."""

    x: float
    y: float
    y_low: float
    y_high: float
    point: Point


@dataclass(frozen=True)
class Plot:
    """One Eval's curve as drawn: an SVG of `width` x `height`, the plot area from `left` to
    `right` and `top` to `bottom`, a mark per setting and the settings' x positions."""

    eval: str
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    ticks: tuple[tuple[str, float], ...]  # (setting, x)
    marks: tuple[Mark, ...]

    def y(self, rate: float) -> float:
        return self.bottom - rate * (self.bottom - self.top)

    @property
    def line(self) -> str:
        return " ".join(f"{mark.x:.1f},{mark.y:.1f}" for mark in self.marks)


def plots(sweep: Sweep, width: int = 520, height: int = 260) -> list[Plot]:
    """An SVG plot per Eval: success (with its interval) against the sweep's settings, evenly
    spaced in the sweep's order (steps, seconds and profiles share no scale)."""
    left, right, top, bottom = 52, width - 20, 16, height - 44
    step = (right - left) / max(len(sweep.settings), 1)
    x = {setting: left + step * (i + 0.5) for i, setting in enumerate(sweep.settings)}
    drawn = []
    for curve in sweep.curves:
        blank = Plot(curve.eval, width, height, left, right, top, bottom, (), ())
        marks = tuple(
            Mark(x[p.setting], blank.y(p.rate), blank.y(p.low), blank.y(p.high), p)
            for p in curve.points
        )
        drawn.append(replace(blank, ticks=tuple(x.items()), marks=marks))
    return drawn


def sweep_of(summary: RunRows, run: RunInfo | None) -> Mapping[str, Any]:
    """What the HTML report shows of a latency sweep: the sweep and its plots (empty: none)."""
    sweep = latency_sweep(summary, run)
    return {} if sweep is None else {"sweep": sweep, "plots": plots(sweep)}


def sweep_json(summary: RunRows, run: RunInfo | None) -> dict[str, Any]:
    """summary.json's `latency_sweep` (nothing for a run that swept no latency)."""
    sweep = latency_sweep(summary, run)
    return {} if sweep is None else {"latency_sweep": sweep.as_json()}
