"""gymnasium-robotics' kitchen and Adroit tasks, staged as a plain gymnasium loop stages them:
policybench's first observation and the trajectory of a fixed action sequence are, bit for bit,
those of `gym.make(id).reset(seed=s)` and `step(a)` in the same process; success is counted as
the published numbers count it (the kitchen's tasks all done; Adroit's goal held on more than
25 steps, 20 for the pen, as hand_dapg's evaluate_success counts)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from policybench import keys
from policybench.spec import Scene
from policybench.world import World

pytest.importorskip(
    "gymnasium_robotics", reason="needs gymnasium-robotics: pip install 'policybench[robotics]'"
)

from policybench.suites import gymnasium_robotics as robotics

STEPS = 40


def plain_loop(env_id: str, seed: int, actions: np.ndarray, **kwargs) -> list[tuple]:
    """The reference loop: gym.make, reset(seed), step each action."""
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    env = gym.make(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    state = lambda o: np.array(o["observation"] if isinstance(o, dict) else o)  # noqa: E731
    found = [(state(obs), None)]
    for action in actions:
        obs, reward, *_ = env.step(action)
        found.append((state(obs), float(reward)))
    env.close()
    return found


def ours(eval, task: str, seed: int, actions: np.ndarray) -> list[tuple]:
    world = World(eval)
    try:
        found = [(world.reset(Scene(task, seed))[keys.STATE], None)]
        for action in actions:
            step = world.step(action)
            found.append((step.obs[keys.STATE], float(step.reward)))
        return found
    finally:
        world.close()


def actions_for(space: gym.spaces.Box, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(space.low, space.high, (STEPS, *space.shape)).astype(space.dtype)


@pytest.mark.parametrize(
    ("eval", "task", "env_id", "kwargs"),
    [
        (robotics.KITCHEN, "microwave", "FrankaKitchen-v1", {"tasks_to_complete": ["microwave"]}),
        (robotics.KITCHEN, "complete", "FrankaKitchen-v1",
         {"tasks_to_complete": ["microwave", "kettle", "light switch", "slide cabinet"]}),
        *((robotics.adroit(task), task, id, {}) for task, id in robotics.ADROIT_IDS.items()),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)  # fmt: skip
def test_first_observation_and_trajectory_are_the_plain_loops_bit_for_bit(
    eval, task, env_id, kwargs
):
    seed = 3
    space = eval.make_env(task).action_space
    actions = actions_for(space, seed)
    reference = plain_loop(env_id, seed, actions, **kwargs)
    found = ours(eval, task, seed, actions)
    assert len(found) == len(reference) == STEPS + 1
    for step, ((state, reward), (expected, expected_reward)) in enumerate(
        zip(found, reference, strict=True)
    ):
        assert np.array_equal(state, expected), f"step {step}"
        assert state.dtype == expected.dtype
        assert reward == expected_reward, f"step {step}"
    other = ours(eval, task, seed + 1, actions[:1])  # another seed, another scene
    assert not np.array_equal(other[0][0], found[0][0])


def test_adroit_succeeds_once_its_goal_held_more_steps_than_hand_dapg_counts():
    """The pen counts 20: a step succeeds when the episode's achieved steps so far exceed 20,
    whether or not this step's goal is achieved; a reset starts the count again."""
    env = robotics.make_adroit("pen")
    for before in (20, 21):
        env.reset(seed=0)
        env.achieved = before  # as if the goal had been achieved on `before` steps
        count = before
        for _ in range(3):
            *_, info = env.step(np.zeros(24, np.float32))
            count += bool(info[robotics.GOAL_ACHIEVED])
            assert info[keys.SUCCESS] == (count > 20)
        assert env.achieved == count
    env.reset(seed=0)
    assert env.achieved == 0


def test_the_kitchen_succeeds_when_every_task_is_done_and_says_which_remain():
    env = robotics.make_kitchen("mixed")
    env.reset(seed=0)
    *_, info = env.step(np.zeros(9))
    assert info[keys.SUCCESS] is False
    assert sorted(info["tasks_to_complete"]) == sorted(robotics.KITCHEN_SETS["mixed"])


def test_an_unknown_task_lists_the_evals_tasks():
    with pytest.raises(ValueError, match=r"no kitchen task 'oven'; known: microwave, kettle, "):
        robotics.make_kitchen("oven")
    with pytest.raises(ValueError, match=r"no Adroit task 'cup'; known: door, hammer, pen, "):
        robotics.make_adroit("cup")
