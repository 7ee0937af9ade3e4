"""A live env for one Eval in one process: stages scenes, steps actions, reads success.
Reused across the Eval's rollouts; an env that raised is discarded and rebuilt on next use."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from policybench import keys

if TYPE_CHECKING:
    import gymnasium as gym

    from policybench.policy.base import Observation
    from policybench.spec import Eval, Scene

SUCCESS_INFO_KEYS = ("success", "is_success", "task_success")


class Transition(NamedTuple):
    obs: Observation
    reward: float
    success: bool
    terminated: bool
    truncated: bool


class World:
    def __init__(self, eval: Eval) -> None:
        self.eval = eval
        self._envs: dict[str, gym.Env] = {}
        self._env: gym.Env | None = None
        self._task: str | None = None
        self._packages: dict[str, str] | None = None

    def env_for(self, task: str) -> gym.Env:
        """The live env of `task`, built on first use."""
        env = self._envs.get(task)
        if env is None:
            env = self._envs[task] = self.eval.make_env(task)
        return env

    def reset(self, scene: Scene) -> Observation:
        """Stages `scene` on its task's env: resets it with the scene's seed and fields."""
        env = self._env = self.env_for(scene.task)
        self._task = scene.task
        obs, _ = env.reset(seed=scene.seed, options=dict(scene.fields) or None)
        return as_observation(obs)

    def step(self, action: np.ndarray) -> Transition:
        assert self._env is not None, "World.step before World.reset"
        obs, reward, terminated, truncated, info = self._env.step(action)
        obs = {keys.STATE: obs} if type(obs) is np.ndarray else as_observation(obs)
        return Transition(obs, float(reward), success_of(info), terminated, truncated)

    @property
    def action_space(self) -> gym.spaces.Box:
        assert self._env is not None, "World.action_space before World.reset"
        return self._env.action_space

    def discard(self) -> None:
        """Drops the current env after a fault; the next reset of its task builds a new one."""
        if self._task is not None:
            env = self._envs.pop(self._task, None)
            self._env = self._task = None
            if env is not None:
                # A broken env may fail to close as well; it is dropped either way.
                with contextlib.suppress(Exception):
                    env.close()

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        self._env = self._task = None

    @property
    def packages(self) -> dict[str, str]:
        """Installed versions of the Eval's simulator packages, for the record."""
        if self._packages is None:
            self._packages = {name: _version(name) for name in self.eval.packages}
        return self._packages


def as_observation(obs: Any) -> Observation:
    """An env's observation as a flat name -> array mapping (a bare array is the `state`)."""
    if isinstance(obs, Mapping):
        flat: dict[str, np.ndarray] = {}
        for name, value in obs.items():
            if isinstance(value, Mapping):
                flat.update({f"{name}.{inner}": array for inner, array in value.items()})
            else:
                flat[name] = value
        return flat
    return {keys.STATE: obs}


def success_of(info: Mapping[str, Any]) -> bool:
    for key in SUCCESS_INFO_KEYS:
        if key in info:
            return bool(info[key])
    return False


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"
