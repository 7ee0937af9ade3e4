"""LIBERO: the spatial, object, goal, 10 and 90 suites, staged as openpi's LIBERO example stages
its episodes (`libero_spatial`, ...) and as lerobot-eval does (`libero_spatial-lerobot`, ...);
rollout i of a task starts from its init state i (`--rollouts` at most 50). Select with -k or
--suite, e.g. -k "spatial and task0" or --suite lerobot."""

import policybench
from policybench.suites.libero import (
    LIBERO_10,
    LIBERO_10_LEROBOT,
    LIBERO_90,
    LIBERO_90_LEROBOT,
    LIBERO_GOAL,
    LIBERO_GOAL_LEROBOT,
    LIBERO_OBJECT,
    LIBERO_OBJECT_LEROBOT,
    LIBERO_SPATIAL,
    LIBERO_SPATIAL_LEROBOT,
)


@policybench.parametrize(LIBERO_SPATIAL)
def test_libero_spatial(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_OBJECT)
def test_libero_object(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_GOAL)
def test_libero_goal(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_10)
def test_libero_10(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_90)
def test_libero_90(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_SPATIAL_LEROBOT)
def test_libero_spatial_lerobot(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_OBJECT_LEROBOT)
def test_libero_object_lerobot(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_GOAL_LEROBOT)
def test_libero_goal_lerobot(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_10_LEROBOT)
def test_libero_10_lerobot(rollout, harness):
    harness(rollout)


@policybench.parametrize(LIBERO_90_LEROBOT)
def test_libero_90_lerobot(rollout, harness):
    harness(rollout)
