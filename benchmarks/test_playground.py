"""MuJoCo Playground's manipulation tasks through EnvPool: a Panda picking a cube (with and
without the target orientation) and opening a cabinet at 50 Hz, a Panda with a Robotiq gripper
pushing a cube at 200 Hz, a LEAP hand reorienting a cube at 20 Hz. No built-in expert: bring a
policy (`--policy=random` runs)."""

import policybench
from policybench.suites.playground import (
    PLAYGROUND_LEAP_CUBE_REORIENT,
    PLAYGROUND_PANDA,
    PLAYGROUND_ROBOTIQ_PUSH_CUBE,
)


@policybench.parametrize(PLAYGROUND_PANDA)
def test_playground_panda(rollout, harness):
    harness(rollout)


@policybench.parametrize(PLAYGROUND_ROBOTIQ_PUSH_CUBE)
def test_playground_robotiq_push_cube(rollout, harness):
    harness(rollout)


@policybench.parametrize(PLAYGROUND_LEAP_CUBE_REORIENT)
def test_playground_leap_cube_reorient(rollout, harness):
    harness(rollout)
