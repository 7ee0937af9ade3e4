"""Kinetix, in its interpreter (kinetix-env 3.0.2, JAX on CPU): the Eval's first observation and a
fixed action sequence's trajectory equal, bit for bit, a plain loop written as the real-time
chunking paper's eval_flow.py runs one env (tests/kinetix_reference.py, same interpreter, same
stack). Skipped where the interpreter is not installed (`policybench env install kinetix`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.suites import kinetix
from policybench.world import World
from tests.interpreters import built_python

HERE = Path(__file__).resolve().parent
STEPS = 6


@pytest.fixture(scope="module")
def python() -> Path:
    return built_python(kinetix.INTERPRETER)


@pytest.mark.parametrize("level", ["grasp_easy", "car_launch"])
def test_first_observation_and_trajectory_are_eval_flows_bit_for_bit(level, python, tmp_path):
    [rollout] = [r for r in kinetix.KINETIX.rollouts(1, 0) if r.scene.task == level]
    out = tmp_path / "reference.npz"
    command = [str(python), str(HERE / "kinetix_reference.py"), level]
    subprocess.run([*command, str(rollout.scene.seed), str(STEPS), str(out)], check=True)
    with np.load(out) as saved:
        saved = dict(saved)
    world = World(kinetix.KINETIX)
    try:
        first = world.reset(rollout.scene)
        assert np.array_equal(first[keys.STATE], saved["first/state"])
        assert first[keys.STATE].dtype == saved["first/state"].dtype
        for i, action in enumerate(saved["actions"]):
            step = world.step(action)
            assert np.array_equal(step.obs[keys.STATE], saved[f"step{i}/state"]), i
            assert step.reward == saved[f"step{i}/reward"]
            assert step.terminated == saved[f"step{i}/done"]
            assert step.success == (saved[f"step{i}/done"] and saved[f"step{i}/goal"])
            if step.terminated:
                break
    finally:
        world.close()


def test_a_level_the_wheel_lacks_is_refused_with_the_levels_it_has(python):
    from policybench.envserver.proxy import EnvServerError

    with pytest.raises(
        EnvServerError,
        match=r"no Kinetix level 'catapult' \(kinetix-env 3.0.2 lacks catapult\); its levels: "
        "grasp_easy, hard_lunar_lander",
    ):
        kinetix.KINETIX.make_env("catapult")
