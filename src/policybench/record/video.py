"""Rollout videos: an observer that encodes each observation's image into an H.264 mp4 (PyAV)
as the rollout runs, so no frames pile up in memory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from policybench import keys
from policybench.run.files import make_folders, move_into_place, staging_for

if TYPE_CHECKING:
    from policybench.policy.base import Observation


@dataclass(frozen=True)
class Video:
    """What recording gave: the file and its frame count, or why there is no file."""

    path: Path | None
    frames: int
    missing: str | None = None


class VideoRecorder:
    """Called with `(time_ns, obs)` at every control step; `close()` finishes the file.

    A rollout without an image (a state-only Eval) gives no file and says so; an encoder that
    fails stops the recording with its message instead of failing the rollout it watches.
    """

    def __init__(self, path: Path, fps: float, image_key: str = keys.IMAGE) -> None:
        self.path = path
        self.fps = Fraction(fps).limit_denominator(1000)
        self.image_key = image_key
        self.frames = 0
        self.missing: str | None = None
        self._container: Any = None
        self._stream: Any = None
        self._staging: Path | None = None  # the file being encoded, moved to `path` at close

    def __call__(self, time_ns: int, obs: Observation) -> None:
        if self.missing is not None:
            return
        image = obs.get(self.image_key)
        if image is None:
            self.missing = (
                f"the observations have no {self.image_key!r} (keys: {', '.join(sorted(obs))}); "
                "a state-only Eval has nothing to film"
            )
            return
        frame = rgb_frame(np.asarray(image))
        if frame is None:
            self.missing = f"{self.image_key!r} of shape {np.shape(image)} is not an RGB image"
            return
        import av

        try:
            if self._container is None:
                self._open(frame.shape[1], frame.shape[0])
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            self._container.mux(self._stream.encode(video_frame))
        except (av.FFmpegError, OSError, ValueError) as error:
            self.missing = f"video encoding failed: {type(error).__name__}: {error}"
            self._abandon()
            return
        self.frames += 1

    def _open(self, width: int, height: int) -> None:
        import av

        make_folders(self.path.parent.parent, self.path.parent.name)
        self._staging = staging_for(self.path)
        self._container = av.open(
            str(self._staging), "w", format="mp4", options={"movflags": "+faststart"}
        )
        stream = self._container.add_stream("libx264", rate=self.fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast"}
        self._stream = stream

    def restart(self) -> None:
        """Forgets what it filmed: the rollout runs again from its start."""
        self._abandon()
        self.frames, self.missing = 0, None

    def close(self) -> Video:
        if self._container is not None:
            self._container.mux(self._stream.encode(None))
            self._container.close()
            self._container = None
            try:
                move_into_place(self._staging, self.path)
            except OSError as refused:  # a link planted where the video goes, say
                return Video(None, 0, f"video not kept: {refused}")
            return Video(self.path, self.frames)
        if self.missing is None:
            self.missing = "the rollout ended before its first observation"
        return Video(None, 0, self.missing)

    def _abandon(self) -> None:
        if self._container is not None:
            container, self._container = self._container, None
            try:
                container.close()
            finally:
                if self._staging is not None:
                    self._staging.unlink(missing_ok=True)


def rgb_frame(image: np.ndarray) -> np.ndarray | None:
    """`image` as an `[H, W, 3]` uint8 frame with even sides (H.264 wants them), or None if it is
    not an RGB image. Channels-first images are transposed; floats are taken as 0..1."""
    if image.ndim != 3:
        return None
    if image.shape[-1] != 3 and image.shape[0] == 3:
        image = np.moveaxis(image, 0, -1)
    if image.shape[-1] != 3:
        return None
    if image.dtype != np.uint8:
        scale = 255.0 if np.issubdtype(image.dtype, np.floating) else 1.0
        image = np.clip(image * scale, 0, 255).astype(np.uint8)
    height, width = image.shape[:2]
    if height % 2 or width % 2:
        image = np.pad(image, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    return np.ascontiguousarray(image)


def unfilmable(space: Any, image_key: str = keys.IMAGE) -> str | None:
    """Why an env of observation `space` gives no video (None: it has an RGB image to film)."""
    spaces = getattr(space, "spaces", None)
    if not isinstance(spaces, Mapping) or image_key not in spaces:
        has = (
            f"observations: {', '.join(sorted(spaces))}"
            if isinstance(spaces, Mapping)
            else f"one observation, {space}"
        )
        return (
            f"films the {image_key!r} observation, which this Eval does not have ({has}): "
            "its rollouts get no video"
        )
    shape = tuple(getattr(spaces[image_key], "shape", None) or ())
    if len(shape) != 3 or 3 not in (shape[0], shape[-1]):
        return f"films an RGB {image_key!r}; this Eval's is of shape {list(shape)}: no video"
    return None
