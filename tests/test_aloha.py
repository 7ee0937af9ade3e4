"""The ALOHA suite on the real gym-aloha env: one camera rendered per step at the Eval's size,
shadows off only when asked (and recorded), seeds stage placements, and a random rollout ends
unsolved at the step limit with the protocol recorded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.registry import PolicySettings, build_policy
from policybench.record.episode import OutcomeKind
from policybench.spec import Scene
from policybench.suites.aloha import ALOHA, AlohaSim, Rendering, aloha
from policybench.world import World

SMALL = Rendering(size=(120, 160), shadows=False)  # cheap to render; the tests need no detail


def test_the_default_eval_is_lerobots_protocol_and_records_it():
    assert ALOHA.name == "aloha"
    assert ALOHA.control_hz == 50.0
    assert {r.scene.task for r in ALOHA.rollouts(1, 0)} == {"transfer_cube", "insertion"}
    assert ALOHA.rollouts(1, 0)[0].timeout_s == 400 / 50.0
    assert ALOHA.metadata["camera"] == "top"
    assert ALOHA.metadata["image_size"] == [480, 640]
    assert ALOHA.metadata["shadows"] is True


def test_shadows_off_is_a_differently_named_eval_that_records_it():
    fast = aloha(Rendering(shadows=False))
    assert fast.name == "aloha-noshadows"
    assert fast.metadata["shadows"] is False


@pytest.fixture(scope="module")
def env():
    pytest.importorskip(
        "gym_aloha", reason="gym-aloha not installed: pip install 'policybench[aloha]'"
    )
    env = AlohaSim("insertion", SMALL)
    yield env
    env.close()


def test_only_the_eval_camera_is_rendered_each_step_at_its_size(env):
    physics, calls = env._physics, []
    render = physics.render

    def counting(*args, **kwargs):
        calls.append(kwargs["camera_id"])
        return render(*args, **kwargs)

    physics.render = counting
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(3):
            obs, *_ = env.step(np.zeros(14, np.float32))
    finally:
        del physics.render
    assert calls == ["top"] * 4  # gym-aloha alone renders three cameras each time
    assert obs[keys.IMAGE].shape == (120, 160, 3) and obs[keys.IMAGE].dtype == np.uint8
    assert obs[keys.STATE].shape == (14,)


def test_shadows_off_turns_off_every_lights_shadow_and_default_keeps_them():
    pytest.importorskip(
        "gym_aloha", reason="gym-aloha not installed: pip install 'policybench[aloha]'"
    )
    shaded = AlohaSim("transfer_cube", dataclasses.replace(SMALL, shadows=True))
    plain = AlohaSim("transfer_cube", SMALL)
    assert shaded._physics.model.light_castshadow.any()
    assert not plain._physics.model.light_castshadow.any()


def test_a_seed_stages_the_same_placement_and_another_seed_differs(env):
    def placement(seed: int) -> np.ndarray:
        env.reset(seed=seed)
        return env._physics.data.qpos.copy()

    first, other, again = placement(3), placement(4), placement(3)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_a_random_rollout_ends_unsolved_at_the_step_limit_with_its_protocol_recorded():
    pytest.importorskip(
        "gym_aloha", reason="gym-aloha not installed: pip install 'policybench[aloha]'"
    )
    eval = aloha(SMALL, max_steps=20)
    world = World(eval)
    rollout = eval.rollouts(1, 0)[0]
    policy = build_policy(
        "random", eval, world.env_for(rollout.scene.task).action_space, PolicySettings()
    )
    episode = run_rollout(rollout, eval, world, policy)
    world.close()
    assert episode.outcome.kind is OutcomeKind.UNSOLVED
    assert episode.steps == 20
    settings = episode.statics[keys.EVAL_SETTINGS]
    assert settings["max_steps"] == 20 and settings["shadows"] is False
    assert episode.statics[keys.SCENE] == Scene("transfer_cube", 0).as_record()
