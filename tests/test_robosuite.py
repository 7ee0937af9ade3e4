"""robosuite 1.5's tasks, in their interpreter (robosuite 1.5.2, MuJoCo 3.3.0): each Eval's first
observation and a fixed action sequence's trajectory equal, bit for bit, a plain loop written as
robosuite's quick start runs a task (tests/robosuite_reference.py, same interpreter, same
stack), a one-arm and a two-arm task. Skipped where the interpreter is not installed
(`policybench env install robosuite`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.suites import robosuite15
from policybench.world import World
from tests.interpreters import built_python

HERE = Path(__file__).resolve().parent
STEPS = 6


@pytest.fixture(scope="module")
def python() -> Path:
    return built_python(robosuite15.INTERPRETER)


@pytest.mark.parametrize(
    "eval", [robosuite15.LIFT, robosuite15.WIPE, robosuite15.TWO_ARM_LIFT], ids=lambda e: e.name
)
def test_first_observation_and_trajectory_are_robosuites_own_loops_bit_for_bit(
    eval, python, tmp_path
):
    rollout = eval.rollouts(2, 0)[1]  # seed 1: a seed other than the default's
    out = tmp_path / "reference.npz"
    robots = ",".join(eval.metadata["robots"])
    command = [str(python), str(HERE / "robosuite_reference.py"), eval.metadata["robosuite_env"]]
    subprocess.run([*command, robots, str(rollout.scene.seed), str(STEPS), str(out)], check=True)
    with np.load(out) as saved:
        saved = dict(saved)
    world = World(eval)
    try:
        assert_same(world.reset(rollout.scene), saved, "first")
        for i, action in enumerate(saved["actions"]):
            step = world.step(action)
            assert_same(step.obs, saved, f"step{i}")
            assert step.reward == saved[f"step{i}/reward"]
            assert step.success == saved[f"step{i}/success"]
    finally:
        world.close()


def assert_same(ours: dict[str, np.ndarray], saved: dict[str, np.ndarray], prefix: str) -> None:
    """Every entry of robosuite's observation and the flat `state`, bit for bit."""
    theirs = {
        key.removeprefix(f"{prefix}/"): value
        for key, value in saved.items()
        if key.startswith(f"{prefix}/") and key.rpartition("/")[2] not in ("reward", "success")
    }
    assert keys.STATE in theirs and len(theirs) > 5
    for key, array in theirs.items():
        assert ours[key].dtype == array.dtype and ours[key].shape == array.shape, (prefix, key)
        assert np.array_equal(ours[key], array), (prefix, key)


def test_seeds_place_the_objects_differently_and_alike_in_any_order(python):
    """robosuite 1.5 seeds an env when it is made: the env of seed 1 is the same whether seed 0's
    came first or not, and differs from seed 0's."""
    world = World(robosuite15.LIFT)
    try:
        first, second = robosuite15.LIFT.rollouts(2, 0)
        alone = world.reset(second.scene)["cube_pos"]
        other = world.reset(first.scene)["cube_pos"]
        again = world.reset(second.scene)["cube_pos"]
        assert np.array_equal(alone, again) and not np.array_equal(alone, other)
    finally:
        world.close()


def test_a_task_robosuite_lacks_is_refused_with_its_tasks(python):
    from policybench.envserver.proxy import EnvServerError

    with pytest.raises(EnvServerError, match="no robosuite task 'lift_cube'; its tasks: lift"):
        robosuite15.LIFT.make_env("lift_cube")


def test_each_evals_action_width_is_its_envs(python):
    """The width each Eval's codecs and hold declare is the action the env takes (Wipe and
    TwoArmPegInHole hold tools, not grippers: 6 numbers an arm)."""
    for eval in robosuite15.EVALS:
        [rollout] = eval.rollouts(1, 0)
        env = eval.make_env(rollout.scene.task)
        try:
            width = robosuite15.action_width(rollout.scene.task)
            assert env.action_space.shape == (width,), eval.name
            assert eval.hold(None, {}).shape == (width,), eval.name
        finally:
            env.close()
