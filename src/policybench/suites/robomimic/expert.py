"""Scripted experts for robomimic's Lift and PickPlaceCan, from the observations robomimic gives
(the object's position in `object`, the gripper's in `robot0_eef_pos`): above the object, down,
close, up, and for the can over its bin and open. One OSC_POSE delta a call, the orientation
kept (the gripper points down from the start; the cube and the can grasp from any yaw).
NutAssemblySquare (the nut's handle and the peg), TwoArmTransport (a hand-over between two arms)
and ToolHang (an insertion to millimetres) have none."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import ChunkSource, Observation, SessionContext, one_action_a_call

GAIN = 10.0  # action units per metre of error: OSC_POSE moves 0.05 m for 1
ABOVE = 0.08  # m above the object before going down to it
GRASP_ABOVE = 0.005  # m the gripper closes above the object's centre (the can's bin floor stops
# the fingers about 8 mm above the can's centre)
CARRY = 1.0  # m, the height the object is carried at (the table is at 0.8)
CLOSING_STEPS = 12  # steps the gripper closes before lifting
# PickPlaceCan's bin for the can: robosuite 1.4.1's target_bin_placements[3] (the can is object 3;
# bin2 at (0.1, 0.28, 0.8), its quarter at +x +y); the can is let go 0.12 m above its floor.
CAN_BIN = np.array([0.1975, 0.4025, 0.8])
RELEASE_ABOVE = 0.12
OPEN, CLOSE = -1.0, 1.0


@dataclass
class _Rollout:
    phase: str = "above"
    closing: int = 0
    grasped_at: np.ndarray | None = None


class PickAndPlace:
    """Lift's expert (`place=None`: the cube lifted where it lies) or PickPlaceCan's (`place`: the
    bin's floor under the object's drop point)."""

    name = "scripted"

    def __init__(self, place: np.ndarray | None = None) -> None:
        self.place = place

    def open(self, context: SessionContext) -> ChunkSource:
        return one_action_a_call(functools.partial(self._act, _Rollout()), context.control_hz)

    def _act(self, state: _Rollout, obs: Observation) -> np.ndarray:
        eef = np.asarray(obs["robot0_eef_pos"], dtype=float)
        target = np.asarray(obs["object"][:3], dtype=float)
        goal, grip = self._goal(state, eef, target)
        action = np.zeros(7)
        action[:3] = np.clip(GAIN * (goal - eef), -1.0, 1.0)
        action[6] = grip
        return action

    def _goal(
        self, state: _Rollout, eef: np.ndarray, target: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """Where the gripper heads in its phase, and the gripper command; moves to the next phase
        once there."""
        if state.phase == "above":
            goal = target + np.array([0.0, 0.0, ABOVE])
            if _near(eef, goal, 0.01):
                state.phase = "down"
            return goal, OPEN
        if state.phase == "down":
            grasp = target + np.array([0.0, 0.0, GRASP_ABOVE])
            if _near(eef, grasp, 0.01):
                state.phase, state.grasped_at = "close", eef.copy()
            return grasp, OPEN
        if state.phase == "close":
            state.closing += 1
            if state.closing >= CLOSING_STEPS:
                state.phase = "up"
            return state.grasped_at, CLOSE
        up = np.array([*state.grasped_at[:2], CARRY])
        if state.phase == "up" and (self.place is None or not _near(eef, up, 0.02)):
            return up, CLOSE
        over = np.array([*self.place[:2], CARRY])
        if state.phase == "up":
            state.phase = "over"
        if state.phase == "over":
            # The bin's quarter is 0.2 by 0.25 m: within a few cm of its middle is in it (the arm
            # does not quite reach the middle at the carrying height).
            if _near(eef[:2], over[:2], 0.04):
                state.phase = "lower"
            return over, CLOSE
        release = np.array([*eef[:2], self.place[2] + RELEASE_ABOVE])
        if state.phase == "lower" and abs(eef[2] - release[2]) > 0.02:
            return release, CLOSE
        state.phase = "open"
        return release, OPEN

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "expert": "policybench's robomimic pick-and-place"}


def _near(a: np.ndarray, b: np.ndarray, within: float) -> bool:
    return float(np.linalg.norm(a - b)) < within


EXPERT_READS = ("robot0_eef_pos", "object")  # what PickAndPlace reads of an observation


def lift_expert() -> PickAndPlace:
    return PickAndPlace()


def can_expert() -> PickAndPlace:
    return PickAndPlace(CAN_BIN)
