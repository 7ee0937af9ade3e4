"""LIBERO-PRO's env as a gymnasium env, built inside LIBERO-PRO's own interpreter by the env
server. It imports nothing of policybench: the launcher puts it on that interpreter's path beside
the server, with the two leaf modules it uses (`keys`, LIBERO's `replay`)."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import keys
import numpy as np
import replay

# LIBERO-PRO's `libero` finds its files through the config LIBERO_CONFIG_PATH names; inherited
# from a process that runs hf-libero, it would name hf-libero's. It keeps one of its own, made
# there on first import.
CONFIG_PATH = Path(sys.prefix) / "libero-config"
os.environ["LIBERO_CONFIG_PATH"] = str(CONFIG_PATH)

INIT_STATE = "init_state"  # the reset option naming the init state (as policybench's LIBERO)
AGENT_CAMERA, WRIST_CAMERA = "agentview", "robot0_eye_in_hand"


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """robosuite's xyzw quaternion as an axis-angle vector (robosuite's formula, as openpi's
    LIBERO example uses it)."""
    w = float(np.clip(quat[3], -1.0, 1.0))
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return np.asarray(quat[:3], dtype=np.float64) * 2.0 * math.acos(w) / den


def state_of(raw: dict[str, np.ndarray]) -> np.ndarray:
    """The 8-d state of openpi's LIBERO: eef position, eef axis-angle, gripper joint positions."""
    return np.concatenate(
        (
            raw["robot0_eef_pos"],
            quat_to_axis_angle(raw["robot0_eef_quat"]),
            raw["robot0_gripper_qpos"],
        )
    )


def task_files(suite: str, index: int) -> tuple[Path, np.ndarray]:
    """Task `index` of LIBERO-PRO suite `suite` as its benchmark registers it (task order 0, as
    LIBERO-PRO's evaluator): its problem file and its init states."""
    from libero.libero import benchmark, get_libero_path

    tasks = benchmark.get_benchmark(suite)(0)
    task = tasks.get_task(index)
    bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
    return bddl, tasks.get_task_init_states(index)


class LiberoProEnv(gym.Env):
    """Task `index` of a LIBERO-PRO suite, staged as LIBERO-PRO's evaluator stages its episodes:
    `reset(seed=s, options={"init_state": i})` shows what episode i of the task's env shows when
    that env was seeded once with s after it was built and reset i + 1 times (the first i
    replayed, not run), then set to init state i and settled for `settle_steps` of
    `settle_action`. numpy's global RNG is left as it was. Observations: `image`, `wrist_image`
    as LIBERO renders them (upside down), `state` (8-d); success is LIBERO's goal check."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        suite: str,
        index: int,
        camera_size: int,
        horizon: int,
        settle_steps: int,
        settle_action: list[float],
    ) -> None:
        from libero.libero.envs import OffScreenRenderEnv

        self.bddl_file, self.init_states = task_files(suite, index)
        self._env = OffScreenRenderEnv(
            bddl_file_name=str(self.bddl_file),
            camera_heights=camera_size,
            camera_widths=camera_size,
            horizon=horizon,
            ignore_done=True,
        )
        # The joint samplers one model build adds (LIBERO appends them again at every build).
        self._joint_samplers = tuple(self._env.env.object_property_initializers)
        self.language = self._env.language_instruction
        self._settle = (settle_steps, np.asarray(settle_action, dtype=np.float64))
        size = (camera_size, camera_size, 3)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float64)
        self.observation_space = gym.spaces.Dict(
            {
                keys.IMAGE: gym.spaces.Box(0, 255, size, np.uint8),
                keys.WRIST_IMAGE: gym.spaces.Box(0, 255, size, np.uint8),
                keys.STATE: gym.spaces.Box(-np.inf, np.inf, (8,), np.float64),
            }
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        index = (options or {}).get(INIT_STATE)
        count = len(self.init_states)
        if not isinstance(index, int) or not 0 <= index < count:
            raise ValueError(
                f"LIBERO-PRO reset needs options={{'{INIT_STATE}': i}} with 0 <= i < {count}, "
                f"got {options!r}"
            )
        if not isinstance(seed, int):
            raise ValueError(f"LIBERO-PRO reset needs an int seed (the scene's), got {seed!r}")
        super().reset(seed=seed)
        robosuite_env = self._env.env
        outside = np.random.get_state()
        try:
            robosuite_env.object_property_initializers = list(self._joint_samplers)
            self._env.seed(seed)  # numpy's global RNG, which LIBERO's resets draw from
            if index:
                poses = replay.fresh_poses(robosuite_env, str(self.bddl_file))
                replay.replay_resets(robosuite_env, index, poses)
            self._env.reset()
        finally:
            np.random.set_state(outside)
        raw = self._env.set_init_state(self.init_states[index])
        steps, action = self._settle
        for _ in range(steps):
            raw, _, _, _ = self._env.step(action)
        return self._observe(raw), {}

    def step(self, action: np.ndarray):
        raw, reward, done, info = self._env.step(np.asarray(action, dtype=np.float64))
        # LIBERO's `done` is its goal check; the harness decides when the episode ends.
        return self._observe(raw), float(reward), False, False, {**info, keys.SUCCESS: bool(done)}

    @staticmethod
    def _observe(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {
            keys.IMAGE: raw[f"{AGENT_CAMERA}_image"],
            keys.WRIST_IMAGE: raw[f"{WRIST_CAMERA}_image"],
            keys.STATE: state_of(raw),
        }

    def close(self) -> None:
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.close()


def make(task: str, suite: str, **settings: Any) -> LiberoProEnv:
    """The env server's entry: `task` is policybench's task id (`task3`: LIBERO-PRO's task 3)."""
    return LiberoProEnv(suite, int(task.removeprefix("task")), **settings)
