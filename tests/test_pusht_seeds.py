"""PushT's two seed rules, each equal to its reference: `pusht` stages what the installed
gym-pusht's own `reset(seed=s)` stages (a plain gym.make loop, bit for bit); `pusht-dp` stages
the scenes of Diffusion Policy's PushTEnv (and gym-pusht 0.1.5), whose reset draws the first
state from `np.random.RandomState(seed)`, written here as Diffusion Policy writes it, from its
runner's test seeds (100000 on). The two rules make other scenes of one seed."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from policybench import keys
from policybench.spec import Scene
from policybench.world import World

pytest.importorskip("gym_pusht", reason="needs gym-pusht: pip install 'policybench[pusht]'")

from policybench.suites.pusht import PUSHT, PUSHT_DP


def diffusion_policys_reset_state(seed: int) -> list[float]:
    """diffusion_policy/env/pusht/pusht_env.py's PushTEnv.reset: agent x, y, block x, y, angle."""
    rs = np.random.RandomState(seed=seed)
    return [
        rs.randint(50, 450),
        rs.randint(50, 450),
        rs.randint(100, 400),
        rs.randint(100, 400),
        rs.randn() * 2 * np.pi - np.pi,
    ]


def staged(eval, seed: int) -> tuple[dict, list[float]]:
    """The first observation of `eval`'s scene of `seed`, and the env's agent and block pose."""
    world = World(eval)
    try:
        obs = world.reset(Scene("push-t", seed))
        env = world.env_for("push-t").unwrapped
        state = [*env.agent.position, *env.block.position, env.block.angle]
        return obs, state
    finally:
        world.close()


@pytest.mark.parametrize("seed", [0, 100000, 100001])
def test_pusht_stages_what_the_installed_gym_pusht_stages(seed):
    import gym_pusht  # noqa: F401

    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")
    expected, _ = env.reset(seed=seed)
    env.close()
    obs, _ = staged(PUSHT, seed)
    assert np.array_equal(obs[keys.IMAGE], expected["pixels"])
    assert np.array_equal(obs[keys.STATE], expected["agent_pos"])


@pytest.mark.parametrize("seed", [0, 100000, 100001])
def test_pusht_dp_stages_diffusion_policys_scene_of_each_seed(seed):
    """The reference loop, written as gym-pusht 0.1.5's reset runs: seed the env, draw the
    state from RandomState(seed) as Diffusion Policy does, stage it (gym-pusht's `_set_state`,
    the same code in 0.1.5 and today, reached through `reset_to_state`), observe."""
    import gym_pusht  # noqa: F401

    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")
    drawn = diffusion_policys_reset_state(seed)
    expected, _ = env.reset(seed=seed, options={"reset_to_state": np.array(drawn)})
    env.close()
    obs, state = staged(PUSHT_DP, seed)
    assert np.array_equal(obs[keys.IMAGE], expected["pixels"])
    assert np.array_equal(obs[keys.STATE], expected["agent_pos"])
    assert state[:2] == pytest.approx(drawn[:2]) and state[4] == pytest.approx(drawn[4])
    today, _ = staged(PUSHT, seed)
    assert not np.array_equal(obs[keys.STATE], today[keys.STATE])  # another scene, same seed


def test_pusht_dp_runs_diffusion_policys_test_seeds_and_each_eval_names_its_rule():
    assert [r.scene.seed for r in PUSHT_DP.rollouts(3, 0)] == [100000, 100001, 100002]
    assert [r.scene.seed for r in PUSHT.rollouts(2, 0)] == [0, 1]
    assert "RandomState(seed)" in PUSHT_DP.metadata["seed_rule"]
    assert "np_random since 0.1.6" in PUSHT.metadata["seed_rule"]
