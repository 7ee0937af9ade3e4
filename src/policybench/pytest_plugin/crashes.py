"""A worker that dies mid-rollout (a signal, the kernel's out-of-memory killer) has that rollout
run again on a fresh worker, up to `--retry-errors` times, then leaves it as an `error` record
with its cause: each rollout's setup report tells the controller what it plans, and xdist's
crash report becomes its record. A record that follows crashes lists them in `retried`."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.pytest_plugin.outcomes import RECORD, planned_record, record_of, rollout_record
from policybench.pytest_plugin.rundir import run_dir_of, settings_of
from policybench.pytest_plugin.watchdog import hang_of
from policybench.pytest_plugin.workers import is_worker
from policybench.record.episode import Episode, Outcome, OutcomeKind

PLANNED = "policybench_planned"  # the setup report's user property: its planned_record
VMSTAT = Path("/proc/vmstat")  # Linux: `oom_kill N` counts the OOM killer's kills since boot
EXIT_WAIT_S = 5.0
RERUN = "rerun"  # the outcome of the report of a crashed attempt that runs again


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    planned = planned_record(item) if call.when == "setup" else None
    if planned is not None:
        report.user_properties.append((PLANNED, planned))
    return report


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        watch = CrashWatch(settings_of(config).retry_errors, run_dir_of(config))
        config.pluginmanager.register(watch, "policybench-crashes")


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if report.outcome == RERUN:
        return "rerun", "R", "RERUN"
    return None


class CrashWatch:
    """On the controller: remembers each started rollout's statics, has a crashed rollout run
    again, and turns the last crash into that rollout's error record."""

    def __init__(self, retries: int, run_dir: Path) -> None:
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
                    self.planned[report.nodeid] = value
        crashed = self.crashes.get(report.nodeid)
        record = record_of(report)
        if crashed and record is not None and report.when == "call":
            record[keys.RETRIED] = [*crashed, *record.get(keys.RETRIED, [])]

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        worker = getattr(report, "node", None)
        worker_id = getattr(getattr(worker, "gateway", None), "id", "?")
        hung = hang_of(self.run_dir, worker_id)
        if hung is not None:
            reason = f"worker {worker_id} was ended by the watchdog: {hung}"
        else:
            reason = f"worker {worker_id} crashed while running this rollout: {self.cause(worker)}"
        report.longrepr = reason
        crashed = self.crashes.setdefault(crashitem, [])
        if len(crashed) < self.retries:
            crashed.append(reason)
            sched.mark_test_pending(crashitem)
            report.outcome = RERUN
            return
        planned = self.planned.get(crashitem)
        if planned is None:  # it crashed before its setup was reported: nothing is known of it
            return
        crash = Episode({}, (), Outcome(OutcomeKind.ERROR, reason), 0.0, 0.0, None)
        added = {keys.WORKER: worker_id, **({keys.RETRIED: list(crashed)} if crashed else {})}
        report.user_properties.append((RECORD, rollout_record(planned, crash, added)))

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
