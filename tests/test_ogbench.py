"""OGBench as its own evaluation loop runs it (`impls/utils/evaluation.py`): `gym.make(env)`,
`reset(options=dict(task_id=k))` (here with `seed=s`), the goal from the reset's info, each action
clipped to [-1, 1], stepped. The Evals' envs give the same first observation and the same
trajectory, rewards, ends and successes, bit for bit. The goal: OGBench's env settles the goal
scene with a few actions (two; five for the puzzle) from an unseeded space, so its goal's arm
part differs from reset to reset; the Evals draw them from a space seeded with the rollout's
seed, and given the same actions the goal is OGBench's, bit for bit. A random policy served by
the run's own server plays one task of every Eval at -n 2."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ogbench")

import gymnasium as gym

from policybench import keys
from policybench.suites.ogbench import FAMILIES, GOAL, PROPRIO, OGBench
from tests.served_random import served_random_run

# Beyond [-1, 1] at times: the loop's clipping is part of what is staged.
ACTIONS = np.random.default_rng(3).uniform(-1.3, 1.3, (25, 5)).astype(np.float32)
SEED, TASK = 4, 2  # the third evaluation task


def plain_loop(env_id: str, seed: int, task_id: int, settling: np.ndarray | None = None):
    """OGBench's loop, with the seed; `settling`: the actions its reset settles the goal with
    (else its own unseeded draw)."""
    import ogbench  # noqa: F401 (registers the envs)

    env = gym.make(env_id)
    if settling is not None:
        draws = iter(settling)
        space = type("Drawn", (), {"sample": lambda self: next(draws)})()
        base = type(env.unwrapped)
        env.unwrapped.__class__ = type(base.__name__, (base,), {"action_space": space})
    obs, info = env.reset(seed=seed, options=dict(task_id=task_id))
    played = [env.step(np.clip(action, -1, 1)) for action in ACTIONS]
    env.close()
    return obs, info["goal"], played


def settling_actions(seed: int, count: int = 8) -> np.ndarray:
    """The actions the Evals' reset draws for `seed` (a seeded gymnasium Box), in order: more
    than a reset takes (two; five for the puzzle)."""
    bound = np.ones(5, np.float32)
    space = gym.spaces.Box(-bound, bound, dtype=np.float32, seed=seed)
    return np.stack([space.sample() for _ in range(count)])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_eval_stages_ogbenchs_own_loop_bit_for_bit(family):
    spec = FAMILIES[family]
    theirs, their_goal, their_steps = plain_loop(spec.env_id, SEED, TASK + 1)
    env = OGBench(family, spec.tasks[TASK])
    try:
        obs, _ = env.reset(seed=SEED)
        np.testing.assert_array_equal(obs[keys.STATE], theirs)
        for action, (their_obs, their_reward, their_end, their_cut, their_info) in zip(
            ACTIONS, their_steps, strict=True
        ):
            mine, reward, end, cut, info = env.step(action)
            np.testing.assert_array_equal(mine[keys.STATE], their_obs)
            np.testing.assert_array_equal(mine[GOAL], obs[GOAL])  # the goal stays
            assert (reward, end, cut, info["success"]) == (
                their_reward,
                their_end,
                their_cut,
                their_info["success"],
            )
        # The goal's objects are OGBench's (to the solver's rounding, which its own resets show).
        np.testing.assert_allclose(obs[GOAL][PROPRIO:], their_goal[PROPRIO:], rtol=0, atol=1e-12)
        _, drawn_goal, _ = plain_loop(spec.env_id, SEED, TASK + 1, settling_actions(SEED))
        np.testing.assert_array_equal(obs[GOAL], drawn_goal)
        again, _ = env.reset(seed=SEED)  # a seed stages one scene and one goal
        np.testing.assert_array_equal(again[GOAL], obs[GOAL])
        np.testing.assert_array_equal(again[keys.STATE], obs[keys.STATE])
    finally:
        env.close()


def test_an_unknown_task_is_refused_naming_the_five():
    with pytest.raises(ValueError, match="task1_horizontal"):
        OGBench("cube-single", "task9")


BENCHMARK = """
import policybench
from policybench.suites.ogbench import (
    OGBENCH_CUBE_DOUBLE, OGBENCH_CUBE_SINGLE, OGBENCH_PUZZLE_3X3, OGBENCH_SCENE,
)


@policybench.parametrize(
    OGBENCH_CUBE_SINGLE, OGBENCH_CUBE_DOUBLE, OGBENCH_SCENE, OGBENCH_PUZZLE_3X3
)
def test_ogbench(rollout, harness):
    harness(rollout)
"""


def test_a_served_random_policy_plays_one_task_of_every_eval_at_two_workers(
    pytester: pytest.Pytester,
):
    found, said = served_random_run(pytester, "test_ogbench", BENCHMARK, "-k", "task2")
    evals = sorted(r["eval"] for r in found)
    assert evals == sorted(f"ogbench-{family}" for family in FAMILIES), said
