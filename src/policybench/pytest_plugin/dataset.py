"""`--record-dataset PATH`: the process that runs a rollout writes it as a one-episode LeRobot
dataset; at the end the controller merges each Eval's episodes into PATH/<eval> (record.dataset)."""

from __future__ import annotations

import importlib.util
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from policybench.pytest_plugin.collection import planned_of
from policybench.pytest_plugin.fixtures import EPISODE, add_observer
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker
from policybench.record.dataset import INSTALL, FrameRecorder, merge_all, write_episode
from policybench.registry import LEROBOT_CODEC

ROOT = pytest.StashKey[Path]()
MERGED = pytest.StashKey[list[Path]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--record-dataset",
        default=None,
        metavar="PATH",
        help="record every rollout into a LeRobot dataset per Eval under PATH (a new or empty "
        f"directory; needs {INSTALL})",
    )
    group.addoption(
        "--record-dataset-images",
        action="store_true",
        help="store the dataset's camera frames as PNG images instead of videos",
    )


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("record_dataset", None)
    if option is None:
        return
    if is_worker(config):
        config.stash[ROOT] = Path(from_controller(config, "dataset_root"))
        return
    if importlib.util.find_spec("lerobot") is None:
        raise pytest.UsageError(f"--record-dataset writes LeRobot datasets; {INSTALL}")
    root = (config.invocation_params.dir / option).resolve()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise pytest.UsageError(
            f"--record-dataset {option}: {root} exists and is not an empty directory; give a new "
            "path (to merge episodes an interrupted run left there: "
            "python -m policybench.record.dataset PATH)"
        )
    config.stash[ROOT] = root
    hand_to_workers(config, "dataset_root", str(root))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    root = item.config.stash.get(ROOT, None)
    planned = planned_of(item)
    if root is None or planned is None:
        return (yield)
    eval, rollout = planned.eval, planned.rollout
    recorder = FrameRecorder(eval.codecs.get(LEROBOT_CODEC))
    add_observer(item, recorder)
    try:
        return (yield)
    finally:
        episode = item.stash.get(EPISODE, None)
        if episode is not None:
            videos = not item.config.getoption("record_dataset_images")
            write_episode(
                root, eval.name, rollout.index, recorder.frames, episode, eval.control_hz, videos
            )


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    root = config.stash.get(ROOT, None)
    if root is not None and not is_worker(config) and root.is_dir():
        config.stash[MERGED] = merge_all(root)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for merged in config.stash.get(MERGED, []):
        terminalreporter.write_line(f"LeRobot dataset: {merged}")
