"""OGBench's manipulation environments (ogbench 1.2.2, MIT; its models and meshes ship in the
wheel): a UR5e with a Robotiq gripper on a table, cubes (`cube-single`, `cube-double`), a scene of
cube, drawer, window and locked buttons (`scene`), and lights-out button puzzles (`puzzle-3x3`).
Each has the five evaluation tasks its paper reports, chosen at reset with `options={"task_id":
k}`, and is goal-conditioned: the policy sees its observation and the goal's.

The protocol is OGBench's own evaluation loop (`impls/utils/evaluation.py`): `gym.make(env)`,
`reset(options=dict(task_id=k))`, the goal from the reset's info, the policy's action clipped to
[-1, 1], stepped until `terminated or truncated` (the env ends an episode at its goal, and its
registered time limit: 200, 500, 750 and 500 steps), success the last step's `info["success"]`.
20 Hz (its control timestep of 0.05 s). Actions: 5-d in [-1, 1], the effector moved by up to
5 cm in x, y, z, its yaw by up to 0.3 rad, the gripper opened or closed.

Seeds. OGBench's loop resets without a seed; here rollout s resets with `seed=s`, which fixes
the arm's start and the objects' jitter. One draw the seed does not reach in OGBench's env: the
goal observation is taken after a few steps (two; five for the puzzle) of actions drawn from a
fresh, unseeded action space, so the goal's arm part differs from reset to reset there; here
those actions are drawn from a generator seeded with the rollout's seed, so a seed stages one
goal.

Expert: OGBench's Markov oracle for cubes (`manipspace/oracles/markov/cube_markov.py`, the one
its datasets were collected with), driven from the observation and goal alone: each cube's
pose and its goal are read off them, and the oracle carries the cubes one at a time, lowest
goal first. The scene and puzzle Evals have no built-in expert here."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.policy.base import ChunkSource, Observation, SessionContext, one_action_a_call
from policybench.spec import Eval, seeded_per_task

CONTROL_HZ = 20.0  # ManipSpaceEnv's control_timestep of 0.05 s
GOAL = "goal"  # the goal's observation, as the reset's info gives it
CENTER = np.array([0.425, 0.0, 0.0])  # ManipSpaceEnv.compute_observation's xyz_center
XYZ_SCALE, GRIPPER_SCALE = 10.0, 3.0  # its xyz_scaler and gripper_scaler
PROPRIO = 19  # joint positions and velocities (12), effector (3), yaw (2), gripper (2)
CUBE = 9  # a cube's part of the observation: position (3), quaternion (4), yaw (2)


@dataclass(frozen=True)
class Family:
    """One OGBench environment: its id, its registered time limit, its tasks in order."""

    env_id: str
    max_steps: int
    tasks: tuple[str, ...]
    cubes: int = 0  # for the cube expert; 0: no built-in expert

    @property
    def name(self) -> str:
        return self.env_id.removesuffix("-v0")


_REGISTERED = (  # ogbench/manipspace/__init__.py's registrations, and each env's set_tasks()
    Family(
        "cube-single-v0",
        200,
        (
            "task1_horizontal",
            "task2_vertical1",
            "task3_vertical2",
            "task4_diagonal1",
            "task5_diagonal2",
        ),
        cubes=1,
    ),
    Family(
        "cube-double-v0",
        500,
        ("task1_single_pnp", "task2_double_pnp1", "task3_double_pnp2", "task4_swap", "task5_stack"),
        cubes=2,
    ),
    Family(
        "scene-v0",
        750,
        (
            "task1_open",
            "task2_unlock_and_lock",
            "task3_rearrange_medium",
            "task4_put_in_drawer",
            "task5_rearrange_hard",
        ),
    ),
    Family("puzzle-3x3-v0", 500, ("task1", "task2", "task3", "task4", "task5")),
)
FAMILIES = {family.name: family for family in _REGISTERED}


def instruction(family: str, task: str) -> str:
    """OGBench's tasks have no words: the instruction names the task (goals are observations)."""
    return f"reach the goal of OGBench {family} {task}"


class OGBench(gym.Env):
    """One OGBench environment on one of its evaluation tasks; the observation is the env's with
    the goal's beside it."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_HZ}

    def __init__(self, family: str, task: str) -> None:
        import ogbench  # noqa: F401 (registers the envs)

        spec = FAMILIES[family]
        if task not in spec.tasks:
            raise ValueError(f"OGBench {family} has no task {task!r}; known: {list(spec.tasks)}")
        self.task_id = spec.tasks.index(task) + 1
        self._env = gym.make(spec.env_id)
        _draw_settling_from_a_seed(self._env.unwrapped)
        self.action_space = _actions()
        state = self._env.observation_space
        self.observation_space = gym.spaces.Dict({keys.STATE: state, GOAL: state})
        self._goal: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._env.unwrapped.settling = _actions(seed)
        obs, info = self._env.reset(seed=seed, options={"task_id": self.task_id})
        self._goal = info[GOAL]
        return {keys.STATE: obs, GOAL: self._goal}, info

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self._env.step(np.clip(action, -1, 1))
        return {keys.STATE: obs, GOAL: self._goal}, reward, terminated, truncated, info

    def render(self) -> np.ndarray:
        return self._env.render()

    def close(self) -> None:
        self._env.close()


def _draw_settling_from_a_seed(env: Any) -> None:
    """Makes the env's `action_space` (a new, unseeded space at each use, which its reset samples
    to settle the goal scene) the space `env.settling`, which each reset here seeds."""
    base = type(env)
    env.settling = _actions()
    env.__class__ = type(base.__name__, (base,), {"action_space": property(_settling)})


def _settling(env: Any) -> gym.spaces.Box:
    return env.settling


def _actions(seed: int | None = None) -> gym.spaces.Box:
    """The env's action space (5-d, [-1, 1]), drawn from a generator seeded with `seed`."""
    bound = np.ones(5, np.float32)
    return gym.spaces.Box(-bound, bound, dtype=np.float32, seed=seed)


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Stay: the effector unmoved, the gripper as it is."""
    return np.zeros(5, np.float32)


def poses(observation: np.ndarray, cubes: int) -> dict[str, Any]:
    """What the cube oracle reads from an observation (the env's info in data collection): the
    effector's position, yaw, opening and contact, and each cube's position and yaw, undoing
    compute_observation's centring and scaling."""
    ob = np.asarray(observation, dtype=np.float64)
    found = {
        "proprio/effector_pos": ob[12:15] / XYZ_SCALE + CENTER,
        "proprio/effector_yaw": np.array([np.arctan2(ob[16], ob[15])]),
        "proprio/gripper_opening": np.array([ob[17] / GRIPPER_SCALE]),
        "proprio/gripper_contact": np.array([ob[18]]),
    }
    for i in range(cubes):
        part = ob[PROPRIO + CUBE * i : PROPRIO + CUBE * (i + 1)]
        found[f"privileged/block_{i}_pos"] = part[:3] / XYZ_SCALE + CENTER
        found[f"privileged/block_{i}_yaw"] = np.array([np.arctan2(part[8], part[7])])
    return found


class CubeExpert:
    """OGBench's cube oracle, one cube at a time: the cube whose goal lies lowest among those
    not at their goals, kept until the oracle has set it down and let go."""

    name = "scripted"
    AT_GOAL = 0.04  # cube_env._compute_successes' distance
    SET_DOWN = 0.02  # the oracle's own target_pos_aligned

    def __init__(self, family: str) -> None:
        self.family = family
        self.cubes = FAMILIES[family].cubes

    def open(self, context: SessionContext) -> ChunkSource:
        from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle

        bounds = np.asarray([[0.25, -0.35, 0.20], [0.6, 0.35, 0.35]])  # _arm_sampling_bounds
        env = type("Bounds", (), {"_arm_sampling_bounds": bounds})
        oracle = CubeMarkovOracle(env=type("Env", (), {"unwrapped": env}))
        kept = np.random.get_state()  # its reset draws where to rest from numpy's generator
        np.random.seed(0)
        try:
            oracle.reset(None, None)
        finally:
            np.random.set_state(kept)
        carrying: list[int | None] = [None]

        def act(obs: Observation) -> np.ndarray:
            now, goal = poses(obs[keys.STATE], self.cubes), poses(obs[GOAL], self.cubes)
            carrying[0] = self._cube(now, goal, carrying[0])
            i = carrying[0]
            info = {
                **now,
                "privileged/target_block": i,
                "privileged/target_block_pos": goal[f"privileged/block_{i}_pos"],
                "privileged/target_block_yaw": goal[f"privileged/block_{i}_yaw"],
            }
            return oracle.select_action(None, info).astype(np.float32)

        return one_action_a_call(act, context.control_hz)

    def _cube(self, now: dict[str, Any], goal: dict[str, Any], carried: int | None) -> int:
        def off(i: int) -> float:
            at = now[f"privileged/block_{i}_pos"] - goal[f"privileged/block_{i}_pos"]
            return float(np.linalg.norm(at))

        let_go = now["proprio/gripper_contact"][0] < 0.1
        if carried is not None and not (off(carried) <= self.SET_DOWN and let_go):
            return carried
        waiting = [i for i in range(self.cubes) if off(i) > self.AT_GOAL] or list(range(self.cubes))
        return min(waiting, key=lambda i: (goal[f"privileged/block_{i}_pos"][2], i))

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "expert": "ogbench CubeMarkovOracle"}


def ogbench(family: str) -> Eval:
    """One OGBench environment's five evaluation tasks as an Eval (`ogbench-<family>`)."""
    spec = FAMILIES[family]
    return Eval(
        name=f"ogbench-{family}",
        make_env=functools.partial(OGBench, family),
        plan=seeded_per_task(
            {task: instruction(family, task) for task in spec.tasks},
            timeout_s=spec.max_steps / CONTROL_HZ,
        ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="effector unmoved, gripper kept",
        requires=("ogbench",),
        extra="ogbench",
        packages=("ogbench", "mujoco", "dm-control", "gymnasium"),
        scripted=(lambda: CubeExpert(family)) if spec.cubes else None,
        expert_reads=(keys.STATE, GOAL),
        metadata={
            "observation": f"state {family} ({spec.env_id}) and the goal's, beside it",
            "placement": "seed s: reset(seed=s, options={'task_id': k}); the goal's settling "
            "actions drawn from a space seeded with s",
            keys.SUCCESS: "the step info's `success` (the env ends the episode at its goal)",
            "max_steps": spec.max_steps,
        },
    )


OGBENCH_CUBE_SINGLE, OGBENCH_CUBE_DOUBLE, OGBENCH_SCENE, OGBENCH_PUZZLE_3X3 = map(ogbench, FAMILIES)
