"""`--record-video`: films each rollout from the worker that runs it into the run directory's
videos/, and adds the file (or why there is none) to the rollout's record."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.fixtures import add_observer, add_to_record
from policybench.pytest_plugin.rundir import run_dir_of
from policybench.record.video import VideoRecorder
from policybench.run.layout import VIDEOS, video_fields, video_name


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
        add_to_record(item, video_fields(recorder.close(), name))
