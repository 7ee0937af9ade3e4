"""LIBERO-PRO: LIBERO's spatial, object, goal and 10 suites with objects replaced (`_object`),
positions swapped (`_swap`), instructions reworded (`_lan`) or tasks replaced (`_task`), each env
in LIBERO-PRO's own interpreter (`policybench env install libero-pro`), staged as LIBERO-PRO's
evaluator stages its episodes; rollout i of a task starts from its init state i (`--rollouts` at
most 50). Select with -k or --suite, e.g. -k "lan and task0". Its goldens (`-m golden`) pin one
task of each kind on each stack (LIBERO-PRO's reference stack, MuJoCo 2.3.7; and MuJoCo 3.17)
where its interpreter is installed."""

import pytest

import policybench
from benchmarks.golden_pipelines import _libero_moves, isolated_trace
from policybench.suites import libero_pro as suite
from policybench.suites.libero_pro import (
    INTERPRETER_MUJOCO3,
    LIBERO_10_LAN,
    LIBERO_10_OBJECT,
    LIBERO_10_SWAP,
    LIBERO_10_TASK,
    LIBERO_GOAL_LAN,
    LIBERO_GOAL_OBJECT,
    LIBERO_GOAL_SWAP,
    LIBERO_GOAL_TASK,
    LIBERO_OBJECT_LAN,
    LIBERO_OBJECT_OBJECT,
    LIBERO_OBJECT_SWAP,
    LIBERO_OBJECT_TASK,
    LIBERO_SPATIAL_LAN,
    LIBERO_SPATIAL_OBJECT,
    LIBERO_SPATIAL_SWAP,
    LIBERO_SPATIAL_TASK,
    libero_pro,
)
from policybench.suites.libero_pro.tasks import EXTRA_INSTRUCTIONS

GOLDENS = {
    "spatial-object-task0": (LIBERO_SPATIAL_OBJECT, "task0"),
    "object-swap-task1": (LIBERO_OBJECT_SWAP, "task1"),
    "goal-lan-task2": (LIBERO_GOAL_LAN, "task2"),
    "10-task-task3": (LIBERO_10_TASK, "task3"),
}
# The same on MuJoCo 3.17 (`<suite>-mujoco3`, its interpreter `libero-pro-mujoco3`).
GOLDENS.update(
    (f"mujoco3-{name}", (libero_pro(eval.name, INTERPRETER_MUJOCO3), task))
    for name, (eval, task) in list(GOLDENS.items())
)


@pytest.mark.golden
@pytest.mark.parametrize("name", GOLDENS)
def test_libero_pro_golden(name, golden):
    """Rollout 0 of the task as LIBERO-PRO's evaluator stages it, then 8 fixed actions."""
    eval, task = GOLDENS[name]
    assert isolated_trace(eval, task, _libero_moves(), timeout_s=0.4) == golden


@policybench.parametrize(LIBERO_SPATIAL_OBJECT)
def test_libero_spatial_object(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_SPATIAL_SWAP)
def test_libero_spatial_swap(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_SPATIAL_LAN)
def test_libero_spatial_lan(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_SPATIAL_TASK)
def test_libero_spatial_task(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_OBJECT_OBJECT)
def test_libero_object_object(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_OBJECT_SWAP)
def test_libero_object_swap(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_OBJECT_LAN)
def test_libero_object_lan(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_OBJECT_TASK)
def test_libero_object_task(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_GOAL_OBJECT)
def test_libero_goal_object(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_GOAL_SWAP)
def test_libero_goal_swap(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_GOAL_LAN)
def test_libero_goal_lan(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_GOAL_TASK)
def test_libero_goal_task(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_10_OBJECT)
def test_libero_10_object(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_10_SWAP)
def test_libero_10_swap(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_10_LAN)
def test_libero_10_lan(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_10_TASK)
def test_libero_10_task(rollout, harness):
    harness(rollout)


def _rollouts_of(eval):
    @policybench.parametrize(eval)
    def test(rollout, harness):
        harness(rollout)

    return test


# The suites LIBERO-PRO ships beyond the four kinds (`libero_spatial_with_mug`, `libero_mine`,
# ...), a test function each (their rollout ids repeat across suites).
for _suite in EXTRA_INSTRUCTIONS:
    globals()[_suite.upper()] = getattr(suite, _suite.upper())
    globals()[f"test_{_suite}"] = _rollouts_of(getattr(suite, _suite.upper()))
