"""ManiSkill3's tabletop tasks built of primitive shapes (PlugCharger, PullCube, LiftPegUpright,
PokeCube, PullCubeTool, RollBall, PlaceSphere, StackPyramid, TwoRobotPickCube,
TwoRobotStackCube) on ManiSkill 3.0.1 in ManiSkill's interpreter (`policybench env install
maniskill`), from state, as ManiSkill's PPO baseline evaluates them: joint-delta actions, the
registered episode length, success_once. No expert ships: bring a policy. Its goldens
(`-m golden`) pin each Eval's first episode under a fixed action sequence where the interpreter
is installed and SAPIEN finds a Vulkan device."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites import maniskill, maniskill_primitives

EVALS = {e.name: e for e in maniskill_primitives.EVALS}


def joint_moves(width: int, steps: int = 8) -> np.ndarray:
    """Each arm's joints turning a little each way, its gripper closing halfway through."""
    k = np.arange(steps)[:, None] / steps
    arm = np.hstack([0.3 * k * (-1) ** np.arange(7), np.where(k < 0.5, 1.0, -1.0)])
    return np.hstack([arm] * (width // 8))


@pytest.mark.golden
@pytest.mark.parametrize("name", EVALS)
def test_maniskill_primitives_golden(name, golden):
    """The Eval's first episode (seed 1), then 8 fixed actions."""
    eval = EVALS[name]
    [rollout] = eval.rollouts(1, 0)
    width = maniskill.action_width(rollout.scene.task)
    assert (
        isolated_trace(eval, rollout.scene.task, joint_moves(width), 0.4, maniskill.CPU_NUMERICS)
        == golden
    )


@policybench.parametrize(*maniskill_primitives.EVALS)
def test_maniskill_primitives(rollout, harness):
    harness(rollout)
