"""ManiSkill3's tabletop tasks on ManiSkill 3.0.1 (SAPIEN's CPU physics), each env in ManiSkill's
own interpreter (`policybench env install maniskill`), staged as ManiSkill's Diffusion Policy
baseline evaluates them on CPU: rollout i is the episode of seed 1 + i, run for the baseline's
episode length (100 steps; StackCube 200, PegInsertionSide 300, PushT 150), scored by
success_once. State Evals and RGB Evals (`-rgb`, 128x128 base camera). Its goldens (`-m golden`)
pin each Eval's first episode under a fixed action sequence where the interpreter is installed
and SAPIEN finds a Vulkan device."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites import maniskill

EVALS = {e.name: e for e in (*maniskill.STATE_EVALS, *maniskill.RGB_EVALS)}


def moves(width: int, steps: int = 8) -> np.ndarray:
    """Down and sideways a little, turning slowly where the control turns, the gripper closing
    halfway through."""
    k = np.arange(steps)[:, None] / steps
    move = np.hstack([0.3 * k, -0.2 * k, -0.4 * k, 0 * k, 0 * k, 0.2 * k])
    if width == 4:
        return np.hstack([move[:, :3], np.where(k < 0.5, 1.0, -1.0)])
    if width == 7:
        return np.hstack([move, np.where(k < 0.5, 1.0, -1.0)])
    return move


def golden_trace(name: str) -> dict:
    """The Eval's first episode (seed 1), then 8 fixed actions: its simulated values compared
    within PhysX's CPU numerics (maniskill.CPU_NUMERICS)."""
    eval = EVALS[name]
    [rollout] = eval.rollouts(1, 0)
    width = maniskill.action_width(rollout.scene.task)
    return isolated_trace(eval, rollout.scene.task, moves(width), 0.4, maniskill.CPU_NUMERICS)


@pytest.mark.golden
@pytest.mark.parametrize("name", EVALS)
def test_maniskill_golden(name, golden):
    assert golden_trace(name) == golden


@policybench.parametrize(*maniskill.STATE_EVALS)
def test_maniskill(rollout, harness):
    harness(rollout)


@policybench.parametrize(*maniskill.RGB_EVALS)
def test_maniskill_rgb(rollout, harness):
    harness(rollout)
