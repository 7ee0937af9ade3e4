"""Nothing hangs forever: a wall-clock watchdog per rollout (`--rollout-wall-timeout`). A rollout
that runs past it (an env or a policy call that never returns, even inside C code) has every
thread's stack dumped to the run directory's `hangs/<worker>.txt` and its process ended; under
xdist the worker is replaced and the rollout is an error (run again with `--retry-errors`)
naming where it hung; without xdist the run stops there (`hangs/main.txt` says where), to be
continued with `--resume`."""

from __future__ import annotations

import contextlib
import faulthandler
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from policybench.pytest_plugin.rundir import run_dir_of
from policybench.spec import Rollout

HANGS = "hangs"
FIRED = "Timeout ("  # how faulthandler's dump begins when the limit passed
PACKAGE = "policybench"
BASE_S, PER_SIM_S = 120.0, 30.0  # default limit: 2 minutes plus 30 wall seconds per sim second


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("policybench").addoption(
        "--rollout-wall-timeout",
        type=float,
        default=None,
        metavar="S",
        help="end a rollout that runs longer than S wall seconds, with a stack dump (default: "
        f"{BASE_S:g} s plus {PER_SIM_S:g} s per simulated second of its timeout; 0: never)",
    )


def limit_s(config: pytest.Config, rollout: Rollout) -> float | None:
    """The rollout's wall-clock limit in seconds; None when the watchdog is off."""
    given = config.getoption("rollout_wall_timeout")
    if given is None:
        return BASE_S + PER_SIM_S * rollout.timeout_s
    if given < 0:
        raise pytest.UsageError(f"--rollout-wall-timeout must be >= 0 seconds, got {given}")
    return given or None


def hang_file(run_dir: Path, worker: str) -> Path:
    return run_dir / HANGS / f"{worker}.txt"


@contextlib.contextmanager
def watched(
    config: pytest.Config, rollout: Rollout, worker: str, rollouts: int = 1
) -> Iterator[None]:
    """Runs the block under the rollout's watchdog (its limit times `rollouts`, when the block
    runs that many such rollouts side by side)."""
    limit = limit_s(config, rollout)
    if limit is None:
        yield
        return
    limit *= rollouts
    path = hang_file(run_dir_of(config), worker)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.write(f"rollout {rollout.eval} {rollout.id}: no end within {limit:g} s\n")
        file.flush()
        faulthandler.dump_traceback_later(limit, exit=True, file=file)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    path.unlink(missing_ok=True)  # finished in time: nothing to tell


def hang_of(run_dir: Path, worker: str) -> str | None:
    """What a worker's watchdog left when it ended the worker: the limit and where it hung."""
    path = hang_file(run_dir, worker)
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    if FIRED not in text:  # the worker ended otherwise, mid-rollout (a signal, say)
        return None
    header = text.splitlines()[0]
    rollout_thread = next((t for t in text.split("\n\n") if "in run_rollout" in t), "")
    frames = [
        line.strip() for line in rollout_thread.splitlines() if line.strip().startswith("File")
    ]
    if not frames:
        return f"{header.split(': ', 1)[-1]} (--rollout-wall-timeout); stack: {path}"
    ours = next((frame for frame in frames if f"{PACKAGE}{os.sep}" in frame), frames[0])
    return (
        f"{header.split(': ', 1)[-1]} (--rollout-wall-timeout); hung at {frames[0]}, "
        f"called from {ours}; stack: {path}"
    )
