"""Kinetix (kinetix-env 3.0.2), the real-time chunking paper's benchmark, in Kinetix's own
interpreter (`policybench env install kinetix`): the 8 levels of the paper's eval_flow.py that the
wheel ships, symbolic observations, its noisy-action wrapper, 256 steps an episode, the first
episode of each rollout scored. No expert ships: bring a policy (`--policy=openpi` for a served
one). `--latency-sweep 0,steps:1,steps:2,steps:3` runs the paper's experiment on this harness.
Its golden (`-m golden`) pins grasp_easy's first episode under a fixed action sequence where the
interpreter is installed."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites.kinetix import KINETIX


@pytest.mark.golden
def test_kinetix_golden(golden):
    """grasp_easy's first episode (key 0), then 8 fixed actions: motors one way, then the other,
    thrusters on."""
    k = np.arange(8)[:, None] / 8
    actions = np.hstack([np.where(k < 0.5, 0.8, -0.8) * np.ones((1, 4)), 0.5 * np.ones((8, 2))])
    assert (
        isolated_trace(KINETIX, "grasp_easy", actions, timeout_s=8 / KINETIX.control_hz) == golden
    )


@policybench.parametrize(KINETIX)
def test_kinetix(rollout, harness):
    harness(rollout)
