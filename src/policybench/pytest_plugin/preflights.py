"""One preflight per Eval per run, shared by the run's processes through files in the run
directory (`preflight/<eval>.json`): the first process to reach an Eval runs it under a file
lock, the others read it; the controller prints each at the end."""

from __future__ import annotations

import fcntl
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policybench.preflight import Preflight, Verdict
from policybench.pytest_plugin.rundir import run_dir_of
from policybench.pytest_plugin.workers import is_worker

PREFLIGHT = "preflight"  # the run directory's folder of preflights


class PreflightStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._known: dict[str, Preflight] = {}

    def get(self, eval_name: str, run: Callable[[], Preflight]) -> Preflight:
        """The run's preflight of `eval_name`, run now if no process has yet. An inconclusive
        one (the server could not be asked) is kept by this process only."""
        known = self._known.get(eval_name)
        if known is not None:
            return known
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{file_name(eval_name)}.json"
        with (self.directory / f".{file_name(eval_name)}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                found = Preflight.from_json(json.loads(path.read_text()))
            else:
                found = run()
                if found.verdict is not Verdict.INCONCLUSIVE:
                    path.write_text(json.dumps(found.as_json(), indent=1, sort_keys=True))
        self._known[eval_name] = found
        return found


def file_name(eval_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", eval_name)


def store_of(config: pytest.Config) -> PreflightStore:
    return PreflightStore(run_dir_of(config) / PREFLIGHT)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if is_worker(config):
        return
    directory = run_dir_of(config) / PREFLIGHT
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        found = Preflight.from_json(json.loads(path.read_text()))
        terminalreporter.write_line(found.line(), red=found.failed)
