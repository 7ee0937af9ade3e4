"""`--decide RATE[:ALPHA,BETA,DELTA]`: each Eval's rollouts run as a sequential test of "success
rate >= RATE" (policybench.decide); once it says PASS or FAIL, the Eval's later rollouts are
skipped, saying so. A FAIL fails the run as a success gate does.

The rollouts decided over are those the run selected (after -k, --suite and --shard, with those
a resumed run carried over); they run in decision order (their place within their task, then
task), and the decision is taken over the outcomes of that order's finished prefix: a process
about to run a rollout reads the run's results (as the controller writes them) and skips it
when the outcomes before it have decided. Under `-n` a few rollouts past the decision may be
running when it falls: they finish and are recorded, and do not change it.

`--decide baseline[:ALPHA,BETA,DELTA]` with `--baseline RUN` decides each Eval against that run,
paired scene by scene (policybench.decide): PASS when this run wins clearly more of the scenes
where the two differ, FAIL when it loses clearly more."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.decide import (
    PAIRED,
    PAIRED_SYNTAX,
    SYNTAX,
    Baseline,
    Decision,
    SequentialTest,
    decision_order,
    read_baseline,
    side_of,
)
from policybench.operating import Characteristic, first_enough
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.refusals import refuse
from policybench.pytest_plugin.resume import resumed_of
from policybench.pytest_plugin.rundir import baseline_dir, run_dir_of, settings_of
from policybench.pytest_plugin.workers import is_worker
from policybench.record.episode import OutcomeKind
from policybench.run.files import write_file
from policybench.run.layout import DECIDE_PLAN
from policybench.run.records import scene_key
from policybench.run.results import RESULTS, ResultsFollower

TEST = pytest.StashKey[SequentialTest | None]()
PLANS = pytest.StashKey[dict[tuple[str, str | None], Characteristic]]()  # each side's chances
PRINTED = pytest.StashKey[bool]()
# Each side's rollouts: plan index -> place in decision order, kept in that order.
ORDER = pytest.StashKey[dict[tuple[str, str | None], dict[int, int]]]()
READER = pytest.StashKey["Outcomes"]()
BASELINE = pytest.StashKey[Baseline | None]()
BASELINE_AT = pytest.StashKey[dict[str, str | None]]()  # the paired test's baseline: run, arm
# How a rollout skipped by a decision is reported: its Eval, the decision, the rollout it fell at.
SKIPPED = "decided early (--decide {verdict} at rollout {at}{arm}): not needed"
DECIDED_SKIP = re.compile(r"^(?:Skipped: )?([^:]+): (decided early \(--decide .+)$")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--decide",
        default=None,
        metavar=SYNTAX,
        help="run each Eval's rollouts as a sequential test (Wald's SPRT) of 'success rate >= "
        "RATE' and skip the rest once it says PASS or FAIL; ALPHA and BETA are its error rates "
        "(a false PASS, a false FAIL; default 0.05 each), DELTA the half-width of the "
        f"indifference zone around RATE (default 0.1). '{PAIRED_SYNTAX}', with --baseline "
        "RUN: test against that run, paired per scene, whether this run is worse by MARGIN or "
        "more (FAIL; default 0.2): ALPHA is then the chance an identical policy FAILs, BETA "
        "that one worse by MARGIN PASSes. A FAIL fails the run. The plan's exact chances of "
        "each verdict are printed before the run; a plan that decides rightly less often than "
        "1 - ALPHA and 1 - BETA is refused",
    )
    group.addoption(
        "--allow-weak-decision",
        action="store_true",
        help="run --decide on a plan that decides rightly less often than its error rates "
        "promise (its exact chances are printed all the same)",
    )


def pytest_configure(config: pytest.Config) -> None:
    given = config.getoption("decide", None)
    try:
        test = config.stash[TEST] = None if given is None else SequentialTest.parse(given)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    config.stash[BASELINE] = None
    if test is not None and test.paired:
        config.stash[BASELINE] = _read_baseline(config)


def _read_baseline(config: pytest.Config) -> Baseline:
    """The paired test's baseline: --baseline's run (its arm --baseline-arm in an A/B run),
    resolved by the controller before this run is `latest`, read by every process."""
    where = baseline_dir(config)
    if where is None:
        raise pytest.UsageError(
            f"--decide {PAIRED} decides against a baseline run: give --baseline RUN "
            "(a run directory, its results.jsonl or a run id under the reports directory)"
        )
    arm = config.getoption("baseline_arm", None)
    config.stash[BASELINE_AT] = {"run": str(where), keys.ARM: arm}
    try:
        return read_baseline(where, arm)
    except ValueError as error:
        raise pytest.UsageError(f"--decide {PAIRED}: {error}") from None


def baseline_of(config: pytest.Config) -> Baseline | None:
    """The paired test's baseline (None without one)."""
    return config.stash.get(BASELINE, None)


def baseline_dir_setting(config: pytest.Config) -> dict[str, Any]:
    """The run setting naming a paired test's baseline, for the report rebuilt later."""
    where = config.stash.get(BASELINE_AT, None)
    return {} if where is None else {keys.DECIDE_BASELINE: where}


def test_of(config: pytest.Config) -> SequentialTest | None:
    return config.stash.get(TEST, None)


Side = tuple[str, str | None]  # an Eval, and in an A/B run an arm


def side_of_item(item: pytest.Item) -> Side | None:
    planned = planned_of(item)
    if planned is None:
        return None
    return planned.eval.name, None if planned.arm is None else planned.arm.label


@pytest.hookimpl(trylast=True)  # after --suite, -k and shards have selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    test = test_of(config)
    if test is None:
        return
    selected: dict[Side, set[tuple[str, int]]] = {}
    for item in items:
        side, planned = side_of_item(item), planned_of(item)
        if side is not None and planned is not None:
            selected.setdefault(side, set()).add(
                (planned.rollout.scene.task, planned.rollout.index)
            )
    resumed = resumed_of(config)
    for record in resumed.carried.values() if resumed is not None else ():
        side = side_of(record)
        if side in selected:  # a rollout the interrupted run finished is in the order too
            selected[side].add((record[keys.TASK], record[keys.ROLLOUT_INDEX]))
    order = config.stash[ORDER] = {}
    for side, rollouts in selected.items():
        ordered = sorted(rollouts, key=lambda pair: pair[1])
        places = decision_order(ordered)
        placed = sorted(zip(places, (index for _, index in ordered), strict=True))
        order[side] = {index: place for place, index in placed}  # in decision order
    too_few = _too_few(test, order, config)
    if too_few is not None:
        return refuse(config, items, too_few)
    characteristics = config.stash[PLANS] = {
        side: Characteristic.of(test, len(places))
        for side, places in sorted(order.items(), key=str)
    }
    weak = [(side, found) for side, found in characteristics.items() if not found.enough]
    if weak and not config.getoption("allow_weak_decision"):
        return refuse(config, items, _weak(test, weak, settings_of(config).rollouts))
    if is_worker(config):  # the controller, which collects nothing, prints them
        write_file(run_dir_of(config) / DECIDE_PLAN, "\n".join(plan_lines(config)) + "\n")
    # Each Eval's items take the slots its items held, in decision order (arms of a scene stay
    # side by side), so that a run without -n meets them in that order.
    slots: dict[str, list[int]] = {}
    for at, item in enumerate(items):
        side = side_of_item(item)
        if side is not None:
            slots.setdefault(side[0], []).append(at)
    for at_list in slots.values():
        members = [items[at] for at in at_list]
        members.sort(key=lambda item: _place(order, item))
        for at, item in zip(at_list, members, strict=True):
            items[at] = item


def _place(order: dict[Side, dict[int, int]], item: pytest.Item) -> int:
    planned = planned_of(item)
    side = side_of_item(item)
    assert planned is not None and side is not None
    return order[side][planned.rollout.index]


def _too_few(test: SequentialTest, order: dict[Side, dict[int, int]], config: Any) -> str | None:
    """Why the plan is refused when a side's is too short to reach PASS with every rollout
    solved, or FAIL with none: it could never decide both ways."""
    need_pass, need_fail = test.fewest()
    need = max(need_pass, need_fail)
    short = {side: len(places) for side, places in order.items() if len(places) < need}
    if not short:
        return None
    rollouts = settings_of(config).rollouts
    named = ", ".join(
        f"{eval}{'' if arm is None else f' [{arm}]'} plans {count}"
        for (eval, arm), count in sorted(short.items(), key=str)
    )
    per_task = max(-(-need * rollouts // count) for count in short.values())
    given = PAIRED if test.paired else f"{test.rate:g}"
    return (
        f"--decide {given}: a decision needs at least {need_pass} rollouts of an Eval to "
        f"PASS (all solved) and {need_fail} to FAIL (none solved), and {named}: give "
        f"--rollouts {per_task} or more, or a wider DELTA or larger error rates ({SYNTAX})"
    )


def _weak(test: SequentialTest, weak: list[tuple[Side, Characteristic]], rollouts: int) -> str:
    """Why a plan that decides rightly too rarely is refused, with what would do."""
    named = "; ".join(f"{_label(side)}: {found.line()}" for side, found in weak)
    fails, passes = 1 - test.false_pass, 1 - test.false_fail
    enough = []
    for _, found in weak:  # plan sizes up from this one, in tenths of it, to 20 times it
        step = max(1, found.planned // 10)
        sizes = range(found.planned, 20 * found.planned, step)
        planned = first_enough(test, sizes) or found.planned + len(sizes) * step
        enough.append(-(-planned * rollouts // found.planned))
    given = f"{PAIRED} (margin {test.delta:g})" if test.paired else f"{test.rate:g}"
    wanted = (
        f"FAIL a policy worse by the margin at least {fails:.0%} and PASS an identical one at "
        f"least {passes:.0%} of the time (every scene differing)"
        if test.paired
        else f"FAIL at {test.low:g} at least {fails:.0%} and PASS at {test.high:g} at least "
        f"{passes:.0%} of the time"
    )
    return (
        f"--decide {given}: the plan cannot {wanted}: {named}; give --rollouts {max(enough)} "
        "or more, a wider DELTA or MARGIN, or --allow-weak-decision to run it anyway"
    )


def _label(side: Side) -> str:
    eval, arm = side
    return eval if arm is None else f"{eval} [{arm}]"


def plan_lines(config: pytest.Config) -> list[str]:
    """The exact chances of each verdict of each side's plan, as printed before the run."""
    return [
        f"decide plan: {_label(side)}: {found.line()}"
        for side, found in config.stash.get(PLANS, {}).items()
    ]


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """Without workers: the plans' chances, under the collection line."""
    return plan_lines(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist, on the controller: the plans' chances as the first worker computed them."""
    config = node.config
    written = run_dir_of(config) / DECIDE_PLAN
    if config.stash.get(PRINTED, False) or not written.exists():
        return
    config.stash[PRINTED] = True
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in written.read_text().splitlines():
        if reporter is not None:
            reporter.write_line(line)
    written.unlink()


class Outcomes:
    """The run's rollout outcomes as results.jsonl holds them, read on as it grows."""

    def __init__(self, path: Path) -> None:
        self.follower = ResultsFollower(path)
        # (side, plan index) -> (its scene, solved)
        self.solved: dict[tuple[Side, int], tuple[str | None, bool]] = {}

    def update(self) -> None:
        for record in self.follower.new():
            if keys.ROLLOUT_INDEX in record:
                solved = record[keys.OUTCOME] == OutcomeKind.SOLVED
                at = (side_of(record), record[keys.ROLLOUT_INDEX])
                self.solved[at] = scene_key(record), solved


def decision_before(config: pytest.Config, side: Side) -> Decision | None:
    """The decision the side's finished prefix in decision order has reached, if any."""
    test = test_of(config)
    order = config.stash.get(ORDER, {}).get(side)
    if test is None or order is None:
        return None
    reader = config.stash.get(READER, None)
    if reader is None:
        reader = config.stash[READER] = Outcomes(run_dir_of(config) / RESULTS)
    reader.update()
    prefix = []
    for index in order:  # kept in decision order: no sort on each item's setup
        found = reader.solved.get((side, index))
        if found is None:
            break
        prefix.append(found)
    baseline = baseline_of(config)
    outcomes = [solved for _, solved in prefix] if baseline is None else baseline.outcomes(prefix)
    decision = test.walk(outcomes)
    return decision if decision.decided else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    side = side_of_item(item)
    if side is None or test_of(item.config) is None:
        return
    decision = decision_before(item.config, side)
    if decision is not None and _place(item.config.stash[ORDER], item) >= decision.rollouts:
        arm = "" if side[1] is None else f" of arm {side[1]}"
        why = SKIPPED.format(verdict=decision.verdict, at=decision.rollouts, arm=arm)
        pytest.skip(f"{side[0]}: {why}")


def decided_skip(report: pytest.TestReport) -> tuple[str, str] | None:
    """(Eval name, why) when `report` skipped a rollout that a decision made unneeded."""
    if not (report.skipped and report.when == "setup" and isinstance(report.longrepr, tuple)):
        return None
    found = DECIDED_SKIP.match(report.longrepr[2])
    return None if found is None else (found[1], found[2])
