"""How `-n N` hands rollouts to workers. With one env per worker, task-affine: xdist's work
stealing hands each worker a contiguous run of items (plan order keeps a task's rollouts
together), so a worker reuses its few live envs, and an idle worker takes work from the busiest;
`--dist` given by the user wins. With `--envs-per-worker K`, by group: each group of K rollouts
goes to one worker whole, and a worker that dies hands back its group's unreported rollouts for
the crash handler to run again or record as errors, as xdist's own schedulers hand back an item."""

from __future__ import annotations

import os
import shlex
from typing import Any

import pytest

from policybench.pytest_plugin.lockstep import group_scopes, slots_of
from policybench.pytest_plugin.workers import is_worker

DEFAULT_DIST, TASK_AFFINE = "load", "worksteal"


def pytest_configure(config: pytest.Config) -> None:
    # xdist turns `-n N` into `--dist load` before plugins configure; take its place unless the
    # user asked for a distribution mode.
    if getattr(config.option, "dist", "no") == DEFAULT_DIST and not _dist_given(config):
        config.option.dist = TASK_AFFINE


def _dist_given(config: pytest.Config) -> bool:
    words = [
        *config.invocation_params.args,
        *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
        *config.getini("addopts"),
    ]
    return any(word in ("--dist", "-d") or word.startswith("--dist=") for word in words)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own choice
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With K > 1 under xdist, each group's rollouts go to one worker (so that it can run them
    side by side); xdist's own choice otherwise."""
    slots = slots_of(config)
    if slots == 1 or is_worker(config):
        return None
    return _group_scheduling(config, log, slots)


def in_flight_with(sched: Any, crashitem: str) -> tuple[str, ...]:
    """The items a dead worker was running when it died, `crashitem` first: the rollouts of its
    group that had not reported, when groups run side by side; else `crashitem` alone."""
    return getattr(sched, "in_flight", {}).get(crashitem, (crashitem,))


def _group_scheduling(config: pytest.Config, log: Any, slots: int) -> Any:
    from xdist.scheduler import LoadScopeScheduling  # xdist is imported only when it runs

    class GroupScheduling(LoadScopeScheduling):
        """xdist's scope scheduling, a group of `slots` rollouts to a unit of work. A dead
        worker's group in flight runs again item by item, as the crash handler asks with
        `mark_test_pending`; the other units it held go back to the queue whole."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self.scopes: dict[str, str] | None = None
            # Each crashed item -> the items of its group that were in flight with it.
            self.in_flight: dict[str, tuple[str, ...]] = {}
            self._crashed: dict[str, dict[str, bool]] = {}  # unit -> {item: done} after a crash

        def _split_scope(self, nodeid: str) -> str:
            if self.scopes is None:  # the collection is known by the first call
                self.scopes = group_scopes(self.collection or [], slots)
            return self.scopes[nodeid]

        def remove_node(self, node: Any) -> str | None:
            workload = self.assigned_work.pop(node)
            # A worker runs its units in the order it was sent them: the first unfinished one
            # is the group it was running.
            started = next((s for s, unit in workload.items() if not all(unit.values())), None)
            if started is None:
                return None
            unit = workload.pop(started)
            in_flight = tuple(nodeid for nodeid, done in unit.items() if not done)
            self._crashed[started] = dict.fromkeys(unit, True)  # none runs again unless asked
            self.in_flight[in_flight[0]] = in_flight
            self.workqueue.update(workload)
            for other in self.assigned_work:
                self._reschedule(other)
            return in_flight[0]

        def mark_test_pending(self, item: str) -> None:
            """Runs `item`, in flight on a worker that died, again, with the other items of its
            group that run again: their unit goes first in the queue, for the worker that
            replaces the dead one or the next to ask for work. (Nothing is sent here, so that a
            group marked item by item still goes to one worker whole.)"""
            scope = self._split_scope(item)
            unit = self._crashed[scope]
            unit[item] = False
            if scope not in self.workqueue:
                self.workqueue[scope] = unit
                self.workqueue.move_to_end(scope, last=False)

    return GroupScheduling(config, log)
