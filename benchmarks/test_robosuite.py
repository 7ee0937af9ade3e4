"""robosuite 1.5's tasks (robosuite 1.5.2 on MuJoCo 3.3.0), each env in robosuite's own
interpreter (`policybench env install robosuite`): Lift, Stack, NutAssembly, PickPlace, Door,
Wipe, ToolHang and the two-arm tasks on Pandas with their default composite controller, from
state, rollout i the env of seed i, 500 steps at most, solved at the first successful step. Not
comparable with robomimic's (robosuite 1.4.1). No expert ships: bring a policy. Its goldens
(`-m golden`) pin each Eval's first episode under a fixed action sequence where the interpreter
is installed."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites import robosuite15

EVALS = {e.name: e for e in robosuite15.EVALS}


def moves(width: int, steps: int = 8) -> np.ndarray:
    """Each arm down and sideways a little, turning slowly, its gripper closing halfway."""
    k = np.arange(steps)[:, None] / steps
    arm = np.hstack([0.3 * k, -0.2 * k, -0.4 * k, 0 * k, 0 * k, 0.2 * k])
    if width % 7 == 0:
        arm = np.hstack([arm, np.where(k < 0.5, -1.0, 1.0)])
    return np.hstack([arm] * (width // arm.shape[1]))


@pytest.mark.golden
@pytest.mark.parametrize("name", EVALS)
def test_robosuite_golden(name, golden):
    """The Eval's first episode (seed 0), then 8 fixed actions."""
    eval = EVALS[name]
    [rollout] = eval.rollouts(1, 0)
    width = robosuite15.action_width(rollout.scene.task)
    timeout_s = 8 / eval.control_hz
    assert isolated_trace(eval, rollout.scene.task, moves(width), timeout_s=timeout_s) == golden


@policybench.parametrize(*robosuite15.EVALS)
def test_robosuite(rollout, harness):
    harness(rollout)
