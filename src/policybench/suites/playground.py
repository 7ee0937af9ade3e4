"""MuJoCo Playground's manipulation tasks through EnvPool (envpool 1.2.5, Apache-2.0: Playground's
tasks ported to C++ on MuJoCo, their models in the `envpool-assets*` wheels, where Playground
itself clones the MuJoCo Menagerie from GitHub at first use).

The protocol is EnvPool's own loop: `envpool.make_gymnasium(task, num_envs=1, seed=s)`,
`reset()`, `step(action)` (a batch of one) until terminated or truncated, each task's registered
episode length and control timestep. Here each rollout makes its task afresh with its seed (EnvPool
seeds an env once, when made). Evals group the tasks by rate:

- `playground-panda`: PandaPickCube, PandaPickCubeOrientation and PandaOpenCabinet, a Franka
  Panda, 50 Hz (ctrl_dt 0.02 s), 150 steps, 8-d actions in [-1, 1] (joint targets moved by up to
  0.04 rad, and the gripper); success the step info's `reward_success` term fired (the box within
  `success_threshold`, 5 cm, of its target).
- `playground-robotiq-push-cube`: PandaRobotiqPushCube, 200 Hz (ctrl_dt 0.005 s), 3000 steps,
  7-d actions, observation and action delays and noise as Playground draws them; success the
  step info's `success`.
- `playground-leap-cube-reorient`: LeapCubeReorient, a LEAP hand turning a cube to a goal
  orientation, 20 Hz (ctrl_dt 0.05 s), 1000 steps, 16-d actions, `state` and `privileged_state`;
  success the step info's `success` (the cube within 0.1 rad of the goal), the first time.

Left out: AlohaHandOver and AlohaSinglePegInsertion report rewards and no success, and
LeapCubeRotateZAxis is a rotation speed to keep up, not a goal. No built-in expert."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.policy.base import Observation
from policybench.spec import Eval, seeded_per_task

PRIVILEGED_STATE = "privileged_state"  # LeapCubeReorient's critic observation, as EnvPool names it


@dataclass(frozen=True)
class Group:
    """Tasks of one control rate: their registered length, action size and success key."""

    name: str
    tasks: dict[str, str]  # EnvPool task name -> instruction
    control_hz: float
    max_steps: int
    actions: int
    success: str  # the step info's key that says the task succeeded (above zero)


GROUPS = (  # envpool/mujoco/playground/registration.py's tasks, lengths and ctrl_dt
    Group(
        "playground-panda",
        {
            "PandaPickCube": "pick up the cube and bring it to the target",
            "PandaPickCubeOrientation": "pick up the cube and bring it to the target pose",
            "PandaOpenCabinet": "open the cabinet",
        },
        50.0,
        150,
        8,
        "reward_success",
    ),
    Group(
        "playground-robotiq-push-cube",
        {"PandaRobotiqPushCube": "push the cube to the target"},
        200.0,
        3000,
        7,
        keys.SUCCESS,
    ),
    Group(
        "playground-leap-cube-reorient",
        {"LeapCubeReorient": "turn the cube to the goal orientation"},
        20.0,
        1000,
        16,
        keys.SUCCESS,
    ),
)


class Playground(gym.Env):
    """One Playground task through EnvPool, unbatched; a reset with a seed makes the task
    afresh with it."""

    metadata = {"render_modes": []}  # EnvPool renders nothing here

    def __init__(self, group: Group, task: str) -> None:
        if task not in group.tasks:
            raise ValueError(f"{group.name} has no task {task!r}; known: {list(group.tasks)}")
        self.task, self.group = task, group
        self._env = _made(task, None)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (group.actions,), np.float64)
        inner = self._env.observation_space
        spaces = inner.spaces if isinstance(inner, gym.spaces.Dict) else {keys.STATE: inner}
        self.observation_space = gym.spaces.Dict(dict(spaces))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._env.close()
            self._env = _made(self.task, seed)
        obs, _ = self._env.reset()
        return self._unbatched(obs), {}

    def step(self, action: np.ndarray):
        batch = np.asarray(action, dtype=np.float64)[None]
        obs, reward, terminated, truncated, info = self._env.step(batch)
        said = float(np.asarray(info[self.group.success]).reshape(-1)[0])
        return (
            self._unbatched(obs),
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            {keys.SUCCESS: said > 0},
        )

    @staticmethod
    def _unbatched(obs: Any) -> Observation:
        if isinstance(obs, dict):
            return {name: value[0] for name, value in obs.items()}
        return {keys.STATE: obs[0]}

    def close(self) -> None:
        self._env.close()


def _made(task: str, seed: int | None) -> Any:
    import envpool

    return envpool.make_gymnasium(f"{task}-v1", num_envs=1, seed=0 if seed is None else seed)


def hold(size: int, last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Zero: the targets where they are (Playground's actions move them)."""
    return np.zeros(size)


def playground(group: Group) -> Eval:
    return Eval(
        name=group.name,
        make_env=functools.partial(Playground, group),
        plan=seeded_per_task(group.tasks, timeout_s=group.max_steps / group.control_hz),
        control_hz=group.control_hz,
        hold=functools.partial(hold, group.actions),
        hold_name="targets kept",
        requires=("envpool",),
        extra="playground",
        packages=("envpool", "envpool-assets", "envpool-assets-mujoco-large"),
        metadata={
            "observation": "EnvPool's `state` (LeapCubeReorient: and `privileged_state`)",
            "placement": "seed s: envpool.make_gymnasium(task, num_envs=1, seed=s), reset",
            keys.SUCCESS: f"the step info's `{group.success}` above zero",
            "max_steps": group.max_steps,
        },
    )


PLAYGROUND_PANDA, PLAYGROUND_ROBOTIQ_PUSH_CUBE, PLAYGROUND_LEAP_CUBE_REORIENT = map(
    playground, GROUPS
)
