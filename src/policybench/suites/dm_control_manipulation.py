"""dm_control's manipulation tasks (dm-control 1.0.28, Apache-2.0; its models, meshes and Duplo
bricks ship in the wheel): a Kinova Jaco arm and hand on a table, lifting, placing, reaching and
stacking. The Eval runs each task's `_features` variant (state observations).

The protocol is dm_control's own: `manipulation.load(name, seed=s)`, `reset()`, `step(action)` until
the time step is the last, 25 Hz (its CONTROL_TIMESTEP of 0.04 s) for at most 10 s (its _TIME_LIMIT:
250 steps). Here each rollout loads its task afresh with the rollout's seed (a tenth of a second):
reseeding a loaded task is not the same, as the reassembly tasks shuffle their brick orders in place
from one episode to the next. Actions: 9-d, the arm's six joint velocities and the hand's three
finger velocities, in the action spec's bounds. Observations: the task's observables as dm_control
names them (`jaco_arm/joints_pos`, ...), each flattened to a vector (dm_control gives them with a
leading batch axis, joint positions as sine and cosine pairs).

Success: dm_control reports rewards, no success; a task's reward is 1 exactly when its goal holds
(the brick lifted past its height, placed on its target, every pair stacked, the hand in the
target's radius: each reward's tolerance bounds), so success here is a step rewarded 1. Papers
report returns over the full 10 s; here a rollout ends at its first success. No built-in expert."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.policy.base import Observation
from policybench.spec import Eval, seeded_per_task

CONTROL_HZ = 25.0  # dm_control.manipulation.shared.constants.CONTROL_TIMESTEP, 0.04 s
TIME_LIMIT_S = 10.0  # dm_control.manipulation._TIME_LIMIT
TASKS = {  # the `_features` environments of dm_control.manipulation.ALL, without the suffix
    "lift_brick": "lift the brick",
    "lift_large_box": "lift the large box",
    "place_brick": "place the brick on the target",
    "place_cradle": "place the prop in the cradle",
    "reach_duplo": "reach the Duplo brick",
    "reach_site": "reach the target site",
    "stack_2_bricks": "stack two bricks",
    "stack_2_bricks_moveable_base": "stack two bricks on the moveable base",
    "stack_3_bricks": "stack three bricks",
    "stack_3_bricks_random_order": "stack three bricks in the order shown",
    "stack_2_of_3_bricks_random_order": "stack two of the three bricks in the order shown",
    "reassemble_3_bricks_fixed_order": "reassemble the stack of three bricks",
    "reassemble_5_bricks_random_order": "reassemble the stack of five bricks in the order shown",
}


def environment_name(task: str) -> str:
    return f"{task}_features"


class DMControlManipulation(gym.Env):
    """One dm_control manipulation task as a gymnasium env: a reset with a seed loads the task
    afresh with it; success is a step rewarded 1."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_HZ}

    def __init__(self, task: str) -> None:
        if task not in TASKS:
            raise ValueError(f"dm_control manipulation has no task {task!r}; known: {list(TASKS)}")
        self.task = task
        self._env = _load(task)
        spec = self._env.action_spec()
        self.action_space = gym.spaces.Box(spec.minimum, spec.maximum, spec.shape, spec.dtype)
        self.observation_space = gym.spaces.Dict(
            {
                name: gym.spaces.Box(-np.inf, np.inf, (int(np.prod(array.shape)),), array.dtype)
                for name, array in self._env.observation_spec().items()
            }
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._env.close()
            self._env = _load(self.task, seed)
        step = self._env.reset()
        return _flat(step.observation), {}

    def step(self, action: np.ndarray):
        step = self._env.step(action)
        reward = float(step.reward)
        ended = step.last()
        terminated = ended and step.discount == 0  # dm_env: a time limit keeps its discount
        info = {keys.SUCCESS: reward >= 1.0}
        return _flat(step.observation), reward, terminated, ended and not terminated, info

    def render(self) -> np.ndarray:
        return self._env.physics.render(height=240, width=320, camera_id=0)

    def close(self) -> None:
        self._env.close()


def _load(task: str, seed: int | None = None) -> Any:
    from dm_control import manipulation

    return manipulation.load(environment_name(task), seed=seed)


def _flat(observation: Any) -> Observation:
    return {name: np.ravel(value) for name, value in observation.items()}


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Stay: every joint's velocity zero."""
    return np.zeros(9)


DM_CONTROL_MANIPULATION = Eval(
    name="dm-control-manipulation",
    make_env=DMControlManipulation,
    plan=seeded_per_task(TASKS, timeout_s=TIME_LIMIT_S),
    control_hz=CONTROL_HZ,
    hold=hold,
    hold_name="joints still",
    requires=("dm_control",),
    extra="dm-control",
    packages=("dm-control", "mujoco"),
    metadata={
        "observation": "each task's features (dm_control's observables, by their names, flat)",
        "placement": "seed s: the task loaded afresh, manipulation.load(name, seed=s), and reset",
        keys.SUCCESS: "a step rewarded 1 (the task's reward within its tolerance bounds)",
        "max_steps": int(TIME_LIMIT_S * CONTROL_HZ),
    },
)
