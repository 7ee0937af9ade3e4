"""Success gates, like `--cov-fail-under`: an overall floor, per-Eval floors (declared on the
Eval or in a floors file) and significant regressions against a baseline run fail the run.

The Evals' declared floors are read at collection, in whichever processes collect: under xdist
the workers, which hand them to the controller when they finish (xdist's workeroutput)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.decide import Verdict
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.refusals import refuse
from policybench.pytest_plugin.resume import resumed_of
from policybench.pytest_plugin.rundir import baseline_dir
from policybench.pytest_plugin.workers import is_worker
from policybench.record.protocol import OVERRIDE
from policybench.report.compare import ALPHA, ArmPick, Comparison, nothing_compared
from policybench.report.drift import EvalDrift
from policybench.report.power import POWER, unpaired_requirement, unpaired_size
from policybench.report.rows import DecidedSide, Row
from policybench.report.stats import tally_of
from policybench.report.summary import OVERALL, Summary
from policybench.run.records import latest_per_rollout
from policybench.run.results import RESULTS, read_results
from policybench.run.verdicts import (
    AUTOMATIC_SOURCE,
    SOURCE_HELP,
    judged_records,
    parse_outcome_source,
)

DECLARED_FLOORS = pytest.StashKey[dict[str, float]]()  # eval name -> Eval.success_floor
REGRESSION_MARGIN = 0.2  # the drop of success --fail-on-regression must catch, by default
WORKER_OUTPUT = "policybench_declared_floors"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--success-fail-under",
        type=float,
        default=None,
        metavar="RATE",
        help="fail the run if the overall success rate is below RATE (0..1, e.g. 0.8)",
    )
    group.addoption(
        "--success-floors",
        default=None,
        metavar="FILE",
        help='JSON file of per-Eval floors, {"eval name": rate}; overrides Eval.success_floor',
    )
    group.addoption(
        "--baseline",
        default=None,
        metavar="RUN",
        help="compare this run task by task with RUN (a run directory or a run id under the "
        "report dir) at the end",
    )
    group.addoption(
        "--baseline-arm",
        default=None,
        metavar="NAME",
        help="with --baseline of an A/B run: compare with its arm NAME",
    )
    group.addoption(
        "--fail-on-regression",
        action="store_true",
        help="with --baseline: fail the run if any task is significantly worse",
    )
    _regression_plan_options(group)
    group.addoption(
        "--outcome-source",
        default=AUTOMATIC_SOURCE,
        metavar="SOURCE",
        help=f"what the success gates judge: {SOURCE_HELP}",
    )
    group.addoption(
        "--regression-alpha",
        type=float,
        default=ALPHA,
        help=f"significance level of --baseline's per-task test (default {ALPHA})",
    )


def _regression_plan_options(group: pytest.OptionGroup) -> None:
    """What --fail-on-regression's plan must be able to catch, and the way out of the check."""
    group.addoption(
        "--regression-margin",
        type=float,
        default=REGRESSION_MARGIN,
        metavar="DROP",
        help="with --fail-on-regression: the smallest drop of an Eval's success rate the gate "
        f"must catch (default {REGRESSION_MARGIN}); a plan with too few rollouts to catch it "
        f"with {POWER * 100:g}%% power is refused before anything runs, with the rollouts per task "
        "it needs",
    )
    group.addoption(
        "--allow-weak-regression-gate",
        action="store_true",
        help="run --fail-on-regression with a plan too small to catch --regression-margin "
        "(the gate then fails only on what it can detect)",
    )


@dataclass(frozen=True)
class GateSettings:
    overall_floor: float | None
    eval_floors: Mapping[str, float]  # from the floors file
    baseline: str | None
    fail_on_regression: bool
    alpha: float
    allow_protocol_change: bool = False  # judge regressions against another protocol's baseline
    outcome_source: str = AUTOMATIC_SOURCE  # automatic, operator or operator:NAME
    baseline_arm: str | None = None  # the arm of an A/B baseline this run is compared with

    @property
    def arm_pick(self) -> ArmPick:
        """The baseline's arm, and how to pick one: this run's arms can be picked afterwards,
        by report compare."""
        how = ("--baseline-arm NAME", "`policybench report compare BASELINE RUN --after-arm NAME`")
        return ArmPick(before=self.baseline_arm, how=how)


def read_gate_settings(config: pytest.Config) -> GateSettings:
    overall = config.getoption("success_fail_under")  # options.refusals checked both
    alpha = config.getoption("regression_alpha")
    floors_file = config.getoption("success_floors")
    baseline = config.getoption("baseline")
    if config.getoption("fail_on_regression") and baseline is None:
        raise pytest.UsageError("--fail-on-regression needs --baseline RUN to compare against")
    if config.getoption("baseline_arm") is not None and baseline is None:
        raise pytest.UsageError(
            "--baseline-arm needs --baseline RUN, the A/B run it names an arm of"
        )
    source = config.getoption("outcome_source")
    try:
        parse_outcome_source(source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    return GateSettings(
        overall_floor=overall,
        eval_floors={} if floors_file is None else read_floors(Path(floors_file)),
        baseline=baseline,
        fail_on_regression=config.getoption("fail_on_regression"),
        alpha=alpha,
        allow_protocol_change=config.getoption("allow_protocol_change"),
        outcome_source=source,
        baseline_arm=config.getoption("baseline_arm"),
    )


def read_floors(path: Path) -> dict[str, float]:
    expected = 'a JSON object of Eval name to success rate in [0, 1], e.g. {"pusht": 0.6}'
    try:
        floors = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise pytest.UsageError(f"--success-floors {path}: {error}; expected {expected}") from None
    bad = (
        [f"got {type(floors).__name__}"]
        if not isinstance(floors, dict)
        else [
            f"{name!r}: {rate!r}"
            for name, rate in floors.items()
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1
        ]
    )
    if bad:
        raise pytest.UsageError(f"--success-floors {path}: {'; '.join(bad)}; expected {expected}")
    return {name: float(rate) for name, rate in floors.items()}


def pytest_configure(config: pytest.Config) -> None:
    """The controller resolves --baseline now, for the workers that check the regression
    plan against it (rundir.baseline_dir)."""
    if config.getoption("fail_on_regression"):
        baseline_dir(config)


@pytest.hookimpl(trylast=True)  # after --suite and -k have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    floors = config.stash.setdefault(DECLARED_FLOORS, {})
    for item in items:
        planned = planned_of(item)
        if planned is not None and planned.eval.success_floor is not None:
            floors[planned.eval.name] = planned.eval.success_floor
    weak = _weak_regression_gate(config, items)
    if weak is not None:
        refuse(config, items, weak)


def _weak_regression_gate(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """Why --fail-on-regression's plan is refused: an Eval (of an arm) plans too few rollouts
    on the baseline's tasks for its pooled test to catch a drop of --regression-margin from the
    baseline's rate with POWER, by the unpaired design (`policybench plan`'s pooled claim;
    pairing by scene can only help); None when every Eval's plan can."""
    where = baseline_dir(config) if config.getoption("fail_on_regression") else None
    if where is None or config.getoption("allow_weak_regression_gate"):
        return None
    margin, alpha = config.getoption("regression_margin"), config.getoption("regression_alpha")
    arm = config.getoption("baseline_arm", None)
    baseline = [
        record
        for record in latest_per_rollout(read_results(where / RESULTS).records)
        if arm is None or str(record.get(keys.ARM)) == arm
    ]
    planned: dict[tuple[str, str | None], set[str]] = {}
    counts: dict[tuple[str, str | None], int] = {}
    ran = {(str(r[keys.EVAL]), str(r[keys.TASK])) for r in baseline}
    resumed = resumed_of(config)
    carried = {} if resumed is None else resumed.carried  # they count, as run (once)
    selected = [
        (p.eval.name, p.rollout.scene.task, None if p.arm is None else p.arm.label)
        for item in items
        if (p := planned_of(item)) is not None and item.nodeid not in carried
    ]
    selected += [(str(r[keys.EVAL]), str(r[keys.TASK]), r.get(keys.ARM)) for r in carried.values()]
    for eval, task, arm in selected:
        if (eval, task) not in ran:
            continue
        side = eval, None if arm is None else str(arm)
        planned.setdefault(side, set()).add(task)
        counts[side] = counts.get(side, 0) + 1
    short, baseline_short = [], False
    for (eval, label), tasks in sorted(planned.items(), key=str):
        shared = [r for r in baseline if r[keys.EVAL] == eval and r[keys.TASK] in tasks]
        rate = tally_of(shared).rate
        if not rate:  # nothing solved before: nothing to lose
            continue
        needed = _needed(rate, max(rate - margin, 0.0), alpha)
        # A comparison pairs at most as many scenes as the smaller side ran.
        if min(counts[(eval, label)], len(shared)) < needed:
            per_task = -(-needed // len(tasks))
            named = eval if label is None else f"{eval} [arm {label}]"
            said = (
                f"{named} plans {counts[(eval, label)]} rollouts on {len(tasks)} tasks"
                if counts[(eval, label)] < needed
                else f"{named}'s baseline ran {len(shared)} rollouts on its {len(tasks)} tasks"
            )
            baseline_short = baseline_short or len(shared) < needed
            short.append(
                f"{said} and needs {needed} on each side ({per_task} a task: policybench plan "
                f"--baseline {rate:.3g} --detect {margin:g} --tasks {len(tasks)}) to catch a "
                f"drop from the baseline's {rate:.1%} to {max(rate - margin, 0.0):.1%} with "
                f"{POWER:.0%} power"
            )
    return _weak_gate_line(margin, short, where.name if baseline_short else None)


def _weak_gate_line(margin: float, short: list[str], baseline: str | None) -> str | None:
    """The refusal of a plan too small for its gate (None: none is), naming the `baseline` where
    it is the baseline that ran too few."""
    if not short:
        return None
    baseline_too = (
        f" (the baseline {baseline} needs as many: rerun it with the same --rollouts)"
        if baseline is not None
        else ""
    )
    return (
        f"--fail-on-regression could pass a regression of {margin * 100:g} points unseen: "
        f"{'; '.join(short)}; give --rollouts so each Eval reaches what it needs{baseline_too}, "
        "a larger --regression-margin, or --allow-weak-regression-gate to run this gate anyway"
    )


def _needed(rate: float, target: float, alpha: float) -> int:
    """The rollouts a drop from `rate` to `target` needs, as `policybench plan` says: the
    formula's count checked by the exact test, or beyond EXACT_CHECKED the formula's alone (the
    exact search takes seconds there, in every worker; the two are close by then)."""
    formula = math.ceil(unpaired_size(rate, target, alpha, POWER))
    if formula > EXACT_CHECKED:
        return formula
    return unpaired_requirement(rate, target, alpha, POWER).needed


EXACT_CHECKED = 400


BREACHED = pytest.StashKey[bool]()  # set by the controller when a gate failed


@pytest.hookimpl(trylast=True)  # after plugins that fold their own status into the exit code
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if is_worker(config):
        config.workeroutput[WORKER_OUTPUT] = config.stash.get(DECLARED_FLOORS, {})
    elif config.stash.get(BREACHED, False) and session.exitstatus in (
        pytest.ExitCode.OK,
        pytest.ExitCode.NO_TESTS_COLLECTED,
    ):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist, on the controller: a worker's declared floors join the run's."""
    floors = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT, {})
    node.config.stash.setdefault(DECLARED_FLOORS, {}).update(floors)


def declared_floors(config: pytest.Config) -> dict[str, float]:
    """The success floors the run's Evals declare."""
    return config.stash.get(DECLARED_FLOORS, {})


def judged_summary(
    summary: Summary, records: Sequence[Mapping[str, Any]], run_dir: Path, settings: GateSettings
) -> tuple[Summary, list[str]]:
    """The summary the floors judge, and notes: the run's own, or under `--outcome-source
    operator` one of the operators' verdicts (verdicts.jsonl), the rollouts they have not
    judged named in the notes (counted, not silently dropped)."""
    if settings.outcome_source == AUTOMATIC_SOURCE:
        return summary, []
    try:
        judged, notes = judged_records(records, run_dir, settings.outcome_source)
    except ValueError as error:
        return Summary.of([]), [str(error)]
    arms = [str(row.arm) for row in summary.arms]
    return Summary.of(judged, arms=list(dict.fromkeys(arms))), [
        f"success gates judged operator verdicts ({settings.outcome_source}): "
        f"{len(judged)} of {len(records)} rollouts",
        *notes,
    ]


@dataclass(frozen=True)
class Breach:
    what: str  # "overall", "eval pusht", "regression pusht/push-t"
    rate: float
    interval: tuple[float, float]
    floor: str

    def line(self) -> str:
        low, high = self.interval
        return (
            f"FAIL {self.what}: success {self.rate:.1%} (95% CI [{low:.1%}, {high:.1%}]) "
            f"below {self.floor}"
        )


def floor_breaches(
    summary: Summary,
    settings: GateSettings,
    declared: Mapping[str, float],
    ran: Summary | None = None,
) -> tuple[list[Breach], list[str]]:
    """Breaches of the overall and per-Eval floors, and notes on floors that were not checked.
    In an A/B run every arm is held to each floor on its own rows (a rate pooled over arms mixes
    the policies compared), and each breach names its arm. `ran`: the run's own summary where
    `summary` judges operator verdicts, to tell a gate over unscored rollouts from one over
    rollouts that did not run."""
    breaches: list[Breach | NothingFinished] = []
    notes: list[str] = []
    floors = {name: (rate, "Eval.success_floor") for name, rate in declared.items()}
    floors.update({name: (rate, "--success-floors") for name, rate in settings.eval_floors.items()})
    own = {arm: (overall, rows) for arm, overall, rows in _judged(ran)} if ran else {}
    for arm, overall, rows in _judged(summary):
        named = "" if arm is None else f", arm {arm}"
        own_overall, own_rows = own.get(arm, (None, {}))
        if settings.overall_floor is not None:
            breaches += _below(
                overall,
                f"overall{named}",
                settings.overall_floor,
                "--success-fail-under",
                _unscored(overall, own_overall, settings),
            )
        for name, (rate, source) in sorted(floors.items()):
            if arm is None or name in rows or not _ran_under_any_arm(summary, name):
                unscored = _unscored(rows.get(name), own_rows.get(name), settings)
                breaches += _below(rows.get(name), f"eval {name}{named}", rate, source, unscored)
    return breaches, notes


def _unscored(judged: Row | None, own: Row | None, settings: GateSettings) -> str | None:
    """Why a gate over operator verdicts has nothing to judge when its rollouts ran but none
    has a verdict yet (None otherwise)."""
    finished = 0 if own is None else own.stats.tally.solved + own.stats.tally.unsolved
    tally = None if judged is None else judged.stats.tally
    if not finished or (tally is not None and tally.solved + tally.unsolved):
        return None
    return (
        f"{finished} rollout{'s' * (finished != 1)} ran, none has an operator verdict yet "
        f"(--outcome-source {settings.outcome_source}); score them with `policybench score RUN`, "
        "then judge again with this command and --resume RUN"
    )


def _judged(summary: Summary) -> list[tuple[str | None, Row | None, dict[str, Row]]]:
    """What the gates judge: (arm, its overall row, its rows per Eval) for each arm of an A/B
    run, in the run's order; (None, the run's overall row, its rows per Eval) otherwise."""
    if not summary.arms:
        return [(None, summary.overall, {row.eval: row for row in summary.evals})]
    by_arm: dict[str | None, list[Row]] = {}
    for row in summary.arms:
        by_arm.setdefault(row.arm, []).append(row)
    return [
        (
            arm,
            next((row for row in rows if row.eval == OVERALL), None),
            {row.eval: row for row in rows if row.eval != OVERALL},
        )
        for arm, rows in by_arm.items()
    ]


def _ran_under_any_arm(summary: Summary, eval: str) -> bool:
    """An arm that ran none of an Eval's rollouts (balanced assignment over few scenes) is not
    judged on it, unless no arm ran it: then each arm's gate is over nothing and fails."""
    return any(row.eval == eval for row in summary.arms)


def _below(
    row: Row | None, what: str, floor: float, source: str, unscored: str | None = None
) -> list[Breach | NothingFinished]:
    """A breach when `row` is below `floor`, or when none of its rollouts finished (a gate over
    nothing fails: all skipped, deselected or errored, or, judging operator verdicts,
    `unscored`: none scored yet)."""
    gate = f"floor {floor:.1%} ({source})"
    tally = None if row is None else row.stats.tally
    if tally is None or tally.solved + tally.unsolved == 0:
        if unscored is not None:
            return [NothingFinished(what, gate, unscored, judged="judged")]
        why = "none ran" if tally is None or not tally.rollouts else f"all {tally.errors} errored"
        return [NothingFinished(what, gate, why)]
    interval = tally.interval()
    if tally.rate is None or interval is None or tally.rate >= floor:
        return []
    return [Breach(what, tally.rate, interval, gate)]


@dataclass(frozen=True)
class NothingFinished:
    """A gate that covers rollouts of which none finished: it cannot hold, so it fails."""

    what: str
    gate: str
    why: str  # "none ran", "all 3 errored", ...
    judged: str = "finished"  # "judged": none has an operator verdict to count

    def line(self) -> str:
        return (
            f"FAIL {self.what}: no rollout {self.judged} ({self.why}), so {self.gate} cannot hold"
        )


@dataclass(frozen=True)
class Refusal:
    """A regression gate that cannot be judged: the baseline ran another protocol, or shares
    no task with this run."""

    why: str

    def line(self) -> str:
        return f"FAIL --fail-on-regression: {self.why}"


@dataclass(frozen=True)
class DecidedFail:
    """An Eval (or an arm) whose sequential test (--decide) said FAIL."""

    side: DecidedSide

    def line(self) -> str:
        return f"FAIL {self.side.label}: --decide {self.side.decision.line()}"


def decision_breaches(summary: Summary) -> list[DecidedFail]:
    """The run's --decide decisions that said FAIL: each fails the run as a floor does."""
    return [
        DecidedFail(side) for side in summary.decisions if side.decision.verdict == Verdict.FAIL
    ]


@dataclass(frozen=True)
class DriftFailed:
    """An Eval whose success changed significantly under the candidate pins (--env-pins), or
    whose env did not load under them: with --fail-on-drift, it fails the run."""

    drift: EvalDrift

    def line(self) -> str:
        return f"FAIL drift {self.drift.line()}"


def drift_breaches(summary: Summary) -> list[DriftFailed]:
    return [DriftFailed(drift) for drift in summary.drift if drift.failed]


def regression_breaches(comparison: Comparison, settings: GateSettings) -> list[Breach | Refusal]:
    breaches: list[Breach | Refusal] = []
    if not settings.allow_protocol_change:
        breaches += [
            Refusal(
                f"protocol differs from the baseline's: {line}; rerun the baseline with this "
                f"run's settings, or pass {OVERRIDE} to judge regressions anyway"
            )
            for line in comparison.protocol_lines()
        ]
    if not comparison.tasks:  # the runs' arms do not match, or they share no task
        breaches.append(Refusal(nothing_compared(comparison)))
    tasks = Counter((row.eval, row.arm) for row in comparison.tasks)
    pooled = [row for row in comparison.pooled_regressions if tasks[(row.eval, row.arm)] > 1]
    for row in (*pooled, *comparison.regressions):  # an Eval of one task: its task's row
        assert row.after.rate is not None and row.before.rate is not None
        interval = row.after.interval()
        assert interval is not None
        low, high = row.interval
        evidence = (
            f"{row.pairs.lost} of {row.pairs.count} paired scenes lost, {row.pairs.gained} "
            "gained, exact McNemar"
            if row.pairs is not None
            else "unpaired, Fisher exact"
            if row.task is not None
            else "unpaired, exact stratified by task"
        )
        across = "tasks" if row.task is not None else "Evals, Holm"
        breaches.append(
            Breach(
                f"regression {row.where}/{row.label}",
                row.after.rate,
                interval,
                f"baseline {row.before.rate:.1%} (change {row.difference:+.1%}, "
                f"{comparison.confidence:.0%} CI [{low:+.1%}, {high:+.1%}]; {evidence}, p "
                f"adjusted across {across} = {row.adjusted_p:.3g} < {comparison.alpha:g})",
            )
        )
    return breaches
