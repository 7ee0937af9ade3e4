"""Refusals that need the collected plan (a --decide or --fail-on-regression plan too small, a
spec naming a signal no rollout has): exit 4 before any rollout runs, with or without xdist.

Without workers a refusal is a usage error. Under xdist only the workers collect, and a usage
error raised there crashes the run; so a worker that refuses drops its items and hands the
refusal to the controller, which ends the run with it (exit 4, one line)."""

from __future__ import annotations

import sys
from collections.abc import Generator
from typing import Any

import pytest

from policybench.pytest_plugin.workers import is_worker

REFUSED = pytest.StashKey[list[str]]()
WORKER_OUTPUT = "policybench_refusals"


def refuse(config: pytest.Config, items: list[pytest.Item], why: str) -> None:
    """Refuses the run before any rollout: `why` says what is wrong and what to give."""
    if not is_worker(config):
        raise pytest.UsageError(why)
    refused = config.stash.setdefault(REFUSED, [])
    if why not in refused:
        refused.append(why)
    items.clear()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist, on the controller: a worker's refusals are the run's."""
    refused = node.config.stash.setdefault(REFUSED, [])
    for why in getattr(node, "workeroutput", {}).get(WORKER_OUTPUT, []):
        if why not in refused:
            refused.append(why)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    config = session.config
    if is_worker(config):
        config.workeroutput[WORKER_OUTPUT] = config.stash.get(REFUSED, [])
    result = yield
    refused = config.stash.get(REFUSED, [])
    if refused and not is_worker(config):  # after every other plugin has set its status
        for why in refused:
            sys.stderr.write(f"ERROR: {why}\n")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    return result
