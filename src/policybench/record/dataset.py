"""Rollouts as LeRobot datasets (v3 layout, written with LeRobot's own API): each finished rollout
becomes a one-episode dataset of its own, and `merge` joins an Eval's episodes into one dataset.

Writing each rollout apart means no two processes ever write one dataset, and a run that is cut
short leaves every finished rollout as a complete dataset (`merge` joins them afterwards).
Layout under the dataset root PATH:

    PATH/.episodes/<eval>/<rollout index>/   one finished rollout (a LeRobot dataset)
    PATH/<eval>/                             the merged dataset of an Eval
    PATH/<eval>/meta/policybench_episodes.jsonl   per episode: index, outcome, statics
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import Observation
from policybench.policy.codec import Codec
from policybench.policy.lerobot import TASK as LEROBOT_TASK
from policybench.record.episode import Episode

EPISODES = ".episodes"
OUTCOMES = "policybench_episodes.jsonl"  # under each dataset's meta/
EPISODE_RECORD = "policybench_episode.json"  # a one-episode dataset's record, under its meta/
REPO_PREFIX = "policybench"
ACTION, REWARD, SUCCESS, DONE = "action", "next.reward", "next.success", "next.done"
INSTALL = "pip install 'policybench[lerobot]'"


@dataclass
class FrameRecorder:
    """An Observer (see harness) that keeps each step's observation in LeRobot's names: through
    the Eval's `lerobot` codec when it has one, else `observation.images.<key>` for uint8 HxWxC
    images and `observation.<key>` for the rest."""

    codec: Codec | None
    frames: list[dict[str, np.ndarray]] = field(default_factory=list)

    def __call__(self, time_ns: int, obs: Observation) -> None:
        self.frames.append(lerobot_observation(obs, self.codec))

    def restart(self) -> None:
        """Forgets what it kept: the rollout runs again from its start."""
        self.frames.clear()


def lerobot_observation(obs: Observation, codec: Codec | None) -> dict[str, np.ndarray]:
    if codec is not None:
        encoded = codec.encode(obs, "")
        encoded.pop(codec.prompt_key, None)
    else:
        encoded = {
            (f"observation.images.{k}" if _is_image(v) else f"observation.{k}"): v
            for k, v in obs.items()
        }
    return {
        name: np.asarray(value) if _is_image(value) else np.asarray(value, np.float32).reshape(-1)
        for name, value in encoded.items()
    }


def _is_image(value: Any) -> bool:
    array = np.asarray(value)
    return array.dtype == np.uint8 and array.ndim == 3 and array.shape[-1] in (1, 3, 4)


def features_of(frame: Mapping[str, np.ndarray], action_dim: int, videos: bool) -> dict[str, Any]:
    """LeRobot feature specs for frames shaped like `frame`, plus action, reward, success, done."""
    features: dict[str, Any] = {}
    for name, value in frame.items():
        if _is_image(value):
            kind = "video" if videos else "image"
            features[name] = {
                "dtype": kind,
                "shape": value.shape,
                "names": ["height", "width", "channels"],
            }
        else:
            features[name] = {"dtype": "float32", "shape": value.shape, "names": None}
    features[ACTION] = {"dtype": "float32", "shape": (action_dim,), "names": None}
    features[REWARD] = {"dtype": "float32", "shape": (1,), "names": None}
    features[SUCCESS] = {"dtype": "bool", "shape": (1,), "names": None}
    features[DONE] = {"dtype": "bool", "shape": (1,), "names": None}
    return features


def write_episode(
    root: Path,
    eval_name: str,
    index: int,
    frames: list[dict[str, np.ndarray]],
    episode: Episode,
    fps: float,
    videos: bool = True,
) -> Path | None:
    """Writes one rollout as a one-episode dataset under `root/.episodes/<eval>/`; returns its
    directory, or None for a rollout that took no step. A partly written episode never appears
    under its final name."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    steps = min(len(frames), len(episode.trace))
    if steps == 0:
        return None
    final = root / EPISODES / eval_name / f"{index:06d}"
    staging = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    if final.exists():
        shutil.rmtree(final)  # a rerun of this rollout (e.g. --lf) replaces its episode
    action_dim = int(np.asarray(episode.trace[0].command).size)
    dataset = LeRobotDataset.create(
        repo_id=f"{REPO_PREFIX}/{eval_name}",
        root=staging,
        fps=round(fps),
        features=features_of(frames[0], action_dim, videos),
        use_videos=videos,
    )
    instruction = str(episode.statics.get(keys.INSTRUCTION, ""))
    with warnings.catch_warnings():
        # LeRobot's writer converts its (1,)-shaped scalars in ways numpy and datasets warn about.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for step, (frame, trace) in enumerate(zip(frames, episode.trace, strict=False)):
            dataset.add_frame(
                {
                    **frame,
                    ACTION: np.asarray(trace.command, np.float32).reshape(-1),
                    REWARD: np.array([trace.reward], np.float32),
                    SUCCESS: np.array([trace.success]),
                    DONE: np.array([step == steps - 1]),
                    LEROBOT_TASK: instruction,
                }
            )
        dataset.save_episode()
        dataset.finalize()
    (staging / "meta" / EPISODE_RECORD).write_text(json.dumps(episode.record(), default=str))
    staging.rename(final)
    return final


def pending_evals(root: Path) -> list[str]:
    """Evals with finished rollouts under `root` not yet merged."""
    episodes = root / EPISODES
    return sorted(p.name for p in episodes.iterdir() if p.is_dir()) if episodes.is_dir() else []


def merge(root: Path, eval_name: str) -> Path:
    """Joins the finished rollouts of `eval_name` under `root`, in plan order, into the dataset
    `root/<eval>` with their records in its meta/policybench_episodes.jsonl, then removes them."""
    from lerobot.datasets.aggregate import aggregate_datasets

    source = root / EPISODES / eval_name
    parts = sorted(p for p in source.iterdir() if p.is_dir() and p.name.isdigit())
    target = root / eval_name
    if target.exists():
        raise FileExistsError(
            f"{target} already holds a dataset; merge into a fresh --record-dataset directory"
        )
    if not parts:
        raise FileNotFoundError(f"no finished rollouts of eval {eval_name!r} under {source}")
    repo_id = f"{REPO_PREFIX}/{eval_name}"
    aggregate_datasets([repo_id] * len(parts), repo_id, roots=parts, aggr_root=target)
    with (target / "meta" / OUTCOMES).open("w") as out:
        for episode_index, part in enumerate(parts):
            record = json.loads((part / "meta" / EPISODE_RECORD).read_text())
            out.write(json.dumps({"episode_index": episode_index, **record}) + "\n")
    shutil.rmtree(source)
    if not any((root / EPISODES).iterdir()):
        (root / EPISODES).rmdir()
    return target


def merge_all(root: Path) -> list[Path]:
    """Merges every Eval's finished rollouts under `root` (also after an interrupted run)."""
    return [merge(root, name) for name in pending_evals(root)]


if __name__ == "__main__":  # python -m policybench.record.dataset PATH: merge what a run left
    import sys

    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m policybench.record.dataset PATH")
    for merged in merge_all(Path(sys.argv[1])):
        print(f"merged {merged}")
