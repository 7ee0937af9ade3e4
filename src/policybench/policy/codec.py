"""Codecs: how an env's observations and actions look to a model. A Codec is a named sequence of
pure steps (rename, rotate, resize-with-pad, ...): observations flow through them in order, a
model's actions flow back in reverse, and `decode` inverts `encode` where each step can.

The instruction enters as the `instruction` entry; a `prompt(key)` step sends it under the
model's key, and a codec without one keeps it from the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.contract import Contract

PROMPT = "prompt"  # the openpi protocol's instruction key
Data = dict[str, Any]


class CodecError(ValueError):
    """Data a codec cannot encode, decode or play: what it expected and what came."""


class CodecStep:
    """One pure transform. `encode` maps an observation towards the model, `decode` inverts it
    (where the step can; identity where it loses nothing a model needs), `actions` maps a
    model's `[H, D]` actions back towards the env. `describe` names the step in the record."""

    def encode(self, data: Data) -> Data:
        return data

    def decode(self, data: Data) -> Data:
        return data

    def actions(self, actions: np.ndarray) -> np.ndarray:
        return actions

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Codec:
    """A named sequence of steps; `describe()` is what an Episode records of it."""

    name: str
    steps: tuple[CodecStep, ...] = ()
    # The conventions a model seen through it must follow (checked by the preflight).
    contract: Contract | None = None

    def encode(self, obs: Mapping[str, Any], instruction: str) -> Data:
        """What the model is handed for `obs` under `instruction`."""
        if keys.INSTRUCTION in obs:
            raise CodecError(
                f"codec {self.name!r}: the observation has a key {keys.INSTRUCTION!r}, which "
                "names the instruction in a codec; rename that observation key in the env"
            )
        data: Data = {**obs, keys.INSTRUCTION: instruction}
        for step in self.steps:
            data = step.encode(data)
        data.pop(keys.INSTRUCTION, None)
        return data

    def decode(self, data: Mapping[str, Any]) -> tuple[Data, str]:
        """The observation and instruction that `data` was encoded from (a server's view)."""
        decoded: Data = dict(data)
        for step in reversed(self.steps):
            decoded = step.decode(decoded)
        instruction = decoded.pop(keys.INSTRUCTION, "")
        if not isinstance(instruction, str):
            raise CodecError(
                f"codec {self.name!r}: the instruction must be a string, "
                f"got {type(instruction).__name__}"
            )
        return decoded, instruction

    def actions(self, actions: np.ndarray) -> np.ndarray:
        """A model's `[H, D]` actions as the env plays them."""
        for step in reversed(self.steps):
            actions = step.actions(actions)
        return actions

    @property
    def prompt_key(self) -> str | None:
        """The key the instruction travels under, if the codec sends it."""
        prompts = (step for step in self.steps if isinstance(step, _Prompt))
        return next((step.mapping[keys.INSTRUCTION] for step in prompts), None)

    @property
    def action_width(self) -> int | None:
        """How many action dimensions the env plays, if the codec slices them."""
        return next((step.width for step in self.steps if isinstance(step, ActionDims)), None)

    def describe(self) -> dict[str, Any]:
        return {keys.CODEC: self.name, keys.CODEC_STEPS: [step.describe() for step in self.steps]}


IDENTITY = Codec("identity")
"""The model sees the env's observation as it is, without the instruction."""


@dataclass(frozen=True)
class Rename(CodecStep):
    mapping: Mapping[str, str]

    def encode(self, data: Data) -> Data:
        return {self.mapping.get(name, name): value for name, value in data.items()}

    def decode(self, data: Data) -> Data:
        back = {new: old for old, new in self.mapping.items()}
        return {back.get(name, name): value for name, value in data.items()}

    def describe(self) -> str:
        return f"rename({', '.join(f'{old}->{new}' for old, new in self.mapping.items())})"


def rename(mapping: Mapping[str, str]) -> Rename:
    """Renames keys (`{env key: model key}`); other keys pass through."""
    return Rename(dict(mapping))


class _Prompt(Rename):
    def describe(self) -> str:
        return f"prompt({self.mapping[keys.INSTRUCTION]})"


def prompt(key: str = PROMPT) -> Rename:
    """Sends the instruction under `key`."""
    return _Prompt({keys.INSTRUCTION: key})


@dataclass(frozen=True)
class Keep(CodecStep):
    names: tuple[str, ...]

    def encode(self, data: Data) -> Data:
        kept = {name: value for name, value in data.items() if name in self.names}
        if keys.INSTRUCTION in data:  # the prompt step decides whether it travels
            kept[keys.INSTRUCTION] = data[keys.INSTRUCTION]
        return kept

    def describe(self) -> str:
        return f"keep({', '.join(self.names)})"


def keep(*names: str) -> Keep:
    """Drops every key but `names` (what the model is not to see stays home)."""
    return Keep(names)


@dataclass(frozen=True)
class EachNamed(CodecStep):
    """A step that maps each named entry on its own (`forward` on encode, `backward` on
    decode); entries that are absent are skipped."""

    names: tuple[str, ...]

    def forward(self, name: str, value: Any) -> Any:
        raise NotImplementedError

    def backward(self, name: str, value: Any) -> Any:
        return value

    def encode(self, data: Data) -> Data:
        return {n: self.forward(n, v) if n in self.names else v for n, v in data.items()}

    def decode(self, data: Data) -> Data:
        return {n: self.backward(n, v) if n in self.names else v for n, v in data.items()}

    def _named(self, what: str) -> str:
        return f"{what}({', '.join(self.names)})"


@dataclass(frozen=True)
class ExpectSize(EachNamed):
    size: tuple[int, int]

    def forward(self, name: str, value: Any) -> Any:
        if tuple(np.shape(value)[:2]) != self.size:
            height, width = self.size
            raise CodecError(
                f"codec step {self.describe()}: expected {name!r} at {height}x{width}, got an "
                f"image of shape {np.shape(value)}; render the camera at that size"
            )
        return value

    def describe(self) -> str:
        return f"expect_size({', '.join(self.names)}: {self.size[0]}x{self.size[1]})"


def expect_size(*names: str, height: int, width: int) -> ExpectSize:
    """Checks that the named HxWxC images are `height` x `width`."""
    return ExpectSize(names, (height, width))


@dataclass(frozen=True)
class Rotate180(EachNamed):
    def forward(self, name: str, value: Any) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(value)[::-1, ::-1])

    backward = forward  # a half turn undoes itself

    def describe(self) -> str:
        return self._named("rotate_180")


def rotate_180(*names: str) -> Rotate180:
    """Rotates the named HxWxC images by 180 degrees (as openpi's LIBERO example expects)."""
    return Rotate180(names)


@dataclass(frozen=True)
class ResizeWithPad(EachNamed):
    """Not invertible: a server's model sees the resized image."""

    size: tuple[int, int]

    def forward(self, name: str, value: Any) -> np.ndarray:
        return resize_with_pad(np.asarray(value), *self.size)

    def describe(self) -> str:
        return f"resize_with_pad({', '.join(self.names)}: {self.size[0]}x{self.size[1]})"


def resize_with_pad_to(*names: str, height: int, width: int) -> ResizeWithPad:
    """Scales the named images to fit `height` x `width`, padding with black (openpi's way)."""
    return ResizeWithPad(names, (height, width))


@dataclass(frozen=True)
class ChannelsFirst(EachNamed):
    def forward(self, name: str, value: Any) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(value).transpose(2, 0, 1))

    def backward(self, name: str, value: Any) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(value).transpose(1, 2, 0))

    def describe(self) -> str:
        return self._named("channels_first")


def channels_first(*names: str) -> ChannelsFirst:
    """Turns the named HxWxC images into CxHxW."""
    return ChannelsFirst(names)


@dataclass(frozen=True)
class FirstDims(EachNamed):
    """Not invertible: a server's model sees the shortened vector."""

    count: int

    def forward(self, name: str, value: Any) -> np.ndarray:
        vector = np.ravel(value)
        if len(vector) < self.count:
            raise CodecError(
                f"codec step {self.describe()}: expected {name!r} with at least {self.count} "
                f"values, got shape {np.shape(value)}"
            )
        return vector[: self.count]

    def describe(self) -> str:
        return f"first_dims({', '.join(self.names)}: {self.count})"


def first_dims(*names: str, count: int) -> FirstDims:
    """Keeps the first `count` values of the named vectors (LeRobot's MetaWorld `agent_pos`: the
    hand position and gripper of the 39-d state)."""
    return FirstDims(names, count)


@dataclass(frozen=True)
class Concat(CodecStep):
    sources: tuple[str, ...]
    into: str

    def encode(self, data: Data) -> Data:
        missing = [name for name in self.sources if name not in data]
        if missing:
            raise CodecError(
                f"codec step {self.describe()} builds {self.into!r} from {list(self.sources)}, "
                f"but the observation lacks {missing}; it has {sorted(data)}"
            )
        joined = np.concatenate([np.ravel(data[name]) for name in self.sources])
        rest = {name: v for name, v in data.items() if name not in self.sources}
        return {**rest, self.into: joined}

    def decode(self, data: Data) -> Data:
        if len(self.sources) > 1:
            raise CodecError(
                f"codec step {self.describe()} joins {list(self.sources)}; they cannot be split "
                "back for a model that takes env observations"
            )
        if self.into not in data:
            raise CodecError(f"expected {self.into!r} in each observation; got keys {sorted(data)}")
        rest = {name: v for name, v in data.items() if name != self.into}
        return {**rest, self.sources[0]: np.asarray(data[self.into])}

    def describe(self) -> str:
        return f"concat({', '.join(self.sources)} -> {self.into})"


def concat(*sources: str, into: str) -> Concat:
    """Joins the named arrays, flattened and in order, into one vector `into` (a state)."""
    return Concat(sources, into)


@dataclass(frozen=True)
class Nest(CodecStep):
    group: str
    mapping: Mapping[str, str]  # outer key -> key inside the group

    def encode(self, data: Data) -> Data:
        missing = [name for name in self.mapping if name not in data]
        if missing:
            raise CodecError(
                f"codec step {self.describe()} needs {missing}; the observation has {sorted(data)}"
            )
        rest = {name: v for name, v in data.items() if name not in self.mapping}
        return {**rest, self.group: {inner: data[name] for name, inner in self.mapping.items()}}

    def decode(self, data: Data) -> Data:
        group = data.get(self.group)
        if not isinstance(group, Mapping) or not all(i in group for i in self.mapping.values()):
            got = sorted(group) if isinstance(group, Mapping) else type(group).__name__
            raise CodecError(
                f"codec step {self.describe()} expects a map {self.group!r} with "
                f"{sorted(self.mapping.values())}; got {got} (keys {sorted(data)})"
            )
        rest = {name: v for name, v in data.items() if name != self.group}
        return {**rest, **{name: group[inner] for name, inner in self.mapping.items()}}

    def describe(self) -> str:
        pairs = ", ".join(f"{name}->{inner}" for name, inner in self.mapping.items())
        return f"nest({self.group}: {pairs})"


def nest(group: str, mapping: Mapping[str, str]) -> Nest:
    """Moves keys into a map `group` (`{key: key inside the group}`), as openpi's `images`."""
    return Nest(group, dict(mapping))


@dataclass(frozen=True)
class ActionDims(CodecStep):
    width: int

    def actions(self, actions: np.ndarray) -> np.ndarray:
        if actions.shape[1] < self.width:
            raise CodecError(
                f"codec step {self.describe()} takes the first {self.width} action dimensions, "
                f"but the model answered {actions.shape[1]}; is it a model of this embodiment?"
            )
        return actions[:, : self.width]

    def describe(self) -> str:
        return f"action_dims({self.width})"


def action_dims(width: int) -> ActionDims:
    """Plays the first `width` dimensions of each action (a model may answer more)."""
    return ActionDims(width)


@dataclass(frozen=True)
class TakeFirst(CodecStep):
    count: int

    def actions(self, actions: np.ndarray) -> np.ndarray:
        return actions[: self.count]

    def describe(self) -> str:
        return f"take_first({self.count})"


def take_first(count: int) -> TakeFirst:
    """Plays the first `count` actions of each chunk, then the model is asked again (openpi's
    action horizon). Unlike the ChunkPlayer's `replan_every`, the rest of the chunk is dropped:
    with inference latency, the robot holds while the next chunk is computed."""
    if count < 1:
        raise ValueError(f"take_first needs a count >= 1, got {count}")
    return TakeFirst(count)


NATIVE = Codec("native", (prompt(),))
"""policybench's own convention: every observation key as it is, and the instruction."""


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """openpi_client's `image_tools.resize_with_pad`: scale to fit (PIL bilinear), pad with
    black to `height` x `width`, keep uint8."""
    from PIL import Image

    if image.shape[:2] == (height, width):
        return image
    current = Image.fromarray(image)
    ratio = max(current.width / width, current.height / height)
    resized = current.resize(
        (int(current.width / ratio), int(current.height / ratio)), resample=Image.BILINEAR
    )
    padded = Image.new(resized.mode, (width, height), 0)
    padded.paste(resized, ((width - resized.width) // 2, (height - resized.height) // 2))
    return np.asarray(padded)
