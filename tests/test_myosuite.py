"""MyoSuite, in its interpreter (myosuite 3.0.0, gymnasium 1.2, MuJoCo 4): each task's first
observation and a fixed action sequence's observations, rewards and ends equal, bit for bit, a
plain loop of MyoSuite's own (tests/myosuite_reference.py, same interpreter), and success comes at
the sixth solved step as MyoSuite's evaluate_success counts it; a random policy served by the
run's own server plays every task at -n 2. Skipped where the interpreter is not installed
(`policybench env install myosuite`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.suites import myosuite
from policybench.world import World
from tests.interpreters import built_python
from tests.served_random import served_random_run

HERE = Path(__file__).resolve().parent
STEPS = 40
CASES = [
    (evaluation, task)
    for evaluation in (myosuite.MYOSUITE_FINGER, myosuite.MYOSUITE_ELBOW, myosuite.MYOSUITE_HAND)
    for task in evaluation.tasks
]


@pytest.fixture(scope="module")
def python() -> Path:
    return built_python(myosuite.INTERPRETER)


@pytest.mark.parametrize(("evaluation", "task"), CASES, ids=[task for _, task in CASES])
def test_the_eval_stages_myosuites_own_loop_bit_for_bit(evaluation, task, python, tmp_path):
    [rollout] = [r for r in evaluation.rollouts(1, 0) if r.scene.task == task]
    world = World(evaluation)
    try:
        first = world.reset(rollout.scene)
        space = world.env_for(task).action_space
        actions = np.random.default_rng(4).uniform(space.low, space.high, (STEPS, *space.shape))
        np.save(tmp_path / "actions.npy", actions.astype(space.dtype))
        out = tmp_path / "reference.npz"
        command = [str(python), str(HERE / "myosuite_reference.py"), task,
                   str(rollout.scene.seed), str(tmp_path / "actions.npy"), str(out)]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True)
        with np.load(out) as saved:
            saved = dict(saved)
        np.testing.assert_array_equal(first[keys.STATE], saved["observations"][0])
        solved = 0
        for k, action in enumerate(actions.astype(space.dtype)):
            step = world.step(action)
            np.testing.assert_array_equal(step.obs[keys.STATE], saved["observations"][k + 1])
            assert step.reward == saved["rewards"][k]
            assert (step.terminated, step.truncated) == tuple(saved["ends"][k])
            solved += bool(saved["solved"][k])
            assert step.success == (solved > 5)
            if step.terminated or step.truncated:
                break
    finally:
        world.close()


BENCHMARK = """
import policybench
from policybench.suites.myosuite import MYOSUITE_ELBOW, MYOSUITE_FINGER, MYOSUITE_HAND


@policybench.parametrize(MYOSUITE_FINGER, MYOSUITE_ELBOW, MYOSUITE_HAND)
def test_myosuite(rollout, harness):
    harness(rollout)
"""


def test_a_served_random_policy_plays_every_task_at_two_workers(python, pytester, monkeypatch):
    from policybench.envserver.interpreters import override_variable

    # pytester's runs have a HOME of their own, without the built interpreter's cache: name it.
    monkeypatch.setenv(override_variable(myosuite.INTERPRETER), str(python))
    found, said = served_random_run(pytester, "test_myosuite", BENCHMARK)
    assert sorted(r["task"] for r in found) == sorted(task for _, task in CASES), said
