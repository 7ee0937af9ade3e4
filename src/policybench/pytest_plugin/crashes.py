"""A worker that dies mid-rollout (a signal, the kernel's out-of-memory killer) has that rollout
(with `--envs-per-worker`, every rollout of its group that had not reported) run again on a
fresh worker, up to `--retry-errors` times, then leaves it as an `error` record with its cause:
each rollout's setup report tells the controller what its group plans, and a crash report
becomes each one's record. A record that follows crashes lists them in `retried`."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.pytest_plugin.lockstep import group_items, slots_of
from policybench.pytest_plugin.outcomes import RECORD, planned_record, record_of
from policybench.pytest_plugin.rundir import run_dir_of, settings_of
from policybench.pytest_plugin.scheduling import in_flight_with
from policybench.pytest_plugin.watchdog import discard_hang_file, hang_of
from policybench.pytest_plugin.workers import is_worker
from policybench.run.records import crashed_record

# The setup report's user property: the planned_record of each rollout of the item's group.
PLANNED = "policybench_planned"
VMSTAT = Path("/proc/vmstat")  # Linux: `oom_kill N` counts the OOM killer's kills since boot
EXIT_WAIT_S = 5.0
RERUN = "rerun"  # the outcome of the report of a crashed attempt that runs again


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    group = group_items(item, slots_of(item.config)) if call.when == "setup" else []
    if group:
        report.user_properties.append((PLANNED, [planned_record(mate) for mate in group]))
    return report


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        watch = CrashWatch(config.hook, settings_of(config).retry_errors, run_dir_of(config))
        config.pluginmanager.register(watch, "policybench-crashes")


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if report.outcome == RERUN:
        return "rerun", "R", "RERUN"
    return None


class CrashWatch:
    """On the controller: remembers each started rollout's plan (and its group's), has the
    rollouts a crash stopped run again, and turns the last crash into each one's error record."""

    def __init__(self, hook: Any, retries: int, run_dir: Path) -> None:
        self.hook = hook
        self.retries = retries
        self.run_dir = run_dir
        self.planned: dict[str, dict[str, Any]] = {}  # nodeid -> its planned_record
        self.crashes: dict[str, list[str]] = {}  # nodeid -> why each crashed attempt ended
        self.oom_kills_at_start = oom_kills()

    @pytest.hookimpl(tryfirst=True)  # before the aggregator writes the record
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            for name, value in report.user_properties:
                if name == PLANNED:
                    self.planned.update((planned[keys.NODEID], planned) for planned in value)
        crashed = self.crashes.get(report.nodeid)
        record = record_of(report)
        if crashed and record is not None and report.when == "call":
            record[keys.RETRIED] = [*crashed, *record.get(keys.RETRIED, [])]

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """xdist logs `report`, of `crashitem`, once this hook has made it; the other rollouts
        in flight with it (its group's) are reported here, each run again or recorded alike."""
        worker = getattr(report, "node", None)
        worker_id = getattr(getattr(worker, "gateway", None), "id", "?")
        hung = hang_of(self.run_dir, worker_id)
        if hung is not None:
            reason = f"worker {worker_id} was ended by the watchdog: {hung}"
        else:
            # The watchdog's file names the rollout it watched, not a hang: nothing hung.
            discard_hang_file(self.run_dir, worker_id)
            reason = f"worker {worker_id} crashed while running this rollout: {self.cause(worker)}"
        crashitem, *mates = in_flight_with(sched, crashitem)
        for nodeid in mates:
            mate = pytest.TestReport(nodeid, report.location, {}, "failed", reason, report.when)
            mate.node = worker  # type: ignore[attr-defined]
            self.crashed(mate, reason, worker_id, sched)
            self.hook.pytest_runtest_logreport(report=mate)
        self.crashed(report, reason, worker_id, sched)

    def crashed(self, report: pytest.TestReport, reason: str, worker_id: str, sched: Any) -> None:
        """Has the rollout of `report`, which a crash stopped, run again if `--retry-errors`
        allows; else makes `report` its error record."""
        report.longrepr = reason
        crashed = self.crashes.setdefault(report.nodeid, [])
        if len(crashed) < self.retries:
            crashed.append(reason)
            sched.mark_test_pending(report.nodeid)
            report.outcome = RERUN
            return
        planned = self.planned.get(report.nodeid)
        if planned is None:  # it crashed before its setup was reported: nothing is known of it
            return
        added = {keys.WORKER: worker_id, **({keys.RETRIED: list(crashed)} if crashed else {})}
        report.user_properties.append((RECORD, crashed_record(planned, reason, added)))

    def cause(self, worker: Any) -> str:
        """How the worker process ended, and whether the kernel ran out of memory meanwhile."""
        code = _exit_code(worker)
        if code is None:
            said = "its exit status is unknown"
        elif code < 0:
            said = f"killed by {signal.Signals(-code).name}"
        else:
            said = f"exited with status {code}"
        kills, before = oom_kills(), self.oom_kills_at_start
        if kills is not None and before is not None and kills > before:
            return (
                f"{said}; likely out of memory: the kernel's out-of-memory killer ended "
                f"{kills - before} process(es) during this run; lower --max-envs-per-worker or -n"
            )
        if code == -signal.SIGKILL:
            return f"{said}; the kernel's out-of-memory killer sends SIGKILL (check `dmesg`)"
        return said


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has ended since boot; None if unknown."""
    try:
        for line in VMSTAT.read_text().splitlines():
            name, _, count = line.partition(" ")
            if name == "oom_kill":
                return int(count)
    except (OSError, ValueError):
        return None
    return None


def _exit_code(worker: Any) -> int | None:
    """The worker process's exit code (negative: the signal that killed it), if it can be had."""
    popen = getattr(getattr(getattr(worker, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        return popen.wait(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        return None
