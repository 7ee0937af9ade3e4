"""Codecs: each suite's openpi codec sends exactly its declared keys, a server can invert it
exactly where the steps allow, answers are sliced to the embodiment's action width with clear
errors, and the record names every step."""

from __future__ import annotations

import numpy as np
import pytest

from policybench import keys
from policybench.policy.codec import (
    IDENTITY,
    NATIVE,
    Codec,
    CodecError,
    channels_first,
    concat,
    keep,
    nest,
    prompt,
    rename,
    rotate_180,
    take_first,
)
from policybench.suites.metaworld import MT10_STATE, mt10
from policybench.suites.pusht import PUSHT

RNG = np.random.default_rng(0)


def test_metaworld_sends_the_state_and_prompt_under_openpi_keys_and_keeps_four_actions():
    codec = MT10_STATE.codecs["openpi"]
    state = RNG.normal(size=39)
    wire = codec.encode({keys.STATE: state}, "open the door")
    assert set(wire) == {"observation/state", "prompt"} and wire["prompt"] == "open the door"
    obs, instruction = codec.decode(wire)
    assert instruction == "open the door" and obs[keys.STATE].tobytes() == state.tobytes()
    actions = codec.actions(np.arange(70.0).reshape(10, 7))
    np.testing.assert_array_equal(actions, np.arange(70.0).reshape(10, 7)[:, :4])


def test_metaworld_with_a_camera_sends_the_image_at_its_declared_size():
    codec = mt10(camera="corner", size=64).codecs["openpi"]
    image = RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    wire = codec.encode({keys.STATE: np.zeros(39), keys.IMAGE: image}, "reach")
    assert wire["observation/image"] is image
    with pytest.raises(CodecError, match=r"expected 'image' at 64x64, got an image of shape"):
        codec.encode({keys.STATE: np.zeros(39), keys.IMAGE: image[:32]}, "reach")


def test_pusht_sends_its_image_and_agent_position_and_keeps_two_actions():
    codec = PUSHT.codecs["openpi"]
    obs = {
        keys.IMAGE: RNG.integers(0, 256, (96, 96, 3), dtype=np.uint8),
        keys.STATE: RNG.normal(size=2),
    }
    wire = codec.encode(obs, "push the T")
    assert set(wire) == {"observation/image", "observation/state", "prompt"}
    back, _ = codec.decode(wire)
    assert set(back) == set(obs)
    assert all(back[name].tobytes() == obs[name].tobytes() for name in obs)
    assert codec.actions(np.ones((5, 7))).shape == (5, 2)


def test_pushts_lerobot_codec_sends_the_instruction_as_task():
    wire = PUSHT.codecs["lerobot"].encode(
        {keys.IMAGE: np.zeros((96, 96, 3), np.uint8), keys.STATE: np.zeros(2)}, "push the T"
    )
    assert set(wire) == {"observation.image", "observation.state", "task"}
    assert wire["task"] == "push the T"


def test_a_rotated_image_is_rotated_back_exactly_by_decode():
    codec = Codec("rotating", (rotate_180(keys.IMAGE), rename({keys.IMAGE: "img"})))
    image = RNG.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    wire = codec.encode({keys.IMAGE: image}, "x")
    np.testing.assert_array_equal(wire["img"], image[::-1, ::-1])
    np.testing.assert_array_equal(codec.decode(wire)[0][keys.IMAGE], image)


def test_nested_channels_first_images_decode_to_the_env_image():
    codec = Codec("nested", (channels_first(keys.IMAGE), nest("images", {keys.IMAGE: "cam"})))
    image = RNG.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    wire = codec.encode({keys.IMAGE: image, keys.STATE: np.zeros(2)}, "x")
    assert set(wire) == {"images", keys.STATE} and wire["images"]["cam"].shape == (3, 4, 5)
    back, _ = codec.decode(wire)
    np.testing.assert_array_equal(back[keys.IMAGE], image)
    with pytest.raises(CodecError, match=r"expects a map 'images' with \['cam'\]"):
        codec.decode({keys.STATE: np.zeros(2)})


def test_a_missing_state_key_and_a_too_narrow_answer_are_clear_errors():
    codec = MT10_STATE.codecs["openpi"]
    with pytest.raises(CodecError, match=r"lacks \['state'\]; it has \['image', 'instruction'\]"):
        codec.encode({keys.IMAGE: np.zeros(1)}, "x")
    with pytest.raises(
        CodecError, match="takes the first 4 action dimensions, but the model answered 2"
    ):
        codec.actions(np.zeros((3, 2)))


def test_joined_states_cannot_be_split_back_and_say_so():
    codec = Codec("joined", (concat("a", "b", into="s"),))
    wire = codec.encode({"a": np.zeros(2), "b": np.ones(3)}, "x")
    np.testing.assert_array_equal(wire["s"], [0, 0, 1, 1, 1])
    with pytest.raises(CodecError, match="cannot be split"):
        codec.decode(wire)


def test_the_native_convention_sends_every_key_and_the_prompt_and_decode_drops_the_prompt():
    obs = {keys.STATE: np.zeros(3), "extra.thing": np.ones(2)}
    wire = NATIVE.encode(obs, "go")
    assert set(wire) == {*obs, "prompt"}
    back, instruction = NATIVE.decode(wire)
    assert set(back) == set(obs) and instruction == "go"


def test_without_a_prompt_step_the_instruction_stays_home_and_keep_drops_the_rest():
    assert set(IDENTITY.encode({keys.STATE: np.zeros(1)}, "secret")) == {keys.STATE}
    kept = Codec("k", (keep(keys.STATE), prompt("task"))).encode(
        {keys.STATE: np.zeros(1), keys.IMAGE: np.zeros(1)}, "go"
    )
    assert set(kept) == {keys.STATE, "task"}


def test_take_first_plays_the_chunks_head_and_every_step_is_named_in_the_record():
    codec = PUSHT.codecs["openpi"]
    assert codec.describe() == {
        keys.CODEC: "openpi",
        keys.CODEC_STEPS: [
            "expect_size(image: 96x96)",
            "rename(image->observation/image)",
            "concat(state -> observation/state)",
            "keep(observation/image, observation/state)",
            "prompt(prompt)",
            "action_dims(2)",
        ],
    }
    assert Codec("h", (take_first(3),)).actions(np.ones((10, 2))).shape == (3, 2)
    with pytest.raises(ValueError, match="count >= 1"):
        take_first(0)


def test_an_observation_key_named_like_the_instruction_is_refused():
    with pytest.raises(CodecError, match="has a key 'instruction'"):
        NATIVE.encode({keys.INSTRUCTION: np.zeros(1)}, "x")
