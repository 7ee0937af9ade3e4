"""Outcome reporting: a solved rollout passes, an unsolved one gets its own status (`u`,
UNSOLVED) without failing the run, an error is an error with its reason."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from policybench import keys
from policybench.pytest_plugin.fixtures import EPISODE, RolloutError

RECORD = "policybench"  # name of the user property that carries a rollout's record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    if call.when != "call":
        return report
    episode = item.stash.get(EPISODE, None)
    if episode is not None:
        report.user_properties.append((RECORD, {**episode.record(), keys.NODEID: item.nodeid}))
    if call.excinfo is not None and isinstance(call.excinfo.value, RolloutError):
        outcome = call.excinfo.value.outcome
        report.longrepr = f"{outcome.reason}\n\n{outcome.details}".rstrip()
    return report


def record_of(report: pytest.TestReport) -> dict[str, Any] | None:
    """The rollout record a report carries, if it is a rollout's call report."""
    for name, value in report.user_properties:
        if name == RECORD:
            return value
    return None


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if report.when != "call":
        return None
    record = record_of(report)
    if record is None:
        return None
    outcome = record[keys.OUTCOME]
    if outcome == "unsolved" and report.passed:
        return "unsolved", "u", "UNSOLVED"
    if outcome == "error" and report.failed:
        return "error", "E", "ERROR"
    return None
