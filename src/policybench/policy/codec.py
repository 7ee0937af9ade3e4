"""Codecs: pure, composable transforms between an env's observations/actions and a model's.

A Codec is a pair of functions. `a.then(b)` encodes with `a` then `b` and decodes in reverse,
so a stack reads in the order data flows from env to model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from policybench.policy.base import EndEpisode, Observation, Policy, Session, SessionContext, Step


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Codec:
    name: str = "identity"
    encode: Callable[[Observation], Observation] = _same
    decode: Callable[[np.ndarray], np.ndarray] = _same

    def then(self, inner: Codec) -> Codec:
        if self.name == "identity":
            return inner
        if inner.name == "identity":
            return self
        return Codec(
            name=f"{self.name}+{inner.name}",
            encode=lambda obs: inner.encode(self.encode(obs)),
            decode=lambda action: self.decode(inner.decode(action)),
        )


IDENTITY = Codec()


def compose(*codecs: Codec) -> Codec:
    stacked = IDENTITY
    for codec in codecs:
        stacked = stacked.then(codec)
    return stacked


def rotate_180(*names: str) -> Codec:
    """Rotates the named HxWxC images by 180 degrees (as openpi's LIBERO example expects)."""

    def encode(obs: Observation) -> Observation:
        return {
            name: np.ascontiguousarray(value[::-1, ::-1]) if name in names else value
            for name, value in obs.items()
        }

    return Codec(f"rotate_180({','.join(names)})", encode=encode)


def slice_action(width: int) -> Codec:
    """Keeps the first `width` action dimensions of what a model answers."""
    return Codec(f"slice_action({width})", decode=lambda action: action[..., :width])


class CodecPolicy:
    """A Policy seen through a Codec: sessions get encoded observations, answer decoded commands."""

    def __init__(self, policy: Policy, codec: Codec) -> None:
        self._policy = policy
        self._codec = codec
        self.name = policy.name

    def new_session(self, context: SessionContext) -> Session:
        return _CodedSession(self._policy.new_session(context), self._codec)

    def describe(self) -> dict[str, Any]:
        return {**self._policy.describe(), "codec": self._codec.name}


class _CodedSession:
    def __init__(self, session: Session, codec: Codec) -> None:
        self._session = session
        self._encode, self._decode = codec.encode, codec.decode

    def __call__(self, obs: Observation, time_ns: int) -> Step | EndEpisode:
        step = self._session(self._encode(obs), time_ns)
        if isinstance(step, Step) and step.commands is not None:
            return Step(self._decode(step.commands), step.resume_at_ns)
        return step

    @property
    def calls(self) -> list[Any]:
        return getattr(self._session, "calls", [])


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
