"""Small, real gymnasium envs for the library's own tests (fast, deterministic, no simulator)."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.spec import Eval, seeded_per_task


class PointEnv(gym.Env):
    """A point on a line moves by its action each step; success when it is within 0.05 of a goal
    drawn from the reset seed. `raise_at_step` makes step N raise, as a broken simulator would."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        raise_at_step: int | None = None,
        raise_on_reset: bool = False,
        seed_that_raises: int | None = None,
        seed_that_dies: int | None = None,
    ) -> None:
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float64)
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float64)
        self.raise_at_step = raise_at_step
        # Only the rollout of this seed raises at raise_at_step (None: every rollout's); with
        # seed_that_dies, that seed's rollout ends its whole process there instead, as a
        # segfault would, and no other raises.
        self.seed_that_raises = seed_that_raises
        self.seed_that_dies = seed_that_dies
        self._seed = None
        self.raise_on_reset = raise_on_reset
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._seed = seed
        if self.raise_on_reset:
            raise RuntimeError("simulated reset failure")
        self.resets += 1
        self._steps = 0
        self._pos = 0.0
        self._goal = float(self.np_random.uniform(2.0, 4.0))
        return self._obs(), {}

    def step(self, action):
        self._steps += 1
        if self.raise_at_step is not None and self._steps >= self.raise_at_step:
            if self.seed_that_dies is not None:
                if self._seed == self.seed_that_dies:
                    os._exit(9)
            elif self.seed_that_raises in (None, self._seed):
                raise RuntimeError(f"simulated physics blow-up at step {self._steps}")
        self._pos += float(np.clip(action[0], -1.0, 1.0))
        distance = abs(self._pos - self._goal)
        return self._obs(), -distance, False, False, {"is_success": distance < 0.05}

    def _obs(self) -> np.ndarray:
        return np.array([self._pos, self._goal])


def make_point(task: str, **kwargs: Any) -> PointEnv:
    """A PointEnv as an env server's entry makes it (`tests.envs:make_point`)."""
    return PointEnv(**kwargs)


def hold(last, obs):
    return np.zeros(1)


def point_eval(
    name: str = "point",
    tasks: dict[str, str] | None = None,
    timeout_s: float = 2.0,
    control_hz: float = 10.0,
    scripted=None,
    **env_kwargs: Any,
) -> Eval:
    return Eval(
        name=name,
        make_env=lambda task: PointEnv(**env_kwargs),
        plan=seeded_per_task(tasks or {"reach": "reach the goal"}, timeout_s=timeout_s),
        control_hz=control_hz,
        hold=hold,
        hold_name="zero",
        scripted=scripted,
    )


class GreedyPointModel:
    """Steps straight at the goal it sees in the observation: solves PointEnv."""

    name = "greedy"

    def __init__(self, horizon: int = 1) -> None:
        self.horizon = horizon

    def open(self, context):
        from policybench.policy.base import Chunk

        def predict(obs):
            pos, goal = obs[keys.STATE]
            step = np.clip(goal - pos, -0.5, 0.5)
            return Chunk(np.full((self.horizon, 1), step), context.control_hz)

        return predict

    def describe(self):
        return {keys.POLICY_NAME: self.name}
