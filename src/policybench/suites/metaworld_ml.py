"""MetaWorld ML45, the standard meta-learning split: 45 task classes to train on, 5 held out
(bin-picking, box-close, hand-insert, door-lock, door-unlock), each class with 50 tasks (object
and goal placements), the goal hidden from the state as meta-RL hides it.

Staged as `metaworld.ML45(seed=ML_SEED)` stages it: rollout i of a class runs its i-th task
(`set_task`, placement frozen), on the class's env from ML45's own classes. Building ML45 draws
its 2,500 tasks by making every class's env, about a minute; its placements (`rand_vec`s) are
kept instead in data/ml45_seed42.npz (made by `metaworld.ML45(seed=42)` of metaworld 3.1.1,
MIT License; tests/test_metaworld_ml45.py checks them against it). State observations (39-d, the
goal's three numbers zero). No expert: MetaWorld's scripted policies read the goal from the
state, which ML45 hides."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from policybench.perturbation import INITIAL_STATE, MujocoStaging
from policybench.spec import Eval, seeded_per_task
from policybench.suites.metaworld import (
    CONTROL_HZ,
    MAX_STEPS,
    SIGNALS,
    metaworld_eval,
    observed_again,
    openpi_codec,
)
from policybench.suites.metaworld_lerobot_tasks import LEROBOT_TASKS

ML_SEED = 42  # the benchmark's seed: which 50 placements each class's tasks are
TASKS_PER_CLASS = 50
SPLITS = ("train", "test")


PLACEMENTS = Path(__file__).parent / "data" / "ml45_seed42.npz"


@functools.cache
def placements() -> dict[str, np.ndarray]:
    """`split/class` -> its 50 tasks' placements (rand_vec), in ML45's order."""
    with np.load(PLACEMENTS) as data:
        return {name: data[name] for name in data.files}


class ML45Task(gym.Wrapper):
    """One ML45 task class; `reset(seed=i)` sets its i-th task (mod 50) and resets onto it."""

    def __init__(self, task: str, split: str) -> None:
        import pickle

        from metaworld.env_dict import ML45_V3
        from metaworld.types import Task

        classes = ML45_V3[split]
        if task not in classes:
            raise ValueError(f"ML45's {split} split has no task class {task!r}: {list(classes)}")
        env_cls = classes[task]
        super().__init__(env_cls())
        self._tasks = [
            Task(
                env_name=task,
                data=pickle.dumps(
                    {"env_cls": env_cls, "rand_vec": vec, "partially_observable": True}
                ),
            )
            for vec in placements()[f"{split}/{task}"]
        ]
        self._staging = MujocoStaging(self.env.unwrapped.model)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        env = self.env.unwrapped
        env.set_task(self._tasks[(seed or 0) % len(self._tasks)])
        self._staging.stage(options)
        obs, info = env.reset()
        if self._staging.displace(env.data, options):
            obs = observed_again(env)
        return obs, info


def ml45(split: str) -> Eval:
    """ML45's `split` ("train": 45 classes, "test": 5) as an Eval, a task per class."""
    if split not in SPLITS:
        raise ValueError(f"ML45 splits are {SPLITS}, got {split!r}")
    classes = TRAIN_CLASSES if split == "train" else TEST_CLASSES
    return metaworld_eval(
        name=f"metaworld-ml45-{split}",
        make_env=functools.partial(ML45Task, split=split),
        plan=seeded_per_task(
            {task: LEROBOT_TASKS[task] for task in classes}, timeout_s=MAX_STEPS / CONTROL_HZ
        ),
        metadata={
            "observation": "state (39-d; the goal's state[36:39] zero: ML45 hides it)",
            "placement": f"seed i: the class's i-th task (mod {TASKS_PER_CLASS}) of "
            f"metaworld.ML45(seed={ML_SEED}), set with set_task (placement frozen)",
            "instructions": "LeRobot's task descriptions (metaworld_config.json)",
            "max_steps": MAX_STEPS,
            "goal_observable": False,
        },
        codecs={"openpi": openpi_codec()},
        signals=SIGNALS,
        perturbations={INITIAL_STATE.name: INITIAL_STATE},
    )


# The splits' classes, as ML45 lists them (metaworld 3.1's env_dict.ML45_V3): written out so
# that declaring the Evals imports no MetaWorld; tests/test_metaworld_ml45.py checks them.
TRAIN_CLASSES = (
    "assembly-v3", "basketball-v3", "button-press-topdown-v3", "button-press-topdown-wall-v3",
    "button-press-v3", "button-press-wall-v3", "coffee-button-v3", "coffee-pull-v3",
    "coffee-push-v3", "dial-turn-v3", "disassemble-v3", "door-close-v3", "door-open-v3",
    "drawer-close-v3", "drawer-open-v3", "faucet-open-v3", "faucet-close-v3", "hammer-v3",
    "handle-press-side-v3", "handle-press-v3", "handle-pull-side-v3", "handle-pull-v3",
    "lever-pull-v3", "pick-place-wall-v3", "pick-out-of-hole-v3", "push-back-v3", "pick-place-v3",
    "plate-slide-v3", "plate-slide-side-v3", "plate-slide-back-v3", "plate-slide-back-side-v3",
    "peg-insert-side-v3", "peg-unplug-side-v3", "soccer-v3", "stick-push-v3", "stick-pull-v3",
    "push-wall-v3", "push-v3", "reach-wall-v3", "reach-v3", "shelf-place-v3", "sweep-into-v3",
    "sweep-v3", "window-open-v3", "window-close-v3",
)  # fmt: skip
TEST_CLASSES = (
    "bin-picking-v3",
    "box-close-v3",
    "hand-insert-v3",
    "door-lock-v3",
    "door-unlock-v3",
)

ML45_TRAIN = ml45("train")
ML45_TEST = ml45("test")
