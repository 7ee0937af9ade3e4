"""robomimic's tasks (the Diffusion Policy paper's main table) on robosuite 1.4.1 and MuJoCo
2.3.7, each env in robomimic's own interpreter (`policybench env install robomimic`), staged as
Diffusion Policy's image runner stages its test episodes: rollout i is its test episode of seed
100000 + i, run for its max steps (400; 700 for Transport and ToolHang). Its goldens
(`-m golden`) pin each Eval's first test episode under a fixed action sequence where the
interpreter is installed."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites.robomimic import CAN, CPU_NUMERICS, LIFT, SQUARE, TOOL_HANG, TRANSPORT

EVALS = {e.name: e for e in (LIFT, CAN, SQUARE, TRANSPORT, TOOL_HANG)}


def moves(arms: int, steps: int = 8) -> np.ndarray:
    """Each arm down and sideways a little, turning slowly, its gripper closing halfway through."""
    k = np.arange(steps)[:, None] / steps
    arm = np.hstack(
        [0.3 * k, -0.2 * k, -0.4 * k, 0 * k, 0 * k, 0.2 * k, np.where(k < 0.5, -1.0, 1.0)]
    )
    return np.hstack([arm] * arms)


def golden_trace(name: str) -> dict:
    """The Eval's first test episode (seed 100000), then 8 fixed actions: its simulated values
    compared within robosuite's CPU numerics (CPU_NUMERICS)."""
    eval = EVALS[name]
    [rollout] = eval.rollouts(1, 0)
    arms = len(eval.metadata["robots"])
    return isolated_trace(eval, rollout.scene.task, moves(arms), 0.4, CPU_NUMERICS)


@pytest.mark.golden
@pytest.mark.parametrize("name", EVALS)
def test_robomimic_golden(name, golden):
    assert golden_trace(name) == golden


@policybench.parametrize(LIFT)
def test_robomimic_lift(rollout, harness):
    harness(rollout)


@policybench.parametrize(CAN)
def test_robomimic_can(rollout, harness):
    harness(rollout)


@policybench.parametrize(SQUARE)
def test_robomimic_square(rollout, harness):
    harness(rollout)


@policybench.parametrize(TRANSPORT)
def test_robomimic_transport(rollout, harness):
    harness(rollout)


@policybench.parametrize(TOOL_HANG)
def test_robomimic_tool_hang(rollout, harness):
    harness(rollout)
