"""OGBench's manipulation environments: cube-single, cube-double, scene and puzzle-3x3, each on
its five evaluation tasks, goal-conditioned (the goal's observation beside the policy's),
`--rollouts` seeds a task. The cube Evals' built-in policy is OGBench's cube oracle."""

import policybench
from policybench.suites.ogbench import (
    OGBENCH_CUBE_DOUBLE,
    OGBENCH_CUBE_SINGLE,
    OGBENCH_PUZZLE_3X3,
    OGBENCH_SCENE,
)


@policybench.parametrize(OGBENCH_CUBE_SINGLE)
def test_ogbench_cube_single(rollout, harness):
    harness(rollout)


@policybench.parametrize(OGBENCH_CUBE_DOUBLE)
def test_ogbench_cube_double(rollout, harness):
    harness(rollout)


@policybench.parametrize(OGBENCH_SCENE)
def test_ogbench_scene(rollout, harness):
    harness(rollout)


@policybench.parametrize(OGBENCH_PUZZLE_3X3)
def test_ogbench_puzzle_3x3(rollout, harness):
    harness(rollout)
