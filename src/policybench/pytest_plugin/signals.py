"""Signals a run handles on purpose: SIGTERM to the controller stops the run as Ctrl-C does (the
rollouts in flight end with their workers; the finished ones are kept, the summary and report
written; once they are, a late one ends the process at once, in one line), and an xdist worker
ends with its controller however that one ends (the run's policy server does too, see
`remote.py`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import pytest

from policybench.lifetime import die_with
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker

CONTROLLER_PID = "controller_pid"


def pytest_configure(config: pytest.Config) -> None:
    if is_worker(config):
        controller = from_controller(config, CONTROLLER_PID)
        if controller == os.getppid():  # a local worker (one over ssh has another parent)
            die_with(controller)
        return
    hand_to_workers(config, CONTROLLER_PID, os.getpid())
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        stop = StopOnTerm()
        config.pluginmanager.register(stop, "policybench-stop-on-term")
        previous = signal.signal(signal.SIGTERM, stop.interrupt)
        config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous))


class StopOnTerm:
    """On the controller: SIGTERM ends the workers' rollouts in flight (as Ctrl-C, sent to the
    whole terminal, would) and interrupts the run, which then writes what it has. Once the run
    has ended (its summary, report and exit status written), there is nothing to interrupt: the
    process ends with the run's exit status and says so in one line."""

    def __init__(self) -> None:
        self.workers: dict[str, int] = {}  # worker id -> pid
        self.exit_status: int | None = None  # the run's, once it has ended

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        """After the other finish hooks: the run's results, summary and report are written."""
        result = yield
        self.exit_status = int(session.exitstatus)
        return result

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        popen = getattr(getattr(node.gateway, "_io", None), "popen", None)
        if popen is not None:
            self.workers[node.gateway.id] = popen.pid

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.workers.pop(node.gateway.id, None)

    def interrupt(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.exit_status is not None:
            print(
                f"policybench: {name} after the run had ended (its results and report are "
                f"complete): exiting with the run's status {self.exit_status}",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(self.exit_status)
        for pid in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        raise KeyboardInterrupt(f"stopped by {name}")
