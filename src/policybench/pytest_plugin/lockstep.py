"""`--envs-per-worker K`: each process steps K rollouts of one Eval side by side, asking a batching
model once per step for all of them (see policybench.lockstep). The first item of a group runs
the group; its group-mates, later items the same process is sure to run, take their Episodes.

Under xdist a process is sure to run an item only if the scheduler sends it a whole unit of
work, so with K > 1 the items are scheduled by group (see scheduling): a group is a run of K of
one task's rollouts, in plan order, so an Eval of one task (PushT's) still fills every worker.
Without xdist a group is the next K rollouts of the Eval, whatever their task."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from policybench.pytest_plugin.collection import Planned, planned_of
from policybench.pytest_plugin.workers import is_worker
from policybench.run.arms import ARM_IN_ID

OPTION = "envs_per_worker"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("policybench").addoption(
        "--envs-per-worker",
        type=int,
        default=1,
        metavar="K",
        help="step K rollouts of an Eval side by side in each process, the model asked once per "
        "step for all of them (one batched forward for a model with predict_batch; K calls in "
        "flight for a served one); each rollout keeps its own item and record; a process "
        "keeps up to max(K, --max-envs-per-worker) live envs; an Eval whose envs run in an "
        "interpreter of their own holds the K in one env server, stepped K to a round trip "
        "(default 1)",
    )


def slots_of(config: pytest.Config) -> int:
    return config.getoption(OPTION)


def pytest_configure(config: pytest.Config) -> None:
    slots = slots_of(config)
    if slots == 1:
        return
    for option, recorder in (
        ("record_video", "--record-video"),
        ("record_dataset", "--record-dataset"),
    ):
        if getattr(config.option, option, None):
            raise pytest.UsageError(
                f"--envs-per-worker {slots} steps rollouts side by side, and {recorder} records "
                "one rollout at a time; run the recording with --envs-per-worker 1"
            )


def group_scopes(nodeids: Sequence[str], slots: int) -> dict[str, str]:
    """Each item's unit of work under xdist: runs of `slots` items of one task (and in an A/B
    run one arm) of a test function, in collection order (`test_x[task/seed=3]` ->
    `test_x[task#1`, `test_x[task/seed=3/policy=B]` -> `test_x[task/policy=B#1`)."""
    seen: Counter[str] = Counter()
    scopes = {}
    for nodeid in nodeids:
        task = task_scope(nodeid)
        scopes[nodeid] = f"{task}#{seen[task] // slots}"
        seen[task] += 1
    return scopes


def task_scope(nodeid: str) -> str:
    """The unit of work of an item: its test function, task and arm (a rollout's id begins
    with its task and ends with its arm: `test_x[task/seed=3/policy=B]`); the item itself for
    any other test."""
    function, bracket, rollout_id = nodeid.partition("[")
    if not bracket:
        return nodeid
    task, *rest = rollout_id.rstrip("]").split("/")
    arm = [part for part in rest if part.startswith(f"{ARM_IN_ID}=")]
    return "/".join([function + bracket + task, *arm])


def group_of(item: pytest.Item, slots: int) -> list[Planned]:
    """The rollouts the item's group runs: the item's, then those of the next items this
    process is sure to run (same Eval, same policy arm, and under xdist the rest of the item's
    unit of work), up to `slots` of them."""
    return [planned for mate in group_items(item, slots) if (planned := planned_of(mate))]


def group_items(item: pytest.Item, slots: int) -> list[pytest.Item]:
    """The items whose rollouts `group_of(item, slots)` runs (none for an item that is not a
    rollout)."""
    planned = planned_of(item)
    if planned is None or slots == 1:
        return [] if planned is None else [item]
    if is_worker(item.config):
        unit = _units_of(item.session, slots)[item.nodeid]
        later = unit[unit.index(item) :]
    else:
        later = item.session.items[item.session.items.index(item) :]
    group = []
    for mate in later:
        mated = planned_of(mate)
        if len(group) == slots or mated is None or mated.eval.name != planned.eval.name:
            break
        if mated.arm == planned.arm:  # an A/B run's other arms make groups of their own
            group.append(mate)
    return group


_UNITS = pytest.StashKey[dict[str, list[pytest.Item]]]()


def _units_of(session: pytest.Session, slots: int) -> dict[str, list[pytest.Item]]:
    """Each item's unit of work, its items in order, as the controller's scheduler made them
    (the same items in the same order on every worker)."""
    if _UNITS not in session.stash:
        scopes = group_scopes([item.nodeid for item in session.items], slots)
        units: dict[str, list[pytest.Item]] = {}
        for item in session.items:
            units.setdefault(scopes[item.nodeid], []).append(item)
        session.stash[_UNITS] = {item.nodeid: units[scopes[item.nodeid]] for item in session.items}
    return session.stash[_UNITS]
