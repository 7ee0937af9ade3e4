"""Scripted experts for ManiSkill's PickCube, PushCube and StackCube, from the state observations'
named entries (the tcp's pose `extra/tcp_pose`, the cubes' `extra/obj_pose`, `extra/cubeA_pose`,
`extra/cubeB_pose`, the goal `extra/goal_pos`): waypoints, one pd_ee_delta_pos action a call.

ManiSkill's own experts are its motion-planning solutions (mani_skill/examples/motionplanning):
they plan with the simulator's robot model and step the env themselves in joint-position control,
so they are not policies of observations and do not ship here. PegInsertionSide (an insertion to
millimetres) and PushT have no expert."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import ChunkSource, Observation, SessionContext, one_action_a_call

GAIN = 10.0  # action units per metre of error: pd_ee_delta_pos moves 0.1 m for 1
OPEN, CLOSE = 1.0, -1.0
HALF = 0.02  # a cube's half size
ABOVE = 0.06  # m above a cube before going down to it
CLOSING_STEPS = 8
TCP, OBJECT, GOAL = "extra/tcp_pose", "extra/obj_pose", "extra/goal_pos"
CUBE_A, CUBE_B = "extra/cubeA_pose", "extra/cubeB_pose"


@dataclass
class _Rollout:
    phase: int = 0  # the index of the waypoint the gripper heads for
    closing: int = 0
    held: dict[str, np.ndarray] = field(default_factory=dict)


# A waypoint: where the tcp heads (from the observation and what the rollout holds), the gripper's
# command on the way, and how near is there.
Waypoint = tuple[Callable[[Observation, _Rollout], np.ndarray], float, float]


def _at(key: str, offset: tuple[float, float, float] = (0.0, 0.0, 0.0)):
    return lambda obs, held: np.asarray(obs[key][:3], dtype=float) + offset


def _above_grasp(height: float):
    """Over where the gripper last held still (where it grasped), `height` up."""
    return lambda obs, held: held.held["grasped"] + (0.0, 0.0, height)


def _pushed(obs: Observation, held: _Rollout) -> tuple[np.ndarray, np.ndarray]:
    """The cube's position and the unit direction from it to the goal, in the table's plane."""
    cube = np.asarray(obs[OBJECT][:3], dtype=float)
    way = np.asarray(obs[GOAL][:3], dtype=float) - cube
    way[2] = 0.0
    return cube, way / max(float(np.linalg.norm(way)), 1e-6)


def _behind(height: float):
    def where(obs: Observation, held: _Rollout) -> np.ndarray:
        cube, way = _pushed(obs, held)
        return cube - 0.05 * way + (0.0, 0.0, height)

    return where


def _through(obs: Observation, held: _Rollout) -> np.ndarray:
    cube, way = _pushed(obs, held)
    goal = np.asarray(obs[GOAL][:3], dtype=float)
    return np.array([*(goal - 0.03 * way)[:2], cube[2]])


PICK_CUBE: list[Waypoint] = [
    (_at(OBJECT, (0, 0, ABOVE)), OPEN, 0.01),
    (_at(OBJECT), OPEN, 0.005),
    (None, CLOSE, 0.0),  # close where it is
    (_at(GOAL), CLOSE, 0.0),  # and stay there
]
PUSH_CUBE: list[Waypoint] = [
    (_behind(ABOVE), CLOSE, 0.01),
    (_behind(0.0), CLOSE, 0.005),
    (_through, CLOSE, 0.0),
]
STACK_CUBE: list[Waypoint] = [
    (_at(CUBE_A, (0, 0, ABOVE)), OPEN, 0.01),
    (_at(CUBE_A), OPEN, 0.005),
    (None, CLOSE, 0.0),
    (_above_grasp(0.08), CLOSE, 0.01),
    (_at(CUBE_B, (0, 0, 0.08)), CLOSE, 0.005),
    (_at(CUBE_B, (0, 0, 2 * HALF + 0.005)), CLOSE, 0.004),
    (None, OPEN, 0.0),  # let go where it is
    (_at(CUBE_B, (0, 0, 0.1)), OPEN, 0.0),
]


class Waypoints:
    """Heads for each waypoint in turn; at a waypoint of no place (None), holds still for
    CLOSING_STEPS with its gripper command, then goes on."""

    name = "scripted"

    def __init__(self, task: str, waypoints: list[Waypoint]) -> None:
        self.task, self.waypoints = task, waypoints

    def open(self, context: SessionContext) -> ChunkSource:
        return one_action_a_call(functools.partial(self._act, _Rollout()), context.control_hz)

    def _act(self, state: _Rollout, obs: Observation) -> np.ndarray:
        tcp = np.asarray(obs[TCP][:3], dtype=float)
        where, grip, within = self.waypoints[state.phase]
        last = state.phase == len(self.waypoints) - 1
        if where is None:
            goal = state.held.setdefault("still", tcp.copy())
            state.closing += 1
            if state.closing >= CLOSING_STEPS:
                state.phase, state.closing = state.phase + 1, 0
                state.held["grasped"] = state.held.pop("still")
        else:
            goal = where(obs, state)
            if not last and float(np.linalg.norm(goal - tcp)) < within:
                state.phase += 1
        action = np.zeros(4)
        action[:3] = np.clip(GAIN * (goal - tcp), -1.0, 1.0)
        action[3] = grip
        return action

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "expert": f"policybench's ManiSkill {self.task}"}


EXPERTS = {
    "pick_cube": lambda: Waypoints("pick_cube", PICK_CUBE),
    "push_cube": lambda: Waypoints("push_cube", PUSH_CUBE),
    "stack_cube": lambda: Waypoints("stack_cube", STACK_CUBE),
}
