"""The ALOHA suite on the real gym-aloha env: one camera rendered per step at the Eval's size,
shadows off only when asked (and recorded), seeds stage placements, and a random rollout ends
unsolved at the step limit with the protocol recorded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import Chunk
from policybench.record.episode import OutcomeKind
from policybench.registry import PolicySettings, build_policy
from policybench.serve.client import Endpoint
from policybench.serve.server import PolicyServer, ServerConfig, ServerThread, fixed_model
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
        "random", eval, PolicySettings(), lambda: world.env_for(rollout.scene.task).action_space
    )
    episode = run_rollout(rollout, world, policy)
    world.close()
    assert episode.outcome.kind is OutcomeKind.UNSOLVED
    assert episode.steps == 20
    settings = episode.statics[keys.EVAL_SETTINGS]
    assert settings["max_steps"] == 20 and settings["shadows"] is False
    assert episode.statics[keys.SCENE] == Scene("transfer_cube", 0).as_record()


def test_openpi_codec_sends_openpis_aloha_sim_convention_and_reads_it_back():
    codec = ALOHA.codecs["openpi"]
    image = np.zeros((480, 640, 3), np.uint8)
    image[:10] = 255  # a white band at the top
    state = np.linspace(-1.0, 1.0, 14)
    wire = codec.encode({keys.IMAGE: image, keys.STATE: state}, "Transfer cube")
    assert set(wire) == {"state", "images", "prompt"}
    assert set(wire["images"]) == {"cam_high"}
    cam = wire["images"]["cam_high"]
    assert cam.shape == (3, 224, 224) and cam.dtype == np.uint8  # channels first, 4:3 padded
    assert cam[:, :28].max() == 0 and cam[:, 28:31].min() == 255  # 28 black rows, then the band
    np.testing.assert_array_equal(wire["state"], state)
    assert codec.actions(np.ones((50, 16))).shape == (10, 14)
    obs, prompt = codec.decode(wire)
    assert obs[keys.IMAGE].shape == (224, 224, 3) and prompt == "Transfer cube"
    np.testing.assert_array_equal(obs[keys.STATE], state)


def test_openpi_policy_on_aloha_sends_the_aloha_sim_convention_over_a_loopback_server():
    pytest.importorskip(
        "gym_aloha", reason="gym-aloha not installed: pip install 'policybench[aloha]'"
    )
    seen = []

    class Checking:
        name = "checking"

        def open(self, context):
            def predict(obs):
                cam = obs["images"]["cam_high"]
                if set(obs) != {"state", "images"} or cam.shape != (3, 224, 224):
                    raise ValueError(f"unexpected observation {sorted(obs)}")
                seen.append((cam.dtype, obs["state"].shape, context.instruction))
                return Chunk(np.zeros((50, 14)), context.control_hz)

            return predict

        def describe(self):
            return {keys.POLICY_NAME: self.name}

    eval = aloha(SMALL, max_steps=12)
    rollout = eval.rollouts(1, 0)[0]
    world = World(eval)
    server = PolicyServer(fixed_model(Checking(), eval.control_hz), ServerConfig(port=0))
    with ServerThread(server) as served:
        settings = PolicySettings(endpoint=Endpoint(served.url, infer_timeout_s=60.0))
        space = world.env_for(rollout.scene.task).action_space
        episode = run_rollout(rollout, world, build_policy("openpi", eval, settings, lambda: space))
    world.close()
    assert episode.outcome.kind is OutcomeKind.UNSOLVED, episode.outcome
    assert seen == [(np.dtype(np.uint8), (14,), rollout.instruction)] * 2  # steps 0 and 10


def test_alohas_axes_move_its_image_and_not_its_joints():
    """ALOHA's dm_control model stages the MuJoCo axes as MetaWorld's and LIBERO's do: the image
    changes, seeded by the scene, the joints do not, and the next plain reset is the plain one;
    initial_state moves the box (its free joint) once gym-aloha has placed it."""
    pytest.importorskip(
        "gym_aloha", reason="gym-aloha not installed: pip install 'policybench[aloha]'"
    )
    from policybench.perturbation import Perturbation
    from policybench.world import World

    world = World(aloha(SMALL, max_steps=20))
    try:
        scene = world.eval.rollouts(1, 0)[0].scene
        plain = world.reset(scene)
        assert "texture" not in world.eval.perturbations  # its models have no texture
        for axis, level in (("camera_pose", 0.05), ("lighting", 0.5), ("colour", 0.3)):
            perturbed = world.reset(scene, Perturbation(axis, level))
            assert np.array_equal(plain[keys.STATE], perturbed[keys.STATE]), axis
            assert not np.array_equal(plain[keys.IMAGE], perturbed[keys.IMAGE]), axis
            again = world.reset(scene, Perturbation(axis, level))
            assert np.array_equal(perturbed[keys.IMAGE], again[keys.IMAGE]), axis
        restored = world.reset(scene)
        assert all(np.array_equal(plain[name], restored[name]) for name in plain)
        # the box moved in the table's plane by the level: the image shows it, the joints stay
        sim = world.env_for(scene.task)
        box = sim._physics.data.qpos[-7:-4].copy()
        moved = world.reset(scene, Perturbation("initial_state", 0.03))
        shifted = sim._physics.data.qpos[-7:-4]
        assert np.linalg.norm(shifted[:2] - box[:2]) == pytest.approx(0.03, abs=1e-6)
        assert shifted[2] == pytest.approx(box[2])
        assert np.array_equal(plain[keys.STATE], moved[keys.STATE])
        assert not np.array_equal(plain[keys.IMAGE], moved[keys.IMAGE])
    finally:
        world.close()
