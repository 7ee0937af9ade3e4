"""policybench's PushT env renders the frames gym-pusht renders, byte for byte, by a faster path."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gym_pusht")

from gym_pusht.envs.pusht import PushTEnv

from policybench.suites.pusht import make_env, pusht_env_class


def test_frames_equal_gym_pushts_at_every_size():
    env = pusht_env_class()(obs_type="pixels_agent_pos")
    rng = np.random.default_rng(0)
    checked = 0
    for seed in range(6):
        env.reset(seed=seed)
        for _ in range(15):
            env.step(rng.uniform(0, 512, size=2))
        screen = env._draw()
        for width, height in [(96, 96), (384, 384), (680, 680), (640, 480), (37, 53)]:
            fast = env._get_img(screen, width, height)
            slow = PushTEnv._get_img(env, screen, width, height)
            assert fast.shape == slow.shape == (height, width, 3)
            assert fast.dtype == slow.dtype == np.uint8
            np.testing.assert_array_equal(fast, slow)
            checked += 1
    assert checked == 30
    env.close()


def test_the_suites_env_is_gym_pushts_registration_with_fast_frames():
    env = make_env("push-t")
    assert isinstance(env.unwrapped, pusht_env_class())
    assert env.spec.max_episode_steps == 300  # gym-pusht's registered limit
    obs, _ = env.reset(seed=3)
    reference = PushTEnv(obs_type="pixels_agent_pos")
    expected, _ = reference.reset(seed=3)
    for _ in range(5):
        action = np.array([300.0, 200.0])
        obs, *_ = env.step(action)
        expected, *_ = reference.step(action)
        np.testing.assert_array_equal(obs["image"], expected["pixels"])
        np.testing.assert_array_equal(obs["state"], expected["agent_pos"])
    env.close()
    reference.close()


def test_video_frames_with_the_action_marker_take_gym_pushts_path():
    env = pusht_env_class()(obs_type="pixels_agent_pos", render_mode="rgb_array")
    env.reset(seed=1)
    env.step(np.array([100.0, 400.0]))
    screen = env._draw()
    frame = env._get_img(screen, 96, 96, render_action=True)
    np.testing.assert_array_equal(frame, PushTEnv._get_img(env, screen, 96, 96, True))
    # The marker is drawn: the frame differs from the one without it.
    assert not np.array_equal(frame, env._get_img(screen, 96, 96))
    env.close()
