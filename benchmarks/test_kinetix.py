"""Kinetix (kinetix-env 3.0.2), the real-time chunking paper's benchmark, in Kinetix's own
interpreter (`policybench env install kinetix`): the 12 levels of the paper's eval_flow.py from the
paper's own files (`kinetix`), and the 8 of those names the wheel ships (`kinetix-wheel`), symbolic
observations, its noisy-action wrapper, 256 steps an episode, the first
episode of each rollout scored. No expert ships: bring a policy (`--policy=openpi` for a served
one). `--latency-sweep 0,steps:1,steps:2,steps:3` runs the paper's experiment on this harness.
Its goldens (`-m golden`) pin a level's first episode under a fixed action sequence on each Eval
(catapult, of the paper's files; grasp_easy, of the wheel's) where the interpreter is installed."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites.kinetix import KINETIX, KINETIX_WHEEL


@pytest.mark.golden
@pytest.mark.parametrize(
    ("evaluation", "level"),
    [(KINETIX, "catapult"), (KINETIX_WHEEL, "grasp_easy")],  # catapult: a file of the paper's
    ids=["kinetix", "kinetix-wheel"],
)
def test_kinetix_golden(evaluation, level, golden):
    """The level's first episode (key 0), then 8 fixed actions: motors one way, then the other,
    thrusters on."""
    k = np.arange(8)[:, None] / 8
    actions = np.hstack([np.where(k < 0.5, 0.8, -0.8) * np.ones((1, 4)), 0.5 * np.ones((8, 2))])
    timeout_s = 8 / evaluation.control_hz
    assert isolated_trace(evaluation, level, actions, timeout_s=timeout_s) == golden


@policybench.parametrize(KINETIX)
def test_kinetix(rollout, harness):
    harness(rollout)


@policybench.parametrize(KINETIX_WHEEL)
def test_kinetix_wheel(rollout, harness):
    harness(rollout)
