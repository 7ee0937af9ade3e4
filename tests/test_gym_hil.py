"""gym-hil as its own loop runs it: `gym.make("gym_hil/<Task>Base-v0")`, numpy's generator seeded
(gym-hil draws the block from it), `reset(seed=s)`, step. The Evals' envs give the same first
observation and the same trajectory under fixed actions, bit for bit; a scene is its seed alone
and numpy's generator is left as it was; a random policy served by the run's own server plays
every task of both Evals at -n 2."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gym_hil")

import gymnasium as gym

from policybench import keys
from policybench.suites.gym_hil import ENVIRONMENT_STATE, GYM_HIL, TASKS, WRIST_IMAGE
from tests.served_random import served_random_run

ACTIONS = np.random.default_rng(11).uniform(-0.05, 0.05, (15, 7)).astype(np.float32)


def plain_loop(task: str, seed: int, pixels: bool = False, steps: int = len(ACTIONS)):
    """gym-hil's own env, as its README's loop makes and steps it, numpy seeded first."""
    import gym_hil  # noqa: F401 (registers the envs)

    kwargs = {"image_obs": pixels}
    if task == "PandaPickCube":
        kwargs["random_block_position"] = True
    env = gym.make(f"gym_hil/{task}Base-v0", **kwargs)
    np.random.seed(seed)
    obs, _ = env.reset(seed=seed)
    played = [env.step(action) for action in ACTIONS[:steps]]
    env.close()
    return obs, played


@pytest.mark.parametrize("task", list(TASKS))
def test_the_eval_stages_gym_hils_own_loop_bit_for_bit(task):
    theirs, their_steps = plain_loop(task, 5)
    env = GYM_HIL.make_env(task)
    before = np.random.get_state()[1].copy()
    try:
        obs, _ = env.reset(seed=5)
        np.testing.assert_array_equal(np.random.get_state()[1], before)  # left as it was
        np.testing.assert_array_equal(obs[keys.STATE], theirs["agent_pos"])
        np.testing.assert_array_equal(obs[ENVIRONMENT_STATE], theirs[ENVIRONMENT_STATE])
        for action, (their_obs, their_reward, their_end, _, their_info) in zip(
            ACTIONS, their_steps, strict=True
        ):
            mine, reward, end, _, info = env.step(action)
            np.testing.assert_array_equal(mine[keys.STATE], their_obs["agent_pos"])
            np.testing.assert_array_equal(mine[ENVIRONMENT_STATE], their_obs[ENVIRONMENT_STATE])
            assert (reward, end, info["is_success"]) == (
                their_reward,
                their_end,
                their_info["succeed"],
            )
        # The same seed again, after another scene: the same scene.
        env.reset(seed=6)
        again, _ = env.reset(seed=5)
        np.testing.assert_array_equal(again[ENVIRONMENT_STATE], theirs[ENVIRONMENT_STATE])
    finally:
        env.close()


def test_the_pixels_eval_shows_gym_hils_two_cameras():
    from policybench.suites.gym_hil import GYM_HIL_PIXELS

    theirs, _ = plain_loop("PandaPickCube", 2, pixels=True, steps=0)
    env = GYM_HIL_PIXELS.make_env("PandaPickCube")
    try:
        obs, _ = env.reset(seed=2)
    finally:
        env.close()
    np.testing.assert_array_equal(obs[keys.IMAGE], theirs["pixels"]["front"])
    np.testing.assert_array_equal(obs[WRIST_IMAGE], theirs["pixels"]["wrist"])
    np.testing.assert_array_equal(obs[keys.STATE], theirs["agent_pos"])


BENCHMARK = """
import policybench
from policybench.suites.gym_hil import GYM_HIL


@policybench.parametrize(GYM_HIL)
def test_gym_hil(rollout, harness):
    harness(rollout)
"""


def test_a_served_random_policy_plays_every_task_at_two_workers(pytester: pytest.Pytester):
    found, said = served_random_run(pytester, "test_gym_hil", BENCHMARK)
    assert sorted(r["task"] for r in found) == sorted(TASKS), said
