"""Rollout videos: the recorder encodes the observations' images into an H.264 mp4 that decodes
back frame for frame; a state-only rollout gets no file and a reason."""

from __future__ import annotations

import av
import numpy as np

from policybench import keys
from policybench.record.video import VideoRecorder


def frames(count: int, height: int = 48, width: int = 64) -> list[np.ndarray]:
    images = []
    for i in range(count):
        image = np.full((height, width, 3), 255, np.uint8)
        image[10:20, 2 * i : 2 * i + 10] = (200, 30, 30)
        images.append(image)
    return images


def test_recorded_video_decodes_to_every_frame_at_the_control_rate(tmp_path):
    recorder = VideoRecorder(tmp_path / "videos" / "a.mp4", fps=10.0)
    for step, image in enumerate(frames(25)):
        recorder(step * 100_000_000, {keys.IMAGE: image, keys.STATE: np.zeros(2)})
    video = recorder.close()
    assert (video.path, video.frames, video.missing) == (tmp_path / "videos" / "a.mp4", 25, None)
    with av.open(str(video.path)) as container:
        stream = container.streams.video[0]
        decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        assert stream.codec_context.name == "h264"
        assert stream.average_rate == 10
    assert len(decoded) == 25
    assert decoded[0].shape == (48, 64, 3)
    # The red square moved right by 2 pixels a frame; lossy coding keeps it where it was.
    red = [
        np.argwhere(frame[..., 0].astype(int) - frame[..., 1] > 100)[:, 1].mean()
        for frame in decoded
    ]
    assert np.allclose(np.diff(red), 2.0, atol=0.5)


def test_odd_sized_and_float_images_are_padded_and_scaled(tmp_path):
    recorder = VideoRecorder(tmp_path / "b.mp4", fps=80.0)
    for image in frames(3, height=47, width=63):
        recorder(0, {keys.IMAGE: image.astype(np.float32) / 255.0})
    assert recorder.close().frames == 3
    with av.open(str(tmp_path / "b.mp4")) as container:
        frame = next(container.decode(video=0))
        assert (frame.height, frame.width) == (48, 64)


def test_state_only_rollout_has_no_video_and_says_why(tmp_path):
    recorder = VideoRecorder(tmp_path / "c.mp4", fps=80.0)
    recorder(0, {keys.STATE: np.zeros(39)})
    video = recorder.close()
    assert video.path is None and not (tmp_path / "c.mp4").exists()
    assert video.missing == (
        "the observations have no 'image' (keys: state); a state-only Eval has nothing to film"
    )


def test_rollout_that_ended_before_any_observation_says_so(tmp_path):
    assert VideoRecorder(tmp_path / "d.mp4", fps=10.0).close().missing == (
        "the rollout ended before its first observation"
    )
