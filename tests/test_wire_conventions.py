"""Wire conventions: each suite's openpi codec sends exactly its declared keys, a server can
invert it exactly, and answers are sliced to the embodiment's action width with clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from policybench.policy.conventions import NATIVE, WireCodec

from policybench import keys
from policybench.serve.wire import WireError
from policybench.suites.metaworld import MT10_STATE, mt10
from policybench.suites.pusht import PUSHT

RNG = np.random.default_rng(0)


def test_metaworld_sends_the_state_and_prompt_under_openpi_keys_and_keeps_four_actions():
    codec = MT10_STATE.codecs["openpi"]
    state = RNG.normal(size=39)
    wire = codec.encode({keys.STATE: state}, "open the door")
    assert set(wire) == {"observation/state", "prompt"} and wire["prompt"] == "open the door"
    obs, prompt = codec.unwire(wire)
    assert prompt == "open the door" and obs[keys.STATE].tobytes() == state.tobytes()
    actions = codec.actions({"actions": np.arange(70.0).reshape(10, 7)})
    np.testing.assert_array_equal(actions, np.arange(70.0).reshape(10, 7)[:, :4])


def test_metaworld_with_a_camera_sends_the_image_at_its_declared_size():
    codec = mt10(camera="corner", size=64).codecs["openpi"]
    image = RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    wire = codec.encode({keys.STATE: np.zeros(39), keys.IMAGE: image}, "reach")
    assert wire["observation/image"] is image
    with pytest.raises(ValueError, match=r"sends 'image' at 64x64, got an image of shape"):
        codec.encode({keys.STATE: np.zeros(39), keys.IMAGE: image[:32]}, "reach")


def test_pusht_sends_its_image_and_agent_position_and_keeps_two_actions():
    codec = PUSHT.codecs["openpi"]
    obs = {
        keys.IMAGE: RNG.integers(0, 256, (96, 96, 3), dtype=np.uint8),
        keys.STATE: RNG.normal(size=2),
    }
    wire = codec.encode(obs, "push the T")
    assert set(wire) == {"observation/image", "observation/state", "prompt"}
    back, _ = codec.unwire(wire)
    assert all(back[name].tobytes() == obs[name].tobytes() for name in obs)
    assert codec.actions({"actions": np.ones((5, 7))}).shape == (5, 2)


def test_a_rotated_image_is_rotated_back_exactly_by_unwire():
    codec = WireCodec("rotating", images={keys.IMAGE: "img"}, rotate_180=True)
    image = RNG.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    wire = codec.encode({keys.IMAGE: image}, "x")
    np.testing.assert_array_equal(wire["img"], image[::-1, ::-1])
    np.testing.assert_array_equal(codec.unwire(wire)[0][keys.IMAGE], image)


def test_a_missing_state_key_and_a_too_narrow_answer_are_clear_errors():
    codec = MT10_STATE.codecs["openpi"]
    with pytest.raises(KeyError, match=r"lacks \['state'\]; it has \['image'\]"):
        codec.encode({keys.IMAGE: np.zeros(1)}, "x")
    with pytest.raises(
        WireError, match="takes the first 4 action dimensions, but the server answered 2"
    ):
        codec.actions({"actions": np.zeros((3, 2))})
    with pytest.raises(WireError, match="must be a map with 'actions'"):
        codec.actions({"action": np.zeros((3, 4))})


def test_the_native_convention_sends_every_key_and_the_prompt_and_unwire_drops_the_prompt():
    obs = {keys.STATE: np.zeros(3), "extra.thing": np.ones(2)}
    wire = NATIVE.encode(obs, "go")
    assert set(wire) == {*obs, "prompt"}
    back, prompt = NATIVE.unwire(wire)
    assert set(back) == set(obs) and prompt == "go"
