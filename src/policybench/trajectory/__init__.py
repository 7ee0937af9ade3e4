"""Trajectory specs: properties of a rollout's signals in signal temporal logic, each scored by
a robustness margin (stl), over the signals a rollout has (signals); the common ones (library)."""

from policybench.trajectory.library import (
    Progress,
    TrajectorySpec,
    action_rate_limit,
    gripper_closed_on_nothing,
    held_at_most,
    no_progress,
    velocity_limit,
    workspace,
)
from policybench.trajectory.stl import (
    FOREVER,
    Always,
    And,
    Eventually,
    Formula,
    Margin,
    Not,
    Or,
    Signal,
    Until,
)

__all__ = [
    "FOREVER",
    "Always",
    "And",
    "Eventually",
    "Formula",
    "Margin",
    "Not",
    "Or",
    "Progress",
    "Signal",
    "TrajectorySpec",
    "Until",
    "action_rate_limit",
    "gripper_closed_on_nothing",
    "held_at_most",
    "no_progress",
    "velocity_limit",
    "workspace",
]
