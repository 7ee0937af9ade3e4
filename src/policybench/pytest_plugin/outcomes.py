"""Outcome reporting and the rollout's record: a solved rollout passes, an unsolved one gets its
own status (`u`, UNSOLVED) without failing the run, an error is an error with its reason.

Each rollout's record is built by `rollout_record`, the one builder of records: from what its
plan says (`planned_record`: statics, arm, item id), its Episode and what the run added (the
process, retries, recorders' `add_to_record`) and, in a run with latency, its real-time figures
(record.realtime). A rollout whose worker crashed gets its record from the same builder on the
controller. Records travel to the controller on the call report (under xdist too). With
`--junitxml`, the testcase carries the outcome, reason, steps and sum reward as properties.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any

import pytest

from policybench import keys
from policybench.harness import planned_statics
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.fixtures import (
    EPISODE,
    RECORD_FIELDS,
    PolicyCannotRun,
    RolloutError,
)
from policybench.record.episode import OutcomeKind
from policybench.run.records import rollout_record

RECORD = "policybench"  # name of the call report's user property that carries the record
# The user property of a rollout skipped because its policy cannot run on its Eval: [eval, why].
NO_POLICY = "policybench_no_policy"
JUNIT_FIELDS = (keys.EVAL, keys.TASK, keys.OUTCOME, keys.REASON, keys.STEPS, keys.SUM_REWARD)


def junit_properties(record: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A rollout's testcase properties in --junitxml: JUNIT_FIELDS, its arm in an A/B run, its
    scene (JSON) and each trajectory spec's margin (`policybench.margin.<spec>`)."""
    found = [(f"policybench.{name}", record.get(name)) for name in JUNIT_FIELDS]
    if record.get(keys.ARM) is not None:
        found.append((f"policybench.{keys.ARM}", record[keys.ARM]))
    if isinstance(record.get(keys.SCENE), Mapping):
        scene = json.dumps(record[keys.SCENE], sort_keys=True, default=str)
        found.append((f"policybench.{keys.SCENE}", scene))
    for name, judged in sorted((record.get(keys.SPECS) or {}).items()):
        if isinstance(judged, Mapping) and judged.get("margin") is not None:
            found.append((f"policybench.margin.{name}", judged["margin"]))
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    if call.when != "call":
        return report
    episode = item.stash.get(EPISODE, None)
    planned = planned_record(item)
    if episode is not None and planned is not None:
        record = rollout_record(planned, episode, item.stash.get(RECORD_FIELDS, {}))
        report.user_properties.append((RECORD, record))
        # The item's own properties reach --junitxml (pytest's record_property way).
        item.user_properties += junit_properties(record)
    if call.excinfo is not None and isinstance(call.excinfo.value, PolicyCannotRun):
        why = [planned[keys.EVAL] if planned else "", str(call.excinfo.value.msg)]
        report.user_properties.append((NO_POLICY, why))
    if call.excinfo is not None and isinstance(call.excinfo.value, RolloutError):
        outcome = call.excinfo.value.outcome
        # What serves the policy failed (a server unreachable, say): its reason says all a user
        # can act on, and the client's traceback would repeat it once per rollout.
        details = "" if outcome.transient else outcome.details
        report.longrepr = f"{outcome.reason}\n\n{details}".rstrip()
    return report


def planned_record(item: pytest.Item) -> dict[str, Any] | None:
    """What a rollout's record says before it runs: its plan's statics, its arm in an A/B run,
    its item id; None for an item that is not a rollout."""
    planned = planned_of(item)
    if planned is None:
        return None
    return {
        **planned_statics(planned.rollout, planned.eval),
        **planned.record_fields(),
        keys.NODEID: item.nodeid,
    }


CRASHED = "???"  # the phase of xdist's report of an item whose worker crashed


def record_of(report: pytest.TestReport) -> dict[str, Any] | None:
    """The rollout record a report carries, if it is a rollout's call report (or the report of
    a rollout whose worker crashed)."""
    if report.when not in ("call", CRASHED):
        return None
    for name, value in report.user_properties:
        if name == RECORD:
            return value
    return None


def no_policy_of(report: pytest.TestReport) -> tuple[str, str] | None:
    """(Eval name, why) when `report` skipped a rollout because its policy cannot run on its
    Eval."""
    for name, value in report.user_properties:
        if name == NO_POLICY:
            return value[0], value[1]
    return None


STATUS_LINE = pytest.StashKey[bool]()  # set where a status line shows rollouts (progress.py)


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, str] | None:
    record = record_of(report)
    if record is None:
        return None
    outcome = OutcomeKind(record[keys.OUTCOME])
    status = None
    if outcome is OutcomeKind.UNSOLVED and report.passed:
        status = ("unsolved", "u", "UNSOLVED")
    elif outcome is OutcomeKind.ERROR and report.failed:
        status = ("error", "E", "ERROR")
    if not config.stash.get(STATUS_LINE, False):
        return status
    # On a terminal the run's status line stands in place of a character per rollout.
    category, _, word = status or (report.outcome, "", report.outcome.upper())
    return category, "", word


def failed_a_check(report: pytest.TestReport, record: dict[str, Any] | None) -> bool:
    """Whether an item's call failed though its rollout did not error: it broke a check (a
    trajectory spec), or it is a test that is no rollout (a golden)."""
    errored = record is not None and record.get(keys.OUTCOME) == OutcomeKind.ERROR.value
    return report.when == "call" and report.failed and not errored
