"""PushT (gym-pusht): push a T-shaped block onto a target pose, seen as a 96x96 image plus the
agent's position. Its `scripted` policy is a pushing heuristic that works from the pixels."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.policy.base import Observation
from policybench.spec import Eval, seeded_per_task

ENV_ID = "gym_pusht/PushT-v0"
CONTROL_HZ = 10.0  # gym-pusht's control_hz
MAX_STEPS = 300  # gym-pusht's registered episode limit
TASK = "push-t"
INSTRUCTION = "push the T-shaped block onto the T-shaped target"


class PushTObservation(gym.ObservationWrapper):
    """Names gym-pusht's `pixels` and `agent_pos` with the shared `image` and `state` keys."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        spaces = env.observation_space
        self.observation_space = gym.spaces.Dict(
            {keys.IMAGE: spaces["pixels"], keys.STATE: spaces["agent_pos"]}
        )

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {keys.IMAGE: observation["pixels"], keys.STATE: observation["agent_pos"]}


def make_env(task: str) -> gym.Env:
    import gym_pusht  # noqa: F401 - registers the env id

    return PushTObservation(gym.make(ENV_ID, obs_type="pixels_agent_pos", disable_env_checker=True))


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Keep the last target position; before the first command, target where the agent is."""
    return np.asarray(obs[keys.STATE], dtype=np.float64) if last is None else last


def pusht(scripted: Any = None) -> Eval:
    return Eval(
        name="pusht",
        make_env=make_env,
        plan=seeded_per_task({TASK: INSTRUCTION}, timeout_s=MAX_STEPS / CONTROL_HZ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="hold last target",
        requires=("gym_pusht",),
        extra="pusht",
        packages=("gym-pusht", "pymunk", "gymnasium"),
        scripted=scripted,
        metadata={"observation": "image 96x96 + agent_pos"},
    )


PUSHT = pusht()
