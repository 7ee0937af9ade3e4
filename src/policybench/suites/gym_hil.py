"""gym-hil: the MuJoCo sim of LeRobot's human-in-the-loop RL tutorial (HIL-SERL, `env.type=
gym_manipulator`), a Franka Panda with a Robotiq gripper under operational-space control, as
gym-hil 0.1.14 builds it (`gym_hil/PandaPickCubeBase-v0`, `gym_hil/PandaArrangeBoxesBase-v0`:
10 Hz, at most 100 steps, success its step info's `succeed`).

Actions: 7-d in [-1, 1]: the end-effector's target moved by (x, y, z) metres (clipped to the
workspace), three rotation numbers the env ignores, and a change of the gripper's closure.
Observations: `state`, the 18-d robot state (joint positions and velocities, gripper, pinch
position) and `environment_state` (the block's position; for ArrangeBoxes, block1's), or, with
pixels, the 128x128 `image` (front camera) and `wrist_image` with `state`.

gym-hil places the block from numpy's global generator, which `reset(seed=...)` does not touch;
here a reset seeds it with the scene's seed for that reset alone (and puts the generator's state
back), so a seed always stages the same scene, on any worker. No built-in expert: gym-hil's
policies are people, through a gamepad or keyboard."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.policy.base import Observation
from policybench.rendering import MUJOCO
from policybench.spec import Eval, seeded_per_task

CONTROL_HZ = 10.0  # gym-hil's control_dt of 0.1 s
MAX_STEPS = 100  # its registered max_episode_steps
TASKS = {  # instructions of policybench's: gym-hil gives none
    "PandaPickCube": "pick up the cube",
    "PandaArrangeBoxes": "arrange the boxes",
}
WRIST_IMAGE = "wrist_image"
ENVIRONMENT_STATE = "environment_state"


def _env_class(task: str) -> Any:
    from gym_hil.envs import PandaArrangeBoxesGymEnv, PandaPickCubeGymEnv

    classes = {"PandaPickCube": PandaPickCubeGymEnv, "PandaArrangeBoxes": PandaArrangeBoxesGymEnv}
    if task not in classes:
        raise ValueError(f"gym-hil has no task {task!r}; known: {sorted(classes)}")
    return classes[task]


class GymHil(gym.Env):
    """A gym-hil task env, its scene drawn from the reset's seed and its observation flat."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_HZ}

    def __init__(self, task: str, pixels: bool = False) -> None:
        kwargs: dict[str, Any] = {"image_obs": pixels}
        if task == "PandaPickCube":
            kwargs["random_block_position"] = True  # else every scene is the same
        self._env = _env_class(task)(**kwargs)
        self._pixels = pixels
        self.action_space = self._env.action_space
        inner = self._env.observation_space
        state = inner["agent_pos"]
        if pixels:
            views = inner["pixels"]
            spaces = {keys.IMAGE: views["front"], WRIST_IMAGE: views["wrist"], keys.STATE: state}
        else:
            spaces = {keys.STATE: state, ENVIRONMENT_STATE: inner[ENVIRONMENT_STATE]}
        self.observation_space = gym.spaces.Dict(spaces)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        kept = np.random.get_state()
        np.random.seed(0 if seed is None else seed)
        try:
            obs, info = self._env.reset(seed=seed)
        finally:
            np.random.set_state(kept)
        return self._flat(obs), info

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self._env.step(action)
        return (
            self._flat(obs),
            reward,
            terminated,
            truncated,
            {**info, "is_success": info["succeed"]},
        )

    def _flat(self, obs: dict[str, Any]) -> Observation:
        if self._pixels:
            views = obs["pixels"]
            return {
                keys.IMAGE: views["front"],
                WRIST_IMAGE: views["wrist"],
                keys.STATE: obs["agent_pos"],
            }
        return {keys.STATE: obs["agent_pos"], ENVIRONMENT_STATE: obs[ENVIRONMENT_STATE]}

    def render(self) -> np.ndarray:
        return self._env.render()[0]

    def close(self) -> None:
        self._env.close()


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Stay: the target unmoved, the gripper's closure unchanged."""
    return np.zeros(7, np.float32)


def gym_hil(pixels: bool = False) -> Eval:
    """gym-hil's two tasks as an Eval: state (`gym-hil`) or the two cameras (`gym-hil-pixels`)."""
    return Eval(
        name="gym-hil" + ("-pixels" if pixels else ""),
        make_env=functools.partial(GymHil, pixels=pixels),
        plan=seeded_per_task(TASKS, timeout_s=MAX_STEPS / CONTROL_HZ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="target unmoved, gripper kept",
        requires=("gym_hil",),
        extra="gym-hil",
        packages=("gym-hil", "mujoco", "gymnasium"),
        renderer=MUJOCO,  # its env makes a renderer when built, pixels or not
        metadata={
            "observation": (
                "image + wrist_image 128x128, state 18-d"
                if pixels
                else "state 18-d + environment_state (the block's position)"
            ),
            "placement": "seed s: numpy's global generator seeded with s for the reset alone "
            "(gym-hil draws the block's position from it); PickCube's random_block_position on",
            keys.SUCCESS: "the step info's `succeed`",
            "max_steps": MAX_STEPS,
        },
    )


GYM_HIL = gym_hil()
GYM_HIL_PIXELS = gym_hil(pixels=True)
