"""Every process has an owner: a child that policybench starts (the run's policy server, an xdist
worker) ends when the process that started it ends, however that one ends (SIGTERM, SIGKILL)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping

PARENT_PID_VARIABLE = "POLICYBENCH_PARENT_PID"  # set for a child that must die with its starter
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_PERIOD_S = 0.5  # how often the portable fallback looks at the parent

INTERRUPTED = 130  # the exit status of a command ended by Ctrl-C (SIGINT), as shells say it


def owned_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a child that must end with this process (it calls `die_with_starter`). On Linux
    the kernel ends the child when the *thread* that started it ends: start it from the main
    thread or from a thread that lives as long as the child should."""
    return {**env, PARENT_PID_VARIABLE: str(os.getpid())}


def die_with_starter() -> None:
    """Leaves this process's lifetime to the process that started it with `owned_env`: it ends
    when that one ends, and Ctrl-C or a SIGTERM sent to their whole process group reaches the
    starter, which ends this one (SIGKILL) when it means to. Nothing when it was started
    otherwise. Call it from the main thread first thing, before loading anything heavy."""
    parent = os.environ.pop(PARENT_PID_VARIABLE, None)  # not for this process's own children
    if parent is not None:
        die_with(int(parent))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def die_with(parent_pid: int) -> None:
    """Ends this process as soon as `parent_pid`, its parent, ends: on Linux the kernel sends
    SIGKILL (prctl PR_SET_PDEATHSIG); elsewhere a thread watches the parent's pid."""
    if not _kernel_kills_on_parent_death():
        watcher = threading.Thread(
            target=_watch_parent, args=(parent_pid,), name="die-with-parent", daemon=True
        )
        watcher.start()
    if os.getppid() != parent_pid:  # the parent ended before the kernel was asked
        os._exit(1)


def _kernel_kills_on_parent_death() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCH_PERIOD_S)
    os._exit(1)
