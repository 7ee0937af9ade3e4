"""`--record-video`: films each rollout from the worker that runs it into the run directory's
videos/, and tells the controller the file (or why there is none) through the item report."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Generator
from typing import Any

import pytest

from policybench import keys
from policybench.pytest_plugin.collection import evals_of
from policybench.pytest_plugin.fixtures import add_observer
from policybench.pytest_plugin.rundir import run_dir_of
from policybench.report.video import Video, VideoRecorder
from policybench.spec import Rollout

VIDEOS = "videos"
VIDEO = "policybench_video"  # user property: {keys.VIDEO: path} or {keys.VIDEO_MISSING: why}
RECORDED = pytest.StashKey[dict[str, str]]()


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
    rollout = getattr(getattr(item, "callspec", None), "params", {}).get("rollout")
    eval = evals_of(item).get(rollout.eval) if isinstance(rollout, Rollout) else None
    if not item.config.getoption("record_video") or eval is None:
        return (yield)
    name = f"{VIDEOS}/{video_name(item.nodeid)}.mp4"
    recorder = VideoRecorder(run_dir_of(item.config) / name, eval.control_hz)
    add_observer(item, recorder)
    try:
        return (yield)
    finally:
        item.stash[RECORDED] = record_fields(recorder.close(), name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, pytest.TestReport]:
    report: pytest.TestReport = yield
    fields = item.stash.get(RECORDED, None)
    if call.when == "call" and fields is not None:
        report.user_properties.append((VIDEO, fields))
    return report


def record_fields(video: Video, name: str) -> dict[str, str]:
    """What the rollout's record says of its video: the file relative to the run directory."""
    if video.path is None:
        return {keys.VIDEO_MISSING: video.missing or "no frames"}
    return {keys.VIDEO: name}


def video_fields(report: pytest.TestReport) -> dict[str, str]:
    return next((value for name, value in report.user_properties if name == VIDEO), {})


def video_name(nodeid: str) -> str:
    """A file name for a test item: readable, and unique through a short hash of the node id."""
    test = nodeid.rsplit("::", 1)[-1]
    readable = re.sub(r"[^A-Za-z0-9._=-]+", "_", test).strip("_")[:80]
    return f"{readable}-{hashlib.sha1(nodeid.encode()).hexdigest()[:8]}"
