"""Every suite in LeRobot's conventions: each Eval's `lerobot` codec hands a policy the features
LeRobot's own env config declares for that suite (names, CxHxW shapes, state width), LIBERO's
observation as LeRobot's env and LiberoProcessorStep make it, and MetaWorld's LeRobot protocol
stages the same scenes and images as LeRobot's MetaworldEnv. Runs in the `lerobot` tox env."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")

from policybench import keys
from policybench.policy.lerobot import TASK, FeatureMismatch, LeRobotModel, as_lerobot_inputs
from policybench.policy.lerobot_checkpoints import save_random_checkpoint
from policybench.suites.aloha import ALOHA
from policybench.suites.libero import LIBERO_SPATIAL, LIBERO_SPATIAL_LEROBOT
from policybench.suites.metaworld import (
    DRAW,
    MT10_LEROBOT,
    MT10_LEROBOT_04,
    MT10_STATE,
    LeRobot04MetaWorld,
)
from policybench.suites.pusht import PUSHT

RNG = np.random.default_rng(0)


def image(height: int, width: int) -> np.ndarray:
    return RNG.integers(0, 256, (height, width, 3), dtype=np.uint8)


def lerobot_features(config) -> dict[str, tuple[int, ...]]:
    """What a checkpoint trained on LeRobot's env `config` takes (lerobot.envs.utils)."""
    from lerobot.envs.utils import env_to_policy_features

    return {
        name: tuple(feature.shape)
        for name, feature in env_to_policy_features(config).items()
        if feature.type.name != "ACTION"
    }


def provided(eval, obs) -> dict[str, tuple[int, ...]]:
    encoded = eval.codecs["lerobot"].encode(obs, "do it")
    assert encoded[TASK] == "do it"
    return {name: array.shape for name, array in as_lerobot_inputs(encoded).items()}


def test_pusht_aloha_and_metaworld_codecs_provide_lerobots_env_features():
    from lerobot.envs.configs import AlohaEnv, MetaworldEnv, PushtEnv

    pusht = {keys.IMAGE: image(96, 96), keys.STATE: np.zeros(2)}
    # LeRobot's PushT config declares 384x384 pixels, but its env renders gym-pusht's 96x96 (the
    # config does not pass its size on), which is what LeRobot's PushT checkpoints take.
    pusht_config = PushtEnv(observation_height=96, observation_width=96)
    assert provided(PUSHT, pusht) == lerobot_features(pusht_config)
    aloha = {keys.IMAGE: image(480, 640), keys.STATE: np.zeros(14)}
    assert provided(ALOHA, aloha) == lerobot_features(AlohaEnv(task="AlohaTransferCube-v0"))
    metaworld = {keys.IMAGE: image(480, 480), keys.STATE: np.arange(39.0)}
    assert provided(MT10_LEROBOT, metaworld) == lerobot_features(MetaworldEnv())
    assert ALOHA.codecs["lerobot"].action_width == 14
    assert MT10_LEROBOT.codecs["lerobot"].action_width == 4


def test_a_state_only_metaworld_eval_names_the_image_a_checkpoint_wants(tmp_path):
    from policybench.policy.lerobot_checkpoints import save_random_checkpoint

    stats = {
        "observation.image": {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3},
        "observation.state": {"mean": [0.0] * 4, "std": [1.0] * 4},
        "action": {"mean": [0.0] * 4, "std": [1.0] * 4},
    }
    checkpoint = save_random_checkpoint(tmp_path, {"observation.image": (3, 64, 64)}, 4, 4, stats)
    model = LeRobotModel(checkpoint)
    encoded = MT10_STATE.codecs["lerobot"].encode({keys.STATE: np.arange(39.0)}, "reach")
    with pytest.raises(FeatureMismatch) as raised:
        model.predict_batch([(None, encoded)])
    assert "expects input features {observation.image: (3, 64, 64)" in str(raised.value)
    assert "provides {observation.state: (4,)}" in str(raised.value)


def test_libero_codec_sees_what_lerobots_env_and_processor_hand_a_policy():
    """A robosuite observation as LeRobot's LiberoEnv formats it, through preprocess_observation
    and LiberoProcessorStep; and as policybench's LIBERO env observes it, through the codec."""
    import torch
    from lerobot.envs.utils import preprocess_observation
    from lerobot.processor.env_processor import LiberoProcessorStep

    from policybench.suites.libero.env import LiberoEnv

    quat = RNG.normal(size=4)
    raw = {
        "agentview_image": image(256, 256),
        "robot0_eye_in_hand_image": image(256, 256),
        "robot0_eef_pos": RNG.normal(size=3),
        "robot0_eef_quat": quat / np.linalg.norm(quat),
        "robot0_gripper_qpos": RNG.normal(size=2) * 0.04,
    }
    formatted = {
        "pixels": {"image": raw["agentview_image"], "image2": raw["robot0_eye_in_hand_image"]},
        "robot_state": {
            "eef": {"pos": raw["robot0_eef_pos"], "quat": raw["robot0_eef_quat"]},
            "gripper": {"qpos": raw["robot0_gripper_qpos"]},
        },
    }
    batched = {
        "pixels": {k: v[None] for k, v in formatted["pixels"].items()},
        "robot_state": {
            group: {k: v[None] for k, v in values.items()}
            for group, values in formatted["robot_state"].items()
        },
    }
    theirs = LiberoProcessorStep()._process_observation(preprocess_observation(batched))
    for eval in (LIBERO_SPATIAL, LIBERO_SPATIAL_LEROBOT):
        encoded = eval.codecs["lerobot"].encode(LiberoEnv._observe(raw), "put the bowl")
        ours = {k: torch.from_numpy(v)[None] for k, v in as_lerobot_inputs(encoded).items()}
        assert set(ours) == {"observation.images.image", "observation.images.image2"} | {
            "observation.state"
        }
        for name in ("observation.images.image", "observation.images.image2"):
            assert torch.equal(ours[name], theirs[name]), name
        # LeRobot turns the quaternion into an axis-angle in float32, policybench in float64.
        torch.testing.assert_close(
            ours["observation.state"], theirs["observation.state"], rtol=1e-6, atol=1e-6
        )


def test_metaworlds_lerobot_protocol_stages_lerobots_scenes_and_images():
    """lerobot-eval seeds numpy's global generator once (--seed) and its env draws each
    episode's placement from it: draws 0 and 1 of the LeRobot protocol are those episodes, with
    the same flipped corner2 image and the same rewards."""
    pytest.importorskip("metaworld", reason="needs the metaworld extra")
    from lerobot.envs.metaworld import MetaworldEnv

    np.random.seed(5)  # what lerobot-eval's set_seed does before it builds its envs
    theirs = MetaworldEnv(task="reach-v3", obs_type="pixels_agent_pos")
    ours = LeRobot04MetaWorld("reach-v3")
    action = np.array([0.3, -0.2, 0.1, 1.0], dtype=np.float32)
    try:
        for draw in (0, 1):
            their_obs, _ = theirs.reset(seed=123)  # LeRobot's env ignores the seed
            our_obs, _ = ours.reset(seed=5 + draw, options={DRAW: draw})
            np.testing.assert_array_equal(our_obs[keys.IMAGE], their_obs["pixels"])
            np.testing.assert_array_equal(our_obs[keys.STATE][:4], their_obs["agent_pos"])
            for _ in range(3):
                their_obs, their_reward, *_ = theirs.step(action)
                our_obs, our_reward, *_ = ours.step(action)
                assert our_reward == their_reward
            np.testing.assert_array_equal(our_obs[keys.IMAGE], their_obs["pixels"])
        # The same scene again, after others: the stream is replayed, not continued.
        first = ours.reset(seed=5, options={DRAW: 0})[0]
        again = LeRobot04MetaWorld("reach-v3").reset(seed=5, options={DRAW: 0})[0]
        np.testing.assert_array_equal(first[keys.STATE], again[keys.STATE])
    finally:
        theirs.close()
        ours.close()


def test_metaworlds_lerobot_plan_draws_in_lerobot_evals_order():
    rollouts = MT10_LEROBOT_04.rollouts(3, 100)
    assert [r.scene.fields[DRAW] for r in rollouts[:4]] == [0, 1, 2, 3]
    assert [r.scene.seed - r.scene.fields[DRAW] for r in rollouts] == [100] * len(rollouts)
    assert rollouts[3].scene.task == "push-v3"
    assert MT10_LEROBOT_04.metadata["max_steps"] == 500


def test_a_checkpoints_contract_is_what_its_config_train_config_and_contract_json_say(tmp_path):
    """A PushT checkpoint made for 64x64 images, trained with an env at 20 Hz (train_config.json),
    declaring joint targets (contract.json): the preflight refuses it before any rollout, naming
    the three points; its config alone (no train_config.json, no contract.json) declares its
    cameras, and flips are not judged where it does not say them."""
    import json

    from policybench.policy.chunk_player import ChunkPolicy
    from policybench.policy.contract import Contract, Image, mismatches
    from policybench.policy.lerobot import checkpoint_contract
    from policybench.preflight import Verdict, preflight
    from policybench.world import World

    stats = {
        "observation.image": {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3},
        "observation.state": {"mean": [0.0] * 2, "std": [1.0] * 2},
        "action": {"mean": [0.0] * 2, "std": [1.0] * 2},
    }
    checkpoint = save_random_checkpoint(tmp_path, {"observation.image": (3, 64, 64)}, 2, 2, stats)
    model = LeRobotModel(checkpoint)
    assert model.contract == Contract(images={"observation.image": Image(64, 64, flip=None)})
    assert not mismatches(
        model.contract, Contract(images={"observation.image": Image(64, 64, "both")})
    )
    assert mismatches(model.contract, Contract(images={"observation.image": Image(96, 96)}))
    (checkpoint / "train_config.json").write_text(json.dumps({"env": {"type": "pusht", "fps": 20}}))
    (checkpoint / "contract.json").write_text(json.dumps({"action": "joint-absolute"}))
    model = LeRobotModel(checkpoint)
    world = World(PUSHT)
    try:
        refused = preflight(
            world, PUSHT.rollouts(1, 0)[0], ChunkPolicy(model, PUSHT.codecs["lerobot"])
        )
    finally:
        world.close()
    assert refused.verdict is Verdict.FAILED
    assert (
        "disagree on 3 points: action: the model answers joint-absolute actions" in refused.problem
    )
    assert "control rate: the model acts at 20 Hz, the Eval steps at 10 Hz" in refused.problem
    assert (
        "image observation.image: the model takes 64x64, the codec sends 96x96" in refused.problem
    )
    (checkpoint / "contract.json").write_text(json.dumps({"rotation": "quat"}))
    with pytest.raises(ValueError, match=r"contract\.json: contract rotation: 'quat' is not"):
        checkpoint_contract(model._policy.config, checkpoint)
