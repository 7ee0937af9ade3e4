"""ManiSkill3's five tasks as RDT-1B's eval_sim/eval_rdt_maniskill.py evaluates them
(PegInsertionSide, PickCube, StackCube, PlugCharger, PushCube) on ManiSkill 3.0.1 in
ManiSkill's interpreter (`policybench env install maniskill`): absolute joint targets, the
512x512 render and the joints as proprio, seeds from 20241201, up to 400 steps. No expert ships:
bring a policy (`--policy=openpi` for a served one). Its goldens (`-m golden`) pin each Eval's
first episode under a fixed action sequence where the interpreter is installed and SAPIEN finds
a Vulkan device."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites import maniskill, maniskill_rdt

EVALS = {e.name: e for e in maniskill_rdt.EVALS}
# Panda's rest pose (ManiSkill's keyframe) and an open gripper, nudged joint by joint.
REST = np.array([0.0, np.pi / 8, 0.0, -np.pi * 5 / 8, 0.0, np.pi * 3 / 4, np.pi / 4, 0.04])


@pytest.mark.golden
@pytest.mark.parametrize("name", EVALS)
def test_maniskill_rdt_golden(name, golden):
    """The Eval's first episode (seed 20241201), then 4 fixed joint targets near the rest pose,
    the fingers closing on the last two."""
    eval = EVALS[name]
    [rollout] = eval.rollouts(1, 0)
    k = np.arange(4)[:, None] / 4
    targets = REST + np.hstack([0.2 * k * (-1) ** np.arange(7), np.where(k < 0.5, 0.0, -0.04)])
    assert isolated_trace(eval, rollout.scene.task, targets, 0.2, maniskill.CPU_NUMERICS) == golden


@policybench.parametrize(*maniskill_rdt.EVALS)
def test_maniskill_rdt(rollout, harness):
    harness(rollout)
