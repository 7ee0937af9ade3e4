"""`--record-video`: films each rollout from the worker that runs it into the run directory's
videos/, and adds the file (or why there is none) to the rollout's record."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Generator

import pytest

from policybench import keys
from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.fixtures import add_observer, add_to_record
from policybench.pytest_plugin.rundir import run_dir_of
from policybench.report.video import Video, VideoRecorder

VIDEOS = "videos"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("policybench").addoption(
        "--record-video",
        action="store_true",
        help="record an mp4 of every rollout from its 'image' observation (needs PyAV: "
        "pip install 'policybench[video]')",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("record_video", False):
        try:
            import av  # noqa: F401
        except ImportError:
            raise pytest.UsageError(
                "--record-video needs PyAV, which is not installed; "
                "pip install 'policybench[video]' (or pip install av)"
            ) from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    planned = planned_of(item)
    if not item.config.getoption("record_video") or planned is None:
        return (yield)
    name = f"{VIDEOS}/{video_name(item.nodeid)}.mp4"
    recorder = VideoRecorder(run_dir_of(item.config) / name, planned.eval.control_hz)
    add_observer(item, recorder)
    try:
        return (yield)
    finally:
        add_to_record(item, record_fields(recorder.close(), name))


def record_fields(video: Video, name: str) -> dict[str, str]:
    """What the rollout's record says of its video: the file relative to the run directory."""
    if video.path is None:
        return {keys.VIDEO_MISSING: video.missing or "no frames"}
    return {keys.VIDEO: name}


def video_name(nodeid: str) -> str:
    """A file name for a test item: readable, and unique through a short hash of the node id."""
    test = nodeid.rsplit("::", 1)[-1]
    readable = re.sub(r"[^A-Za-z0-9._=-]+", "_", test).strip("_")[:80]
    return f"{readable}-{hashlib.sha1(nodeid.encode()).hexdigest()[:8]}"
