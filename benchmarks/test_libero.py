"""LIBERO: the spatial, object, goal, 10 and 90 suites; rollout i of a task starts from its
init state i (`--rollouts` at most 50). Select with -k, e.g. -k "spatial and task0"."""

import policybench
from policybench.suites.libero import (
    LIBERO_10,
    LIBERO_90,
    LIBERO_GOAL,
    LIBERO_OBJECT,
    LIBERO_SPATIAL,
)


@policybench.evaluate(LIBERO_SPATIAL)
def test_libero_spatial(rollout, harness):
    harness(rollout)


@policybench.evaluate(LIBERO_OBJECT)
def test_libero_object(rollout, harness):
    harness(rollout)


@policybench.evaluate(LIBERO_GOAL)
def test_libero_goal(rollout, harness):
    harness(rollout)


@policybench.evaluate(LIBERO_10)
def test_libero_10(rollout, harness):
    harness(rollout)


@policybench.evaluate(LIBERO_90)
def test_libero_90(rollout, harness):
    harness(rollout)
