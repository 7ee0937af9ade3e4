"""A long run you can watch: on the controller, a status line (done of total, solved with its
interval, errors, pace, ETA) kept in place on a terminal or printed every --status-every seconds
otherwise, and status.json in the run directory rewritten atomically as rollouts finish (at most
once a second, and at the end). A resumed run counts the rollouts it carried over."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from policybench import keys
from policybench.pytest_plugin.outcomes import CRASHED, STATUS_LINE, failed_a_check, record_of
from policybench.pytest_plugin.rundir import run_context
from policybench.pytest_plugin.workers import is_worker
from policybench.record.episode import OutcomeKind
from policybench.run.status import RunState, Status, StatusFile, remaining_s

CLEAR_TO_END = "\x1b[K"  # the rest of the terminal's line: a shorter line leaves nothing behind
# However long a rollout takes, the status line comes at least this often (a slow rollout must
# not read as a hang in a CI log).
HEARTBEAT_S = 30.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("policybench").addoption(
        "--status-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="when the output is no terminal (a CI log, a cluster job's file), print the run's "
        "status line every SECONDS (0: after every rollout); on a terminal it is kept in place "
        "(default 30)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[STATUS_LINE] = False
    if is_worker(config) or config.option.collectonly:
        return
    every = config.getoption("status_every")
    if every < 0:
        raise pytest.UsageError(f"--status-every takes seconds >= 0, got {every:g}")
    config.pluginmanager.register(Progress(config, every), "policybench-progress")


def live(config: pytest.Config) -> bool:
    """Whether the status line stands in place of pytest's progress characters for rollouts."""
    return config.stash.get(STATUS_LINE, False)


def group_of(nodeid: str) -> str:
    """The test function of a rollout's item: its Eval's rollouts share one, and a pace."""
    return nodeid.partition("[")[0]


class Progress:
    def __init__(self, config: pytest.Config, every_s: float) -> None:
        self.config = config
        self.every_s = every_s
        self.run_dir = run_context(config).run_dir
        self.status_file = StatusFile(self.run_dir)
        self.started_at = time.time()
        resumed = run_context(config).resumed
        carried = {} if resumed is None else resumed.carried  # ended before this session
        self.carried = len(carried)
        self.selected: set[str] = set(carried)  # the run's items: this session's and carried
        self.done: set[str] = set(carried)
        # the latest attempt's, per rollout
        self.outcomes = {nodeid: OutcomeKind(r[keys.OUTCOME]) for nodeid, r in carried.items()}
        self.printed_at = time.monotonic()
        self.terminal: Any = None
        # For the ETA: each item's time so far (its phases' durations), and the whole times of
        # the ended ones by group (an Eval's test function), spread over the run's processes.
        self.failed: set[str] = set()
        # Under --decide a run may stop early, and its table gives the interval valid however
        # it stopped: the status line gives none rather than a second, Wilson's.
        self.interval = config.getoption("decide", None) is None
        self.writing = threading.Lock()  # the heartbeat's lines and the rollouts' take turns
        self.stopped = threading.Event()
        self.heartbeat = threading.Thread(target=self._beat, name="policybench-status", daemon=True)
        self.took: dict[str, float] = defaultdict(float)
        self.walls: dict[str, list[float]] = defaultdict(list)
        processes = getattr(config.option, "numprocesses", None)
        self.workers = processes if isinstance(processes, int) and processes > 0 else 1

    @pytest.hookimpl(trylast=True)  # after the terminal reporter registers itself
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            self.terminal = terminal
            self.config.stash[STATUS_LINE] = terminal.isatty and terminal.verbosity <= 0
            self.heartbeat.start()

    def _beat(self) -> None:
        """Between rollouts' ends, the line again every HEARTBEAT_S (or --status-every, if
        shorter): its pace and time left move while a long rollout runs."""
        period = min(self.every_s or HEARTBEAT_S, HEARTBEAT_S)
        while not self.stopped.wait(period):
            with self.writing:
                if self.stopped.is_set():
                    return
                if self.outcomes and time.monotonic() - self.printed_at >= period:
                    status = self.status()
                    try:
                        if live(self.config):
                            self._rewrite(status)
                        else:
                            self._print(status)
                    except (ValueError, OSError):  # the terminal is gone: nothing to tell
                        return
                    self.printed_at = time.monotonic()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The heartbeat ends with the session, before the terminal it writes to closes."""
        with self.writing:
            self.stopped.set()
        if self.heartbeat.is_alive():
            self.heartbeat.join(timeout=5)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected.update(item.nodeid for item in session.items)
        self._update()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.selected.update(ids)  # every worker collects the same items
        self._update()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = record_of(report)
        if record is not None:
            self.outcomes[report.nodeid] = OutcomeKind(record[keys.OUTCOME])
            if failed_a_check(report, record):
                self.failed.add(report.nodeid)
            else:
                self.failed.discard(report.nodeid)
        self.took[report.nodeid] += report.duration
        if report.when in ("teardown", CRASHED):
            if report.nodeid not in self.done:
                self.walls[group_of(report.nodeid)].append(self.took.pop(report.nodeid, 0.0))
            self.done.add(report.nodeid)
            self._update()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The run has ended: finished when every item ran, else stopped (interrupted, -x)."""
        with self.writing:
            self.stopped.set()
        complete = self.finished >= self.selected
        status = self._update(RunState.FINISHED if complete else RunState.STOPPED)
        if not self.outcomes:
            return
        if self.terminal is not None and live(self.config):
            self._rewrite(status)  # its last state stays on the screen
            self.terminal.write_line("")
        elif self.terminal is not None and status.done:
            self._print(status)

    @property
    def finished(self) -> set[str]:
        """The rollouts that ended: torn down, or with their record written (a run stopped
        between a rollout's record and its teardown has still finished that rollout: its record
        is in results.jsonl, and a resume carries it)."""
        return self.done | self.outcomes.keys()

    def status(self, state: RunState = RunState.RUNNING) -> Status:
        counts = list(self.outcomes.values())
        finished = self.finished
        left = Counter(group_of(nodeid) for nodeid in self.selected - finished)
        return Status(
            run_id=self.run_dir.name,
            total=len(self.selected | finished),
            done=len(finished),
            solved=counts.count(OutcomeKind.SOLVED),
            unsolved=counts.count(OutcomeKind.UNSOLVED),
            errors=counts.count(OutcomeKind.ERROR),
            started_at=self.started_at,
            updated_at=time.time(),
            state=state,
            carried=self.carried,
            remaining_s=remaining_s(left, self.walls, self.workers),
            eta_unknown=any(not self.walls.get(group) for group in left),
            failed=len(self.failed),
        )

    def _update(self, state: RunState = RunState.RUNNING) -> Status:
        status = self.status(state)
        if not self.outcomes:  # no rollout yet (or a run of other tests): nothing to say
            return status
        self.status_file.update(status)
        if self.terminal is None or state is not RunState.RUNNING or not status.done:
            return status
        with self.writing:
            if live(self.config):
                self._rewrite(status)
                self.printed_at = time.monotonic()
            elif time.monotonic() - self.printed_at >= self.every_s:
                self._print(status)
                self.printed_at = time.monotonic()
        return status

    def _rewrite(self, status: Status) -> None:
        """The line in place of the one before, fitted to the terminal's width (a line that wraps
        cannot be gone back over), and the rest of the screen's line cleared."""
        width = max(self.terminal._tw.fullwidth - 1, 1)
        line = f"policybench: {status.line(self.interval)}"
        if len(line) > width:  # the interval goes first, then the end
            line = f"policybench: {status.line(interval=False)}"[:width]
        self.terminal._tw.write(f"\r{line}{CLEAR_TO_END}")

    def _print(self, status: Status) -> None:
        """The line on a line of its own, also after pytest's progress characters (xdist's
        reporter writes them without marking the line as begun)."""
        if self.terminal._tw.width_of_current_line:
            self.terminal.write("\n")
        self.terminal.write_line(f"policybench: {status.line(self.interval)}")
