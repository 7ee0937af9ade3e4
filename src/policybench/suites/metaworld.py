"""MetaWorld v3 (Sawyer arm, MuJoCo): the MT10 tasks as an Eval, with MetaWorld's shipped
expert policies as the `scripted` policy. State observations by default, a camera on request."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.policy.base import Chunk, ChunkSource, Observation, SessionContext
from policybench.policy.codec import (
    Codec,
    CodecStep,
    action_dims,
    concat,
    expect_size,
    keep,
    prompt,
    rename,
)
from policybench.rendering import MUJOCO
from policybench.spec import Eval, seeded_per_task

CONTROL_HZ = 80.0  # MetaWorld steps 5 MuJoCo frames of 2.5 ms
MAX_STEPS = 500  # MetaWorld's own max_path_length; stepping past it raises

MT10 = {
    "reach-v3": "reach the goal position",
    "push-v3": "push the puck to the goal",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "door-open-v3": "open the door",
    "drawer-open-v3": "open the drawer",
    "drawer-close-v3": "close the drawer",
    "button-press-topdown-v3": "press the button from the top",
    "peg-insert-side-v3": "insert the peg into the hole from the side",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}


class SeededPlacement(gym.Wrapper):
    """A MetaWorld task env whose object and goal placement is drawn from the reset seed.

    MetaWorld's own wrappers pick one of 50 pre-sampled placements with a generator that the
    reset seed does not touch; here `reset(seed=s)` always stages the same placement for `s`,
    on any worker, after any earlier rollout.
    """

    def __init__(
        self, task: str, camera: str | None = None, size: int = 224, shadows: bool = True
    ) -> None:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
        from metaworld.types import Task

        env_cls = ALL_V3_ENVIRONMENTS[task]
        env = env_cls(
            render_mode="rgb_array" if camera else None,
            camera_name=camera,
            width=size,
            height=size,
        )
        # Placement comes from the seed at each reset; this only marks the task as set and the
        # goal as observable, as MetaWorld's MT benchmarks do.
        placeholder = {"env_cls": env_cls, "rand_vec": np.zeros(0), "partially_observable": False}
        env.set_task(Task(env_name=task, data=pickle.dumps(placeholder)))
        if not shadows:  # software rendering runs about three times faster without them
            env.model.light_castshadow[:] = 0
        super().__init__(env)
        self._camera = camera

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        env = self.env.unwrapped
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True
        env.seed(0 if seed is None else seed)
        obs, info = env.reset()
        return self._observe(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(obs), reward, terminated, truncated, info

    def _observe(self, state: np.ndarray) -> np.ndarray | dict[str, np.ndarray]:
        if self._camera is None:
            return state
        return {keys.STATE: state, keys.IMAGE: self.env.render()}


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Stay put (zero end-effector delta) and keep the gripper effort last commanded."""
    gripper = -1.0 if last is None else float(last[3])
    return np.array([0.0, 0.0, 0.0, gripper])


class MetaWorldExpert:
    """MetaWorld's hand-written expert for the task the instruction names, one action a call."""

    name = "scripted"

    def __init__(self, instructions: Mapping[str, str]) -> None:
        self._task_of = {instruction: task for task, instruction in instructions.items()}

    def open(self, context: SessionContext) -> ChunkSource:
        from metaworld.policies import ENV_POLICY_MAP

        task = self._task_of.get(context.instruction)
        if task is None:
            raise ValueError(
                f"no MetaWorld expert for instruction {context.instruction!r}; "
                f"known: {sorted(self._task_of)}"
            )
        expert, fps = ENV_POLICY_MAP[task](), context.control_hz

        def predict(obs: Observation) -> Chunk:
            return Chunk(expert.get_action(obs[keys.STATE])[None], fps)

        return predict

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "expert": "metaworld.policies"}


def openpi_codec(camera: str | None = None, size: int = 224) -> Codec:
    """openpi's keys in the style of its LIBERO example: the 39-d state as `observation/state`,
    the camera image (as rendered, size x size) as `observation/image`, the instruction as the
    prompt; the first 4 action dimensions (end-effector delta, gripper) are played."""
    image: tuple[CodecStep, ...] = ()
    if camera:
        image = (
            expect_size(keys.IMAGE, height=size, width=size),
            rename({keys.IMAGE: "observation/image"}),
        )
    return Codec(
        "openpi",
        (
            *image,
            concat(keys.STATE, into="observation/state"),
            keep("observation/image", "observation/state"),
            prompt(),
            action_dims(4),
        ),
    )


def mt10(
    camera: str | None = None,
    size: int = 224,
    shadows: bool = True,
    tasks: Mapping[str, str] = MT10,
) -> Eval:
    """The MT10 tasks; `camera` (e.g. "corner") adds a rendered `image` to each observation."""
    return Eval(
        name="metaworld-mt10" if camera is None else f"metaworld-mt10-{camera}",
        make_env=lambda task: SeededPlacement(task, camera, size, shadows),
        plan=seeded_per_task(tasks, timeout_s=MAX_STEPS / CONTROL_HZ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="zero-delta, keep gripper",
        requires=("metaworld",),
        extra="metaworld",
        packages=("metaworld", "mujoco", "gymnasium"),
        renderer=None if camera is None else MUJOCO,
        scripted=lambda: MetaWorldExpert(tasks),
        metadata={
            "observation": "state" if camera is None else f"state+{camera}@{size}",
            "shadows": shadows,
        },
        codecs={"openpi": openpi_codec(camera, size)},
    )


MT10_STATE = mt10()
