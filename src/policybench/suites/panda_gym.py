"""panda-gym's tasks (panda-gym 3.0.7, MIT; PyBullet 3.2.7, in this process): a Franka Panda
reaching, pushing, sliding, picking and placing, and stacking, goal-conditioned, as panda-gym's own
loop runs them: `gym.make("Panda<Task>-v3")` (sparse reward, end-effector control), `reset(seed=s)`
(on an env made afresh: PyBullet carries its contacts from one episode into the next, so a reused
env stages another scene than a new one), `step` until terminated (panda-gym ends an episode at its
goal) or its time limit (50 steps; Stack 100), 25 Hz (PyBullet's 2 ms, 20 substeps a step), success
the step info's `is_success` (the object, or the hand, within 5 cm of the goal).

Actions: the hand moved by up to 5 cm in x, y and z (and, but for Reach, Push and Slide, the fingers
opened or closed), in [-1, 1]. Observations: `state`, panda-gym's `observation` (the hand's position
and velocity, the fingers, the object's pose and velocities), with `achieved_goal` and
`desired_goal` beside it. Left out: PandaFlip, whose object's texture PyBullet 3.2.7 does not load
(`Error loading texture`).

Expert: Reach's, from panda-gym's README (the hand moved toward the goal, five times the error); the
other tasks have no built-in expert."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.policy.base import ChunkSource, Observation, SessionContext, one_action_a_call
from policybench.spec import Eval, seeded_per_task

CONTROL_HZ = 25.0  # PyBullet's timestep of 2 ms, 20 substeps a step
OBSERVATION, ACHIEVED, DESIRED = "observation", "achieved_goal", "desired_goal"
TASKS = {  # panda-gym's task -> (instruction, registered episode length, action size)
    "Reach": ("move the hand to the target", 50, 3),
    "Push": ("push the cube to the target", 50, 3),
    "Slide": ("slide the puck to the target", 50, 3),
    "PickAndPlace": ("pick up the cube and place it at the target", 50, 4),
    "Stack": ("stack the two cubes at the targets", 100, 4),
}


class PandaGym(gym.Env):
    """One panda-gym task, its observation as `state` with the goals beside it."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_HZ}

    def __init__(self, task: str) -> None:
        import panda_gym  # noqa: F401 (registers the envs)

        if task not in TASKS:
            raise ValueError(f"panda-gym has no task {task!r}; known: {list(TASKS)}")
        self.task = task
        self._env = gym.make(f"Panda{task}-v3")
        self.action_space = self._env.action_space
        inner = self._env.observation_space
        self.observation_space = gym.spaces.Dict(
            {keys.STATE: inner[OBSERVATION], ACHIEVED: inner[ACHIEVED], DESIRED: inner[DESIRED]}
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:  # PyBullet keeps contacts from one episode into the next: afresh
            self._env.close()
            self._env = gym.make(f"Panda{self.task}-v3")
        obs, info = self._env.reset(seed=seed)
        return _ours(obs), info

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self._env.step(action)
        return _ours(obs), reward, terminated, truncated, info

    def close(self) -> None:
        self._env.close()


def _ours(obs: dict[str, np.ndarray]) -> Observation:
    return {keys.STATE: obs[OBSERVATION], ACHIEVED: obs[ACHIEVED], DESIRED: obs[DESIRED]}


def hold(size: int, last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Stay: the hand unmoved (and the fingers as they are)."""
    return np.zeros(size, np.float32)


class ReachExpert:
    """panda-gym's README policy for PandaReach: the hand moved toward the goal by five times
    the error (the env clips the action to [-1, 1])."""

    name = "scripted"

    def open(self, context: SessionContext) -> ChunkSource:
        def act(obs: Observation) -> np.ndarray:
            hand = np.asarray(obs[keys.STATE])[:3]
            return (5.0 * (np.asarray(obs[DESIRED])[:3] - hand)).astype(np.float32)

        return one_action_a_call(act, context.control_hz)

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "expert": "panda-gym README (PandaReach)"}


def panda_gym(name: str, tasks: tuple[str, ...], scripted: bool = False) -> Eval:
    size = TASKS[tasks[0]][2]
    return Eval(
        name=name,
        make_env=PandaGym,
        plan=seeded_per_task(
            {task: TASKS[task][0] for task in tasks},
            timeout_s=max(TASKS[task][1] for task in tasks) / CONTROL_HZ,
        ),
        control_hz=CONTROL_HZ,
        hold=functools.partial(hold, size),
        hold_name="hand unmoved",
        requires=("panda_gym",),
        extra="panda-gym",
        packages=("panda-gym", "pybullet", "gymnasium"),
        scripted=ReachExpert if scripted else None,
        expert_reads=(keys.STATE, DESIRED),
        metadata={
            "observation": "`state` (panda-gym's observation), achieved_goal, desired_goal",
            "placement": "seed s: reset(seed=s) (the goal and the object drawn from it)",
            keys.SUCCESS: "the step info's `is_success` (the env ends the episode there)",
            "max_steps": {task: TASKS[task][1] for task in tasks},
        },
    )


# By action size: the hand alone (3-d), or with its fingers (4-d).
PANDA_GYM_REACH = panda_gym("panda-gym-reach", ("Reach",), scripted=True)
PANDA_GYM_PUSH = panda_gym("panda-gym-push", ("Push", "Slide"))
PANDA_GYM_PICK = panda_gym("panda-gym-pick", ("PickAndPlace", "Stack"))
