"""Nothing hangs forever: a wall-clock watchdog per rollout (`--rollout-wall-timeout`). A rollout
that runs past it (an env or a policy call that never returns) has every thread's stack dumped
to the run directory's `hangs/<worker>.txt`. Under xdist its worker is ended and replaced and the
rollout is an error (run again with `--retry-errors`) naming where it hung. Without xdist the
hung call is interrupted, the rollout is an error, and the run stops there with its summary and
report written and the `--resume` command printed; a call that cannot be interrupted (C code
holding the interpreter) ends the process a grace period later. Waiting for an unreachable
policy server is not a hang, nor is an attended rollout's wait on its operator: the watchdog's
clock stands still meanwhile (`--server-wait` bounds the first wait; a person takes their time)."""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO

import pytest

from policybench.pytest_plugin.resume import resume_command
from policybench.pytest_plugin.rundir import run_dir_of
from policybench.run.files import make_folders, open_append
from policybench.run.layout import HANGS
from policybench.serve import client
from policybench.spec import Rollout

FIRED = "Timeout ("  # how faulthandler's dump begins when the limit passed
# The hang file's first line while its rollout runs (then the limit in seconds): the file is
# removed when the rollout ends, and holds a stack only once the limit has passed.
STARTED = "running, its wall-clock limit "
PACKAGE = "policybench"
BASE_S, PER_SIM_S = 120.0, 30.0  # default limit: 2 minutes plus 30 wall seconds per sim second
GRACE_S = 10.0  # without xdist: how long an interrupted call has to give way before the exit
ENDING_S = 120.0  # without xdist: how long the run has to end once a rollout hung (a thread
# still stuck in it may block the end: lockstep's slots are joined at teardown)
MAIN = "main"  # the worker name of a run without xdist
HUNG = pytest.StashKey[list[str]]()  # without xdist: what the run says when a rollout hung


class RolloutHung(Exception):
    """Raised in a run without xdist where its rollout was running when the limit passed; the
    message says where it hung."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("policybench").addoption(
        "--rollout-wall-timeout",
        type=float,
        default=None,
        metavar="S",
        help="end a rollout that runs longer than S wall seconds, with a stack dump (default: "
        f"{BASE_S:g} s plus {PER_SIM_S:g} s per simulated second of its timeout; 0: never); "
        "time spent waiting for an unreachable policy server (--server-wait) or for an attended "
        "rollout's operator does not count",
    )


def limit_s(config: pytest.Config, rollout: Rollout) -> float | None:
    """The rollout's wall-clock limit in seconds; None when the watchdog is off."""
    given = config.getoption("rollout_wall_timeout")
    if given is None:
        return BASE_S + PER_SIM_S * rollout.timeout_s
    return given or None


def hang_file(run_dir: Path, worker: str) -> Path:
    return run_dir / HANGS / f"{worker}.txt"


def discard_hang_file(run_dir: Path, worker: str) -> None:
    """Removes the worker's hang file, and hangs/ when that leaves it empty (a run without a
    hang keeps none; another worker's file stays)."""
    path = hang_file(run_dir, worker)
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


class _Deadline:
    """A limit that runs while the rollout runs and stands still while one or more of its
    threads wait for a policy server. It ends the process (`faulthandler`, from a thread of its
    own) `backstop_s` after the limit; with `interrupt`, it also calls `interrupt` on the main
    thread (SIGALRM) at the limit."""

    def __init__(self, limit_s: float, file: IO[str], backstop_s: float, interrupt: bool) -> None:
        self._left_s, self._file, self._backstop_s = limit_s, file, backstop_s
        self._interrupt = interrupt
        self._pauses = 0
        self._closed = False
        self._lock = threading.Lock()
        self._arm()

    def _arm(self) -> None:
        if self._closed:  # a server wait that outlived its rollout's block ended
            return
        self._armed_at = time.monotonic()
        left_s = max(self._left_s, 1e-3)
        faulthandler.dump_traceback_later(left_s + self._backstop_s, exit=True, file=self._file)
        if self._interrupt:
            signal.setitimer(signal.ITIMER_REAL, left_s)

    def close(self) -> None:
        with self._lock:
            self._disarm()
            self._closed = True

    def _disarm(self) -> None:
        if self._interrupt:
            signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        self._left_s -= time.monotonic() - self._armed_at

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            self._pauses += 1
            if self._pauses == 1:
                self._disarm()
        try:
            yield
        finally:
            with self._lock:
                self._pauses -= 1
                if self._pauses == 0:
                    self._arm()


_running: _Deadline | None = None  # the deadline of the rollout this process runs


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    deadline = _running
    if deadline is None:
        yield
        return
    with deadline.paused():
        yield


client.pause_while_waiting(_paused)


def not_counted() -> contextlib.AbstractContextManager[None]:
    """A block the running rollout's watchdog does not count: a wait on a person (an attended
    rollout's operator staging its scene or judging it), as a wait on a server is not."""
    return _paused()


@contextlib.contextmanager
def watched(
    config: pytest.Config, rollout: Rollout, worker: str, rollouts: int = 1
) -> Iterator[None]:
    """Runs the block under the rollout's watchdog (its limit times `rollouts`, when the block
    runs that many such rollouts side by side)."""
    global _running
    limit = limit_s(config, rollout)
    if limit is None:
        yield
        return
    limit *= rollouts
    run_dir = run_dir_of(config)
    path = hang_file(run_dir, worker)
    interrupt = worker == MAIN and threading.current_thread() is threading.main_thread()
    fired = False

    def expired(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        fired = True
        file.write(f"{FIRED}{datetime.timedelta(seconds=round(limit))})!\n")
        faulthandler.dump_traceback(file, all_threads=True)
        file.flush()
        raise RolloutHung(hang_of(run_dir, worker))

    with _opened(path) as file:
        file.write(f"rollout {rollout.eval} {rollout.id}: {STARTED}{limit:g} s\n")
        file.flush()
        previous = signal.signal(signal.SIGALRM, expired) if interrupt else None
        _running = _Deadline(limit, file, GRACE_S if interrupt else 0.0, interrupt)
        try:
            yield
        finally:
            _running.close()
            _running = None
            if previous is not None:
                signal.signal(signal.SIGALRM, previous)
    if fired:
        config.stash[HUNG] = _stopped_by(config, rollout, limit, path)
    else:
        discard_hang_file(run_dir, worker)  # finished in time: nothing to tell


OPEN_RETRY_S = 10.0  # how long opening the hang file may race other workers' removals


def _opened(path: Path) -> IO[str]:
    """The hang file, opened to append (with hangs/, which another worker that just finished
    may remove as empty at any moment: between the two steps, or inside mkdir itself, which then
    finds the directory there and gone again and raises FileExistsError)."""
    deadline = time.monotonic() + OPEN_RETRY_S  # a count of tries ran out on a busy machine
    while True:
        try:
            make_folders(path.parent.parent, path.parent.name)
            return open_append(path)
        except (FileNotFoundError, FileExistsError):
            if time.monotonic() > deadline:
                raise


def _stopped_by(config: pytest.Config, rollout: Rollout, limit: float, path: Path) -> list[str]:
    """What a run without xdist says when one of its rollouts hung: which, where its stack is,
    and how to continue."""
    return [
        f"rollout {rollout.id} of {rollout.eval} did not end within {limit:g} s "
        "(--rollout-wall-timeout), so the run stopped there",
        f"the stack of every thread: {path}",
        f"continue the run with: {resume_command(config)}",
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    done = yield
    if HUNG in item.config.stash:  # its record is written; nothing more runs
        item.session.shouldstop = item.config.stash[HUNG][0]
        _say(item.config, item.config.stash[HUNG])  # now too, in case the end is blocked
        faulthandler.dump_traceback_later(ENDING_S, exit=True, file=sys.__stderr__)
    return done


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _say(terminalreporter.config, terminalreporter.config.stash.get(HUNG, []))


def pytest_unconfigure(config: pytest.Config) -> None:
    if HUNG in config.stash:  # the run ended in time
        faulthandler.cancel_dump_traceback_later()


def _say(config: pytest.Config, lines: list[str]) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is None:
            sys.stderr.write(f"{line}\n")
        else:
            reporter.write_line(line, red=True, bold=True)
    if reporter is not None:
        reporter.flush()


def hang_of(run_dir: Path, worker: str) -> str | None:
    """What a worker's watchdog left when the limit passed: the limit and where it hung."""
    path = hang_file(run_dir, worker)
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    if FIRED not in text:  # the worker ended otherwise, mid-rollout (a signal, say)
        return None
    header = "no end within " + text.splitlines()[0].rpartition(STARTED)[2]
    rollout_thread = next((t for t in text.split("\n\n") if "in run_rollout" in t), "")
    frames = [
        line.strip()
        for line in rollout_thread.splitlines()
        if line.strip().startswith("File") and __file__ not in line  # not the watchdog's own
    ]
    if not frames:
        return f"{header} (--rollout-wall-timeout); stack: {path}"
    ours = next((frame for frame in frames if f"{PACKAGE}{os.sep}" in frame), frames[0])
    return (
        f"{header} (--rollout-wall-timeout); hung at {frames[0]}, called from {ours}; stack: {path}"
    )
