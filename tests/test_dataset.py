"""`--record-dataset`: rollouts become a LeRobot dataset per Eval that LeRobot loads with the
planned episodes, frames, features and task; each finished rollout stays readable on its own
until merged; a used directory is refused. Runs in the `lerobot` tox env."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")
pytest.importorskip("gym_pusht", reason="needs the pusht extra")

from lerobot.datasets.lerobot_dataset import LeRobotDataset

from policybench import keys
from policybench.harness import run_rollout
from policybench.record.dataset import (
    EPISODES,
    OUTCOMES,
    FrameRecorder,
    merge_all,
    write_episode,
)
from policybench.registry import PolicySettings, build_policy
from policybench.spec import seeded_per_task
from policybench.suites.pusht import INSTRUCTION, LEROBOT, PUSHT, TASK
from policybench.world import World
from tests.lerobot_eval import REPO, SHORT
from tests.test_lerobot import write_checkpoint

# Decoding videos with LeRobot's default (torchcodec) needs the system's FFmpeg libraries.
VIDEO_BACKEND = "pyav"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("act-pusht"))


def pytest_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", SHORT, "-p", "no:cacheprovider"]
    command += ["-q", "--report-dir", str(tmp_path / "reports"), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def load(root: Path) -> LeRobotDataset:
    return LeRobotDataset(f"policybench/{root.name}", root=root, video_backend=VIDEO_BACKEND)


@pytest.mark.slow
def test_recorded_rollouts_load_as_one_lerobot_dataset_per_eval(checkpoint, tmp_path):
    path = tmp_path / "datasets"
    done = pytest_run(
        tmp_path,
        f"--policy=lerobot:{checkpoint}",
        "--rollouts=3",
        "--seed=4",
        "-n",
        "2",
        f"--record-dataset={path}",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"LeRobot dataset: {path / 'pusht'}" in done.stdout
    assert sorted(p.name for p in path.iterdir()) == ["pusht"], "episodes are merged and removed"

    dataset = load(path / "pusht")
    records = [
        json.loads(line) for line in (path / "pusht/meta" / OUTCOMES).read_text().splitlines()
    ]
    assert dataset.num_episodes == 3
    assert [r[keys.SCENE][keys.SEED] for r in records] == [4, 5, 6], "episodes in plan order"
    assert dataset.num_frames == sum(r[keys.STEPS] for r in records)
    assert {r[keys.OUTCOME] for r in records} <= {"solved", "unsolved"}
    assert list(dataset.meta.tasks.index) == [INSTRUCTION]
    assert dataset.meta.features["observation.image"]["dtype"] == "video"
    assert dataset.meta.features["observation.image"]["shape"] == (96, 96, 3)
    assert dataset.meta.features["observation.state"]["shape"] == (2,)
    assert dataset.meta.features["action"]["shape"] == (2,)
    frame = dataset[0]
    assert tuple(frame["observation.image"].shape) == (3, 96, 96)
    assert (
        0.0
        <= float(frame["observation.image"].min())
        <= float(frame["observation.image"].max())
        <= 1.0
    )
    assert frame["task"] == INSTRUCTION
    ends = dataset.meta.episodes["dataset_to_index"]
    last = dataset[int(ends[0]) - 1]
    assert bool(last["next.done"]) and int(last["episode_index"]) == 0
    rewards = [float(dataset[i]["next.reward"]) for i in range(int(ends[0]))]
    assert sum(rewards) == pytest.approx(records[0][keys.SUM_REWARD], rel=1e-5, abs=1e-4)


def test_each_finished_rollout_is_a_readable_dataset_until_merged(checkpoint, tmp_path):
    """What an interrupted run leaves: one complete dataset per finished rollout; a partly
    written one is never taken for an episode; merging afterwards joins the finished ones."""
    world = World(PushTShort)
    policy = build_policy(
        f"lerobot:{checkpoint}",
        PushTShort,
        PolicySettings(),
        lambda: world.env_for(TASK).action_space,
    )
    rollouts = PushTShort.rollouts(2, 0)
    written = []
    for rollout in rollouts:
        recorder = FrameRecorder(LEROBOT)
        episode = run_rollout(rollout, world, policy, recorder)
        written.append(
            write_episode(
                tmp_path, PUSHT.name, rollout.index, recorder.frames, episode, 10.0, videos=False
            )
        )
        one = LeRobotDataset("policybench/pusht", root=written[-1])
        assert one.num_episodes == 1 and one.num_frames == episode.steps == 20
        np.testing.assert_allclose(
            one[5]["action"].numpy(), episode.trace[5].command.astype(np.float32)
        )
    (tmp_path / EPISODES / PUSHT.name / "000002.partial-123").mkdir()  # a writer cut short

    (merged,) = merge_all(tmp_path)
    dataset = LeRobotDataset("policybench/pusht", root=merged)
    assert dataset.num_episodes == 2 and dataset.num_frames == 40
    assert dataset.meta.features["observation.image"]["dtype"] == "image"
    assert not (tmp_path / EPISODES).exists()


def test_a_used_dataset_directory_is_refused(tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "something").write_text("")
    done = pytest_run(tmp_path, "--collect-only", f"--record-dataset={used}")
    assert done.returncode != 0
    assert "exists and is not an empty directory; give a new path" in done.stderr + done.stdout


PushTShort = dataclasses.replace(PUSHT, plan=seeded_per_task({TASK: INSTRUCTION}, timeout_s=2.0))
"""PushT with 2-second (20-step) rollouts, to keep the in-process recording quick."""
