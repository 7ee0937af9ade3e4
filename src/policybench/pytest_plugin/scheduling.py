"""How `-n N` hands rollouts to workers. With one env per worker, task-affine: xdist's work
stealing hands each worker a contiguous run of items (plan order keeps a task's rollouts
together), so a worker reuses its few live envs, and an idle worker takes work from the busiest;
`--dist` given by the user wins; under `--decide`, xdist's load, in decision order. With
`--envs-per-worker K`, by group: each group of K rollouts goes to one worker whole. A worker
that dies hands back what it was running (its group's unreported rollouts) for the crash
handler to run again or record as errors, under every `--dist`."""

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
    # Under --decide, rollouts go out in decision order (load), so that a decision falls
    # before the rollouts after it have started.
    deciding = config.getoption("decide", None) is not None
    if getattr(config.option, "dist", "no") == DEFAULT_DIST and not _dist_given(config):
        config.option.dist = DEFAULT_DIST if deciding else TASK_AFFINE


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
    side by side); with a `--dist` that sends units of work (loadscope, loadfile, loadgroup),
    xdist's scheduler, able to run a crashed item again; else xdist's scheduler of the `--dist`
    (`each` and `no` its own choice). Each takes the collection of known workers only."""
    slots = slots_of(config)
    dist = getattr(config.option, "dist", "no")
    if is_worker(config):
        return None
    if slots == 1 and dist not in UNITS_OF_WORK:
        return _item_scheduling(config, log, dist)
    return _unit_scheduling(config, log, slots, dist)


class KnownWorkersOnly:
    """Takes the collection of the workers it was given only. xdist tells a worker that comes
    up while the run shuts down (every worker on its last rollout) to stop, without giving it to
    the scheduler; when another worker then dies and its rollout is to run again, xdist ends the
    shutdown and the stopped worker's collection still arrives, which xdist's schedulers take
    for an internal error (`assert node in ...`). That worker runs nothing: its collection is
    dropped, and the new worker xdist starts for the dead one runs the rollout."""

    nodes: list[Any]

    def add_node_collection(self, node: Any, collection: Any) -> None:
        if node in self.nodes:
            super().add_node_collection(node, collection)  # type: ignore[misc]


def _item_scheduling(config: pytest.Config, log: Any, dist: str) -> Any:
    """xdist's scheduler of single items (`load`, `worksteal`), taking known workers only."""
    from xdist import scheduler  # xdist is imported only when it runs

    base = {"load": scheduler.LoadScheduling, "worksteal": scheduler.WorkStealingScheduling}
    if dist not in base:
        return None

    class ItemScheduling(KnownWorkersOnly, base[dist]):
        pass

    return ItemScheduling(config, log)


UNITS_OF_WORK = ("loadscope", "loadfile", "loadgroup")  # xdist's schedulers of whole units


def in_flight_with(sched: Any, crashitem: str) -> tuple[str, ...]:
    """The items a dead worker was running when it died, `crashitem` first: the rollouts of its
    group that had not reported, when groups run side by side; else `crashitem` alone."""
    return getattr(sched, "in_flight", {}).get(crashitem, (crashitem,))


def _unit_scheduling(config: pytest.Config, log: Any, slots: int, dist: str) -> Any:
    from xdist import scheduler  # xdist is imported only when it runs

    by_unit = {
        "loadscope": scheduler.LoadScopeScheduling,
        "loadfile": scheduler.LoadFileScheduling,
        "loadgroup": scheduler.LoadGroupScheduling,
    }
    base = scheduler.LoadScopeScheduling if slots > 1 else by_unit[dist]

    class UnitScheduling(KnownWorkersOnly, base):
        """xdist's scheduling by units of work (with K > 1, a group of K rollouts to a unit),
        where a dead worker's items in flight (its group's; else the one it ran) run again
        only when the crash handler asks with `mark_test_pending`, as under xdist's other
        schedulers; the rest of the units it held go back to the queue."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self.scopes: dict[str, str] | None = None
            # Each crashed item -> the items that were in flight with it.
            self.in_flight: dict[str, tuple[str, ...]] = {}
            self._unit_of: dict[str, dict[str, bool]] = {}  # in-flight item -> {item: done}

        def _split_scope(self, nodeid: str) -> str:
            if slots == 1:
                return super()._split_scope(nodeid)
            if self.scopes is None:  # the collection is known by the first call
                self.scopes = group_scopes(self.collection or [], slots)
            return self.scopes[nodeid]

        def remove_node(self, node: Any) -> str | None:
            workload = self.assigned_work.pop(node)
            # A worker runs its units in the order it was sent them: the first unfinished one
            # is the one it was running.
            unit = next((unit for unit in workload.values() if not all(unit.values())), None)
            if unit is None:
                return None
            unreported = [nodeid for nodeid, done in unit.items() if not done]
            in_flight = tuple(unreported if slots > 1 else unreported[:1])
            for nodeid in in_flight:
                unit[nodeid] = True  # until the crash handler asks for it again
                self._unit_of[nodeid] = unit
            self.in_flight[in_flight[0]] = in_flight
            # Nothing is sent before the crash handler has spoken: the worker that replaces
            # the dead one, or the next to report, takes the queue.
            self.workqueue.update((s, u) for s, u in workload.items() if not all(u.values()))
            return in_flight[0]

        def mark_test_pending(self, item: str) -> None:
            """Runs `item`, in flight on a worker that died, again, with the other items of its
            unit still to run: the unit goes first in the queue. (Nothing is sent here, so that
            a group marked item by item still goes to one worker whole.)"""
            scope = self._split_scope(item)
            unit = self._unit_of.pop(item)
            unit[item] = False
            if scope not in self.workqueue:
                self.workqueue[scope] = unit
            self.workqueue.move_to_end(scope, last=False)

    return UnitScheduling(config, log)
