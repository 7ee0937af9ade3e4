"""MuJoCo Playground's manipulation tasks as EnvPool's own loop runs them:
`envpool.make_gymnasium(task, num_envs=1, seed=s)`, `reset()`, `step(batch)`. The Evals' envs
give the same observations, rewards and ends, and read success from the same step info, bit for
bit, for every task, after another scene ran in them first; a random policy served by the run's
own server plays every task at -n 2."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("envpool")

from policybench import keys
from policybench.suites.playground import GROUPS, Playground
from tests.served_random import served_random_run

CASES = [(group, task) for group in GROUPS for task in group.tasks]
STEPS = 30


def plain_loop(task: str, seed: int, actions: np.ndarray):
    import envpool

    env = envpool.make_gymnasium(f"{task}-v1", num_envs=1, seed=seed)
    first, _ = env.reset()
    played = [env.step(action[None]) for action in actions]
    env.close()
    return first, played


def unbatched(obs) -> dict[str, np.ndarray]:
    return {k: v[0] for k, v in obs.items()} if isinstance(obs, dict) else {keys.STATE: obs[0]}


@pytest.mark.parametrize(("group", "task"), CASES, ids=[task for _, task in CASES])
def test_the_eval_stages_envpools_own_loop_bit_for_bit(group, task):
    actions = np.random.default_rng(2).uniform(-1, 1, (STEPS, group.actions))
    env = Playground(group, task)
    try:
        env.reset(seed=8)  # another scene first
        env.step(actions[0])
        first, played = plain_loop(task, 5, actions)
        obs, _ = env.reset(seed=5)
        for name, value in unbatched(first).items():
            np.testing.assert_array_equal(obs[name], value, err_msg=name)
        for action, (their_obs, reward, terminated, truncated, info) in zip(
            actions, played, strict=True
        ):
            mine, my_reward, my_end, my_cut, my_info = env.step(action)
            for name, value in unbatched(their_obs).items():
                np.testing.assert_array_equal(mine[name], value, err_msg=name)
            assert (my_reward, my_end, my_cut) == (reward[0], terminated[0], truncated[0])
            assert my_info[keys.SUCCESS] == (float(np.ravel(info[group.success])[0]) > 0)
    finally:
        env.close()


def test_an_unknown_task_is_refused_naming_the_known():
    with pytest.raises(ValueError, match="PandaPickCube"):
        Playground(GROUPS[0], "PandaJuggle")


BENCHMARK = """
import policybench
from policybench.suites.playground import (
    PLAYGROUND_LEAP_CUBE_REORIENT, PLAYGROUND_PANDA, PLAYGROUND_ROBOTIQ_PUSH_CUBE,
)


@policybench.parametrize(
    PLAYGROUND_PANDA, PLAYGROUND_ROBOTIQ_PUSH_CUBE, PLAYGROUND_LEAP_CUBE_REORIENT
)
def test_playground(rollout, harness):
    harness(rollout)
"""


def test_a_served_random_policy_plays_every_task_at_two_workers(pytester: pytest.Pytester):
    found, said = served_random_run(pytester, "test_playground", BENCHMARK)
    assert sorted(r["task"] for r in found) == sorted(task for _, task in CASES), said
