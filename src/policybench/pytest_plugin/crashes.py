"""A worker that dies mid-rollout (a signal, the kernel's out-of-memory killer) leaves that
rollout as an `error` record with its cause, in results.jsonl like any error: each rollout's
setup report tells the controller what it plans, and xdist's crash report becomes its record."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.harness import planned_statics
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.outcomes import RECORD
from policybench.pytest_plugin.workers import is_worker
from policybench.record.episode import Episode, Outcome, OutcomeKind

PLANNED = "policybench_planned"  # the setup report's user property: the rollout's statics
VMSTAT = Path("/proc/vmstat")  # Linux: `oom_kill N` counts the OOM killer's kills since boot
EXIT_WAIT_S = 5.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    planned = planned_of(item)
    if call.when == "setup" and planned is not None:
        statics = planned_statics(planned.rollout, planned.eval)
        report.user_properties.append((PLANNED, statics))
    return report


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):
        config.pluginmanager.register(CrashWatch(), "policybench-crashes")


class CrashWatch:
    """On the controller: remembers each started rollout's statics, and turns xdist's report of
    a crashed worker into that rollout's error record."""

    def __init__(self) -> None:
        self.planned: dict[str, dict[str, Any]] = {}
        self.oom_kills_at_start = oom_kills()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            for name, value in report.user_properties:
                if name == PLANNED:
                    self.planned[report.nodeid] = value

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        worker = getattr(report, "node", None)
        worker_id = getattr(getattr(worker, "gateway", None), "id", "?")
        reason = f"worker {worker_id} crashed while running this rollout: {self.cause(worker)}"
        report.longrepr = reason
        statics = self.planned.get(crashitem)
        if statics is None:  # it crashed before its setup was reported: nothing is known of it
            return
        episode = Episode(
            statics={**statics, keys.POLICY: None},
            trace=(),
            outcome=Outcome(OutcomeKind.ERROR, reason),
            sim_s=0.0,
            wall_s=0.0,
            success_step=None,
        )
        record = {**episode.record(), keys.NODEID: crashitem, keys.WORKER: worker_id}
        report.user_properties.append((RECORD, record))

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
