"""How a rollout's observations look on the wire: the native convention (policybench's own keys,
for a shared server) and per-suite openpi conventions (key names, images, state, prompt, actions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policybench.policy.base import Observation
from policybench.policy.wire import WireError

PROMPT = "prompt"  # the openpi protocol's instruction key
ACTIONS = "actions"  # the openpi protocol's answer key, `[H, D]`
SERVER_TIMING = "server_timing"


@dataclass(frozen=True)
class WireCodec:
    """One convention: `encode` turns an env observation plus the instruction into the map a
    server expects, `actions` reads the server's answer back as env actions, and `unwire`
    inverts `encode` exactly (for a server whose model takes env observations).

    With `native`, observations travel under their own keys. Otherwise `images` renames env
    image keys (rotated by 180 degrees with `rotate_180`, checked to be `image_size` HxW), and
    the env keys in `state` are concatenated, in order, into `state_key`; other keys stay home.
    `action_width` keeps the first dimensions of what the server answers.
    """

    name: str
    native: bool = False
    images: Mapping[str, str] = field(default_factory=dict)
    image_size: tuple[int, int] | None = None
    rotate_180: bool = False
    state: tuple[str, ...] = ()
    state_key: str | None = None
    action_width: int | None = None

    def __post_init__(self) -> None:
        if bool(self.state) != (self.state_key is not None):
            raise ValueError(f"codec {self.name!r}: give both `state` and `state_key`, or neither")

    def encode(self, obs: Observation, instruction: str) -> dict[str, Any]:
        if self.native:
            return {**obs, PROMPT: instruction}
        wire: dict[str, Any] = {}
        for env_key, wire_key in self.images.items():
            if env_key in obs:
                wire[wire_key] = self._image(env_key, obs[env_key])
        if self.state_key is not None:
            missing = [name for name in self.state if name not in obs]
            if missing:
                raise KeyError(
                    f"codec {self.name!r} builds {self.state_key!r} from {list(self.state)}, but "
                    f"the observation lacks {missing}; it has {sorted(obs)}"
                )
            wire[self.state_key] = np.concatenate([np.ravel(obs[name]) for name in self.state])
        wire[PROMPT] = instruction
        return wire

    def _image(self, name: str, image: np.ndarray) -> np.ndarray:
        if self.image_size is not None and tuple(image.shape[:2]) != self.image_size:
            raise ValueError(
                f"codec {self.name!r} sends {name!r} at {self.image_size[0]}x{self.image_size[1]}, "
                f"got an image of shape {image.shape}; render the camera at that size"
            )
        return np.ascontiguousarray(image[::-1, ::-1]) if self.rotate_180 else image

    def actions(self, answer: Any) -> np.ndarray:
        """The `[H, D]` actions in a server's answer, sliced to `action_width`."""
        if not isinstance(answer, Mapping) or ACTIONS not in answer:
            got = sorted(answer) if isinstance(answer, Mapping) else type(answer).__name__
            raise WireError(f"a server answer must be a map with {ACTIONS!r}, got {got}")
        actions = np.asarray(answer[ACTIONS])
        if actions.ndim == 1:
            actions = actions[None]
        if actions.ndim != 2 or actions.dtype.kind not in "fiu":
            raise WireError(
                f"server answered {ACTIONS!r} of shape {actions.shape} and dtype {actions.dtype}; "
                "expected numbers of shape [H, D]"
            )
        width = self.action_width
        if width is not None:
            if actions.shape[1] < width:
                raise WireError(
                    f"codec {self.name!r} takes the first {width} action dimensions, but the "
                    f"server answered {actions.shape[1]}; is it serving a model of this embodiment?"
                )
            actions = actions[:, :width]
        return actions

    def unwire(self, wire: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], str]:
        """The env observation and instruction a `wire` map was encoded from."""
        prompt = wire.get(PROMPT, "")
        if not isinstance(prompt, str):
            raise WireError(f"{PROMPT!r} must be a string, got {type(prompt).__name__}")
        if self.native:
            return {name: value for name, value in wire.items() if name != PROMPT}, prompt
        if len(self.state) > 1:
            raise WireError(
                f"codec {self.name!r} concatenates {list(self.state)}; a server cannot split "
                "them back for a model that takes env observations"
            )
        obs: dict[str, np.ndarray] = {}
        for env_key, wire_key in self.images.items():
            if wire_key in wire:
                image = np.asarray(wire[wire_key])
                obs[env_key] = np.ascontiguousarray(image[::-1, ::-1]) if self.rotate_180 else image
        if self.state_key is not None:
            if self.state_key not in wire:
                raise WireError(
                    f"codec {self.name!r} expects {self.state_key!r} in each observation; "
                    f"got keys {sorted(wire)}"
                )
            obs[self.state[0]] = np.asarray(wire[self.state_key])
        return obs, prompt


NATIVE = WireCodec("native", native=True)
