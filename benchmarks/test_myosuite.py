"""MyoSuite's finger, elbow and hand tasks (musculoskeletal models, one activation a muscle), in
an interpreter of their own (`policybench env install myosuite`), `--rollouts` seeds a task. No
built-in expert: bring a policy (`--policy=random` runs). Its golden (`-m golden`) pins the hand's
pose task under a fixed action sequence where the interpreter is installed."""

import numpy as np
import pytest

import policybench
from benchmarks.golden_pipelines import isolated_trace
from policybench.suites.myosuite import MYOSUITE_ELBOW, MYOSUITE_FINGER, MYOSUITE_HAND


@pytest.mark.golden
def test_myosuite_golden(golden):
    """myoHandPoseRandom's seed 0, then 10 steps of every muscle's activation rising in a wave."""
    k = np.arange(10)[:, None] / 10
    actions = np.sin(2 * np.pi * k + np.linspace(0, np.pi, 39)[None, :])
    timeout_s = 10 / MYOSUITE_HAND.control_hz
    trace = isolated_trace(MYOSUITE_HAND, "myoHandPoseRandom-v0", actions, timeout_s=timeout_s)
    assert trace == golden


@policybench.parametrize(MYOSUITE_FINGER)
def test_myosuite_finger(rollout, harness):
    harness(rollout)


@policybench.parametrize(MYOSUITE_ELBOW)
def test_myosuite_elbow(rollout, harness):
    harness(rollout)


@policybench.parametrize(MYOSUITE_HAND)
def test_myosuite_hand(rollout, harness):
    harness(rollout)
