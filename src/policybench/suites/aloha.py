"""ALOHA (gym-aloha: two ViperX arms in MuJoCo): TransferCube and Insertion as LeRobot evaluates
them, seen through the top camera plus the 14-d joint state; only that camera is rendered."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.envserver import isolable
from policybench.perturbation import INITIAL_STATE, MUJOCO_AXES, TEXTURE, MujocoStaging
from policybench.policy.base import Observation
from policybench.policy.codec import (
    Codec,
    action_dims,
    channels_first,
    concat,
    expect_size,
    keep,
    nest,
    prompt,
    rename,
    resize_with_pad_to,
    take_first,
)
from policybench.policy.contract import Contract, Image, actions_only
from policybench.rendering import MUJOCO
from policybench.spec import Eval, seeded_per_task

CONTROL_HZ = 50.0  # gym-aloha's DT of 0.02 s
MAX_STEPS = 400  # LeRobot's ALOHA episode_length (gym-aloha's registry says 300)
CAMERA = "top"  # the camera LeRobot's ALOHA policies and openpi's aloha_sim example use
IMAGE_SIZE = (480, 640)  # height, width, as gym-aloha renders and LeRobot's datasets hold

# gym-aloha's task name -> the instruction of LeRobot's aloha_sim datasets.
TASKS = {
    "transfer_cube": "Pick up the cube with the right arm and transfer it to the left arm.",
    "insertion": "Insert the peg into the socket.",
}


@dataclass(frozen=True)
class Rendering:
    """What ALOHA renders each step: one camera at one size, with or without shadows."""

    camera: str = CAMERA
    size: tuple[int, int] = IMAGE_SIZE
    shadows: bool = True

    def describe(self) -> str:
        shadows = "" if self.shadows else ", shadows off"
        return f"{self.camera} {self.size[0]}x{self.size[1]}{shadows}"


def make_aloha(
    task: str, camera: str = CAMERA, size: Sequence[int] = IMAGE_SIZE, shadows: bool = True
) -> AlohaSim:
    """An ALOHA task's env from plain arguments, so that its factory can run in an interpreter
    of its own (envserver.isolable: $POLICYBENCH_ENV_PYTHON, or candidate pins)."""
    height, width = size
    return AlohaSim(task, Rendering(camera, (height, width), shadows))


class AlohaSim(gym.Env):
    """A gym-aloha task that renders only `rendering.camera` (gym-aloha itself renders three
    480x640 cameras every step) and observes `image` (that camera) and `state` (14 joints).

    `reset(seed=s)` stages gym-aloha's object placement for `s`; success is gym-aloha's own
    (`is_success`: full reward).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_HZ}

    def __init__(self, task: str, rendering: Rendering = Rendering()) -> None:
        from gym_aloha.env import AlohaEnv

        if task not in TASKS:
            raise ValueError(f"no ALOHA task {task!r}; known: {sorted(TASKS)}")
        self._env = AlohaEnv(task=task, obs_type="pixels_agent_pos")
        self._rendering = rendering
        control = self._env._env  # dm_control's Environment, which asks its task to observe
        control.task.get_observation = self._observe_task
        self._physics = control.physics
        if not rendering.shadows:  # software rendering runs several times faster without them
            self._physics.model.light_castshadow[:] = 0
        self._staging = MujocoStaging(self._physics.model.ptr)  # the perturbation axes
        height, width = rendering.size
        self.action_space = self._env.action_space
        self.observation_space = gym.spaces.Dict(
            {
                keys.IMAGE: gym.spaces.Box(0, 255, (height, width, 3), np.uint8),
                keys.STATE: self._env.observation_space["agent_pos"],
            }
        )

    def _observe_task(self, physics: Any) -> OrderedDict:
        """gym-aloha's observation with only the one camera rendered."""
        task = self._env._env.task
        height, width = self._rendering.size
        # dm_control makes its GL context current only when it believes another of its own is:
        # after another suite's renderer (MetaWorld's, LIBERO's) took this thread's context, it
        # drew through that one. Made current for every frame (an eglMakeCurrent, microseconds).
        gl = physics.contexts.gl
        with gl.make_current() as ctx:
            ctx.call(gl._platform_make_current)
        image = physics.render(height=height, width=width, camera_id=self._rendering.camera)
        return OrderedDict(
            qpos=task.get_qpos(physics),
            qvel=task.get_qvel(physics),
            env_state=task.get_env_state(physics),
            images={"top": image},
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._staging.stage(options)  # before the reset renders its first observation
        obs, info = self._env.reset(seed=seed)
        if self._staging.displace(self._physics.data.ptr, options):  # the boxes moved
            obs = self._env._format_raw_obs(self._observe_task(self._physics))
        return self._observe(obs), info

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self._env.step(np.asarray(action))
        return self._observe(obs), reward, terminated, truncated, info

    @staticmethod
    def _observe(obs: dict[str, Any]) -> dict[str, np.ndarray]:
        return {keys.IMAGE: obs["pixels"]["top"], keys.STATE: obs["agent_pos"]}

    def close(self) -> None:
        self._env.close()


# openpi's aloha_sim example on the wire: `state` (14 joints) and `images.cam_high`, the top
# camera resized with padding to 224x224 uint8 and sent channels-first, plus `prompt`; of each
# `[H, 14]` answer the first 10 actions are played (its action horizon), then it is asked again.
OPENPI_IMAGES, OPENPI_CAMERA, MODEL_IMAGE_SIZE, ACTION_HORIZON = "images", "cam_high", 224, 10
OPENPI_CODEC = Codec(
    "openpi",
    (
        resize_with_pad_to(keys.IMAGE, height=MODEL_IMAGE_SIZE, width=MODEL_IMAGE_SIZE),
        channels_first(keys.IMAGE),
        nest(OPENPI_IMAGES, {keys.IMAGE: OPENPI_CAMERA}),
        keep(keys.STATE, OPENPI_IMAGES),
        prompt(),
        action_dims(14),
        take_first(ACTION_HORIZON),
    ),
    Contract(action="joint-absolute", rotation="none", control_hz=CONTROL_HZ, state=("joints:14",)),
)


def lerobot_codec(rendering: Rendering = Rendering()) -> Codec:
    """LeRobot's ALOHA conventions (lerobot.envs AlohaEnv, `pixels_agent_pos`): the camera as
    `observation.images.<camera>` as gym-aloha renders it (480x640 for LeRobot's checkpoints),
    the 14 joints as `observation.state`, the instruction as `task`; 14-d joint actions."""
    image = f"observation.images.{rendering.camera}"
    height, width = rendering.size
    return Codec(
        "lerobot",
        (
            expect_size(keys.IMAGE, height=height, width=width),
            rename({keys.IMAGE: image}),
            concat(keys.STATE, into="observation.state"),
            keep(image, "observation.state"),
            prompt("task"),
            action_dims(14),
        ),
        Contract(
            action="joint-absolute",
            rotation="none",
            control_hz=CONTROL_HZ,
            images={image: Image(height, width)},
            state=("joints:14",),
        ),
    )


# The MuJoCo axes but texture (gym-aloha's models have no texture), and its boxes moved.
AXES = {
    **{name: axis for name, axis in MUJOCO_AXES.items() if name != TEXTURE.name},
    INITIAL_STATE.name: INITIAL_STATE,
}


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Keep the joints where they are (actions are absolute joint positions)."""
    return np.asarray(obs[keys.STATE], dtype=np.float32) if last is None else last


def aloha(
    rendering: Rendering = Rendering(),
    tasks: dict[str, str] = TASKS,
    max_steps: int = MAX_STEPS,
) -> Eval:
    """TransferCube and Insertion at 50 Hz for `max_steps` steps, seen as `rendering` says."""
    default = Rendering()
    suffix = "" if rendering.camera == default.camera else f"-{rendering.camera}"
    suffix += "" if rendering.size == default.size else "-{}x{}".format(*rendering.size)
    suffix += "" if rendering.shadows else "-noshadows"
    return Eval(
        name=f"aloha{suffix}",
        make_env=isolable(
            make_aloha,
            camera=rendering.camera,
            size=list(rendering.size),
            shadows=rendering.shadows,
        ),
        plan=seeded_per_task(tasks, timeout_s=max_steps / CONTROL_HZ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="hold current joint positions",
        requires=("gym_aloha", "dm_control"),
        extra="aloha",
        packages=("gym-aloha", "dm-control", "mujoco", "gymnasium"),
        renderer=MUJOCO,
        perturbations=AXES,
        metadata={
            "observation": f"{keys.IMAGE}: {rendering.describe()} + {keys.STATE}: 14 joints",
            "camera": rendering.camera,
            "image_size": list(rendering.size),
            "shadows": rendering.shadows,
            "max_steps": max_steps,
            "success_check": "gym-aloha is_success (full reward)",
        },
        codecs={"openpi": OPENPI_CODEC, "lerobot": lerobot_codec(rendering)},
        contract=actions_only(OPENPI_CODEC.contract),
    )


ALOHA = aloha()
"""As LeRobot evaluates ALOHA: the top camera at 480x640 with shadows, 400 steps at 50 Hz."""
