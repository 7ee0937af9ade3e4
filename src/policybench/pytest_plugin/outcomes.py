"""Outcome reporting and the rollout's record: a solved rollout passes, an unsolved one gets its
own status (`u`, UNSOLVED) without failing the run, an error is an error with its reason.

Each rollout's record is built here, once, from its Episode, its arm (in an A/B run) and what
recorders added with `add_to_record`, and travels to the controller on the call report (under
xdist too). With `--junitxml`, the testcase carries the outcome, reason, steps and sum reward as
properties.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from policybench import keys
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.fixtures import EPISODE, RECORD_FIELDS, RolloutError
from policybench.record.episode import OutcomeKind

RECORD = "policybench"  # name of the call report's user property that carries the record
JUNIT_FIELDS = (keys.OUTCOME, keys.REASON, keys.STEPS, keys.SUM_REWARD)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    if call.when != "call":
        return report
    episode = item.stash.get(EPISODE, None)
    if episode is not None:
        planned = planned_of(item)
        record = {
            **episode.record(),
            **(planned.record_fields() if planned is not None else {}),
            **item.stash.get(RECORD_FIELDS, {}),
            keys.NODEID: item.nodeid,
        }
        report.user_properties.append((RECORD, record))
        # The item's own properties reach --junitxml (pytest's record_property way).
        item.user_properties += [(f"policybench.{name}", record[name]) for name in JUNIT_FIELDS]
    if call.excinfo is not None and isinstance(call.excinfo.value, RolloutError):
        outcome = call.excinfo.value.outcome
        report.longrepr = f"{outcome.reason}\n\n{outcome.details}".rstrip()
    return report


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


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    record = record_of(report)
    if record is None:
        return None
    outcome = OutcomeKind(record[keys.OUTCOME])
    if outcome is OutcomeKind.UNSOLVED and report.passed:
        return "unsolved", "u", "UNSOLVED"
    if outcome is OutcomeKind.ERROR and report.failed:
        return "error", "E", "ERROR"
    return None
