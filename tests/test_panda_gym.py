"""panda-gym as its own loop runs it: `gym.make("Panda<Task>-v3")`, `reset(seed=s)`, `step`. The
Evals' envs give the same observations, goals, rewards, ends and successes, bit for bit, for every
task, after another scene ran in them first; a random policy served by the run's own server plays
every task at -n 2."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("panda_gym")

from policybench import keys
from policybench.suites.panda_gym import ACHIEVED, DESIRED, OBSERVATION, TASKS, PandaGym
from tests.served_random import served_random_run

STEPS = 30


def plain_loop(task: str, seed: int, actions: np.ndarray):
    import panda_gym  # noqa: F401 (registers the envs)

    env = gym.make(f"Panda{task}-v3")
    first, _ = env.reset(seed=seed)
    played = [env.step(action) for action in actions]
    env.close()
    return first, played


def same(mine: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(mine[keys.STATE], theirs[OBSERVATION])
    np.testing.assert_array_equal(mine[ACHIEVED], theirs[ACHIEVED])
    np.testing.assert_array_equal(mine[DESIRED], theirs[DESIRED])


@pytest.mark.parametrize("task", list(TASKS))
def test_the_eval_stages_panda_gyms_own_loop_bit_for_bit(task):
    size = TASKS[task][2]
    actions = np.random.default_rng(6).uniform(-1, 1, (STEPS, size)).astype(np.float32)
    env = PandaGym(task)
    try:
        env.reset(seed=11)  # another scene first
        env.step(actions[0])
        first, played = plain_loop(task, 2, actions)
        obs, _ = env.reset(seed=2)
        same(obs, first)
        for action, (their_obs, reward, terminated, truncated, info) in zip(
            actions, played, strict=True
        ):
            mine, my_reward, my_end, my_cut, my_info = env.step(action)
            same(mine, their_obs)
            assert (my_reward, my_end, my_cut) == (reward, terminated, truncated)
            assert my_info["is_success"] == info["is_success"]
            if terminated or truncated:
                break
    finally:
        env.close()


def test_an_unknown_task_is_refused_naming_the_known():
    with pytest.raises(ValueError, match="PickAndPlace"):
        PandaGym("Flip")


BENCHMARK = """
import policybench
from policybench.suites.panda_gym import PANDA_GYM_PICK, PANDA_GYM_PUSH, PANDA_GYM_REACH


@policybench.parametrize(PANDA_GYM_REACH, PANDA_GYM_PUSH, PANDA_GYM_PICK)
def test_panda_gym(rollout, harness):
    harness(rollout)
"""


def test_a_served_random_policy_plays_every_task_at_two_workers(pytester: pytest.Pytester):
    found, said = served_random_run(pytester, "test_panda_gym", BENCHMARK)
    assert sorted(r["task"] for r in found) == sorted(TASKS), said
