"""A worker that comes up while xdist shuts the run down is told to stop and is not given to the
scheduler; when another worker then dies with a rollout to run again, xdist ends the shutdown and
the stopped worker's collection still arrives. The run's scheduler (every `--dist`, K = 1 or
more) drops that collection instead of ending the run in an INTERNALERROR (`assert node in
node2pending`, seen about once in five runs of the crash tests under load).

The order of xdist's events is a race between processes that a real run cannot be made to hit
every time, so the scheduler the plugin builds is driven here in the order xdist's DSession
calls it, with stand-ins for the worker controllers (which need a live worker process)."""

from __future__ import annotations

import pytest

from policybench.pytest_plugin.scheduling import pytest_xdist_make_scheduler


def xdist_own(config: pytest.Config, dist: str):
    """xdist's own scheduler of `dist`, where the plugin leaves the choice to xdist."""
    from xdist.scheduler import LoadScheduling, WorkStealingScheduling

    return {"load": LoadScheduling, "worksteal": WorkStealingScheduling}[dist](config, None)


IDS = [f"test_point.py::test_point[reach/seed={seed}]" for seed in range(4)]


class Worker:
    """Stands in for xdist's WorkerController: what the schedulers call on one."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def send_runtest_all(self) -> None:
        self.sent += range(len(IDS))

    def send_steal(self, indices: list[int]) -> None:
        pass

    def shutdown(self) -> None:
        self.shutting_down = True


@pytest.mark.parametrize(
    ("dist", "slots"),
    [("worksteal", "1"), ("load", "1"), ("loadscope", "1"), ("worksteal", "2")],
)
def test_a_stopped_workers_collection_after_a_restart_does_not_end_the_run(pytester, dist, slots):
    config = pytester.parseconfigure("--envs-per-worker", slots)
    config.option.dist, config.option.tx = dist, ["popen"] * 2  # what `-n 2` leaves to a plugin
    scheduler = pytest_xdist_make_scheduler(config, log=None) or xdist_own(config, dist)
    first, second = Worker("gw0"), Worker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
    for worker in (first, second):
        scheduler.add_node_collection(worker, IDS)
    scheduler.schedule()
    # The run shuts down; gw2, started for a worker that died, comes up and is told to stop
    # (xdist does not add it); a worker dies and xdist ends the shutdown; gw2's collection comes.
    stopped = Worker("gw2")
    stopped.shutdown()
    scheduler.add_node_collection(stopped, IDS)
    assert stopped not in scheduler.nodes and not stopped.sent
