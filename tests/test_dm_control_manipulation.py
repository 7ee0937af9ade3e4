"""dm_control's manipulation tasks as dm_control's own loop runs them: `manipulation.load(name,
seed=s)`, `reset()`, `step(action)` until the last time step. The Eval's env gives the same
observations and rewards, bit for bit, for every task, after another scene ran in it first; a step
rewarded 1 is a success, and the time limit ends a rollout as truncated; a random policy served by
the run's own server plays one task at -n 2."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dm_control")

from policybench.suites.dm_control_manipulation import (
    TASKS,
    DMControlManipulation,
    environment_name,
)
from tests.served_random import served_random_run

STEPS = 20


def plain_loop(task: str, seed: int, actions: np.ndarray):
    """dm_control's loop: a fresh environment loaded with the seed, reset, stepped."""
    from dm_control import manipulation

    env = manipulation.load(environment_name(task), seed=seed)
    first = env.reset()
    played = [env.step(action) for action in actions]
    env.close()
    return first, played


def flat(observation) -> dict[str, np.ndarray]:
    return {name: np.ravel(value) for name, value in observation.items()}


@pytest.mark.parametrize("task", list(TASKS))
def test_the_eval_stages_dm_controls_own_loop_bit_for_bit(task):
    env = DMControlManipulation(task)
    try:
        low, high = env.action_space.low, env.action_space.high
        actions = np.random.default_rng(5).uniform(low, high, (STEPS, *low.shape))
        env.reset(seed=9)  # another scene first: the next must not remember it
        env.step(actions[0])
        first, played = plain_loop(task, 3, actions)
        obs, _ = env.reset(seed=3)
        assert obs.keys() == first.observation.keys()
        for name, value in flat(first.observation).items():
            np.testing.assert_array_equal(obs[name], value, err_msg=name)
        for action, theirs in zip(actions, played, strict=True):
            mine, reward, terminated, truncated, info = env.step(action)
            for name, value in flat(theirs.observation).items():
                np.testing.assert_array_equal(mine[name], value, err_msg=name)
            assert reward == theirs.reward and not terminated and not truncated
            assert info["success"] == (theirs.reward >= 1.0)
    finally:
        env.close()


def test_the_time_limit_ends_a_rollout_as_truncated_after_250_steps():
    env = DMControlManipulation("reach_site")
    try:
        env.reset(seed=0)
        ends = [env.step(np.zeros(9))[2:4] for _ in range(250)]
    finally:
        env.close()
    assert ends[-1] == (False, True) and not any(any(end) for end in ends[:-1])


def test_an_unknown_task_is_refused_naming_the_known():
    with pytest.raises(ValueError, match="lift_brick"):
        DMControlManipulation("juggle")


BENCHMARK = """
import policybench
from policybench.suites.dm_control_manipulation import DM_CONTROL_MANIPULATION


@policybench.parametrize(DM_CONTROL_MANIPULATION)
def test_dm_control_manipulation(rollout, harness):
    harness(rollout)
"""


def test_a_served_random_policy_plays_a_task_at_two_workers(pytester: pytest.Pytester):
    found, said = served_random_run(
        pytester, "test_dm_control_manipulation", BENCHMARK,
        "--rollouts", "2", "-k", "lift_brick or reach_site",
    )  # fmt: skip
    assert sorted(r["task"] for r in found) == ["lift_brick"] * 2 + ["reach_site"] * 2, said
