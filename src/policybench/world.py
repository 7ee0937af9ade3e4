"""A live env for one Eval in one process: stages scenes, steps actions, reads success.
Envs live in an EnvCache that keeps at most a few per process (the least recently used is
closed); an env that raised is discarded and rebuilt on next use."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from policybench import heap, keys
from policybench.envserver import NOT_INSTALLED, Isolated
from policybench.perturbation import Grid, Noise, Perturbation, reset_options

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


# (eval name, task, lockstep slot): a slot's env is used by its own thread only (None: a World
# outside lockstep, on the process's main thread).
EnvKey = tuple[str, str, int | None]


class EnvCache:
    """The live envs of one process, at most `capacity` of them (None: no bound): building one
    more closes the least recently used first, so memory does not grow with the number of tasks
    a process meets. `built` and `closed` count what it did. Lockstep slots draw from it from
    their threads, one at a time."""

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"an env cache holds at least 1 env, got a capacity of {capacity}")
        self.capacity = capacity
        self._envs: OrderedDict[EnvKey, gym.Env] = OrderedDict()
        heap.keep_large_buffers_apart()  # so that a closed env's memory leaves the process
        self.built = 0
        self.closed = 0
        self._lock = threading.Lock()

    def get(self, key: EnvKey, build: Callable[[], gym.Env]) -> gym.Env:
        """The live env of `key`, built (after closing the least recently used) if there is none."""
        with self._lock:
            env = self._envs.get(key)
            if env is not None:
                self._envs.move_to_end(key)
                return env
            while self.capacity is not None and len(self._envs) >= self.capacity:
                _, oldest = self._envs.popitem(last=False)
                self._close(oldest)
            env = self._envs[key] = build()
            self.built += 1
            return env

    def discard(self, key: EnvKey) -> None:
        """Drops `key`'s env (after a fault); a broken env may fail to close, and goes anyway."""
        with self._lock:
            env = self._envs.pop(key, None)
            if env is not None:
                with contextlib.suppress(Exception):
                    self._close(env)

    def close(self) -> None:
        with self._lock:
            while self._envs:
                self._close(self._envs.popitem()[1])

    def __len__(self) -> int:
        return len(self._envs)

    def _close(self, env: gym.Env) -> None:
        self.closed += 1
        try:
            env.close()
        finally:
            heap.trim()


class World:
    """The live env of one Eval: stages a scene, steps it, reads success. Its envs live in
    `envs`, which a process may share among its Worlds to bound them all together; the World of
    lockstep `slot` has envs of its own there."""

    def __init__(self, eval: Eval, envs: EnvCache | None = None, slot: int | None = None) -> None:
        self.eval = eval
        self.envs = EnvCache() if envs is None else envs
        self.slot = slot
        self._env: gym.Env | None = None
        self._task: str | None = None
        self._packages: dict[str, str] | None = None
        self._bounds: tuple[np.ndarray, np.ndarray] | None = None
        self._noise: Noise | None = None  # the noise axes of the rollout last reset
        # Whether the env's step info has carried a success key since the last reset: an env
        # that never reports one reads as never solved, which the report points out.
        self.success_reported = False

    def env_for(self, task: str) -> gym.Env:
        """The live env of `task`, built on first use (or after the cache closed it)."""
        return self.envs.get(
            (world_key(self.eval), task, self.slot), lambda: self.eval.make_env(task)
        )

    def reset(self, scene: Scene, perturbation: Perturbation | Grid | None = None) -> Observation:
        """Stages `scene` on its task's env: resets it with the scene's seed and fields, and
        `perturbation` (policybench.perturbation) on top: staged by the env, or as noise on
        every action and observation until the next reset."""
        env = self._env = self.env_for(scene.task)
        self._task = scene.task
        space = env.action_space
        low, high = getattr(space, "low", None), getattr(space, "high", None)
        self._bounds = None if low is None or high is None else (low, high)
        self.success_reported = False
        options = reset_options(scene.fields, perturbation, scene.seed, self.eval)
        obs, _ = env.reset(seed=scene.seed, options=options)
        observed = as_observation(obs)
        held = functools.partial(self.eval.hold, None, observed)  # where the scene starts
        noise = None if perturbation is None else Noise(perturbation, scene.seed, held)
        self._noise = noise if noise else None
        if self._noise is not None:
            return self._noise.observation(observed)
        return observed

    def step(self, action: np.ndarray) -> Transition:
        assert self._env is not None, "World.step before World.reset"
        if self._noise is not None:
            action = self._noise.action(action, self._bounds)
        obs, reward, terminated, truncated, info = self._env.step(action)
        obs = {keys.STATE: obs} if type(obs) is np.ndarray else as_observation(obs)
        if self._noise is not None:
            obs = self._noise.observation(obs)
        success = success_of(info)
        self.success_reported = self.success_reported or success is not None
        return Transition(obs, float(reward), bool(success), terminated, truncated)

    @property
    def action_space(self) -> gym.spaces.Box:
        assert self._env is not None, "World.action_space before World.reset"
        return self._env.action_space

    @property
    def action_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The (low, high) of the action space of the env last reset (kept past a fault that
        discarded it), None before a reset: what a rollout's trace draws its actions against."""
        return self._bounds

    def discard(self) -> None:
        """Drops the current env after a fault; the next reset of its task builds a new one."""
        if self._task is not None:
            self.envs.discard((world_key(self.eval), self._task, self.slot))
            self._env = self._task = None

    def close(self) -> None:
        """Closes every env in this World's cache (all of a shared cache's)."""
        self.envs.close()
        self._env = self._task = None

    @property
    def packages(self) -> dict[str, str]:
        """Installed versions of the Eval's simulator packages, for the record."""
        if self._packages is None:
            make_env = self.eval.make_env
            if isinstance(make_env, Isolated):  # read in the interpreter the env runs in
                self._packages = make_env.packages(self.eval.packages)
            else:
                self._packages = {name: installed_version(name) for name in self.eval.packages}
        return self._packages


def world_key(eval: Eval) -> str:
    """What tells an Eval's envs apart in a process: its name, and the interpreter of a candidate
    pin set it runs under (policybench.pins: the same Eval, another env)."""
    make = eval.make_env
    if isinstance(make, Isolated) and make.interpreter.overrides:
        return f"{eval.name}@{make.interpreter.name}"
    return eval.name


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


def success_of(info: Mapping[str, Any]) -> bool | None:
    """What the env's step info says of success; None when it says nothing."""
    for key in SUCCESS_INFO_KEYS:
        if key in info:
            return bool(info[key])
    return None


def installed_version(distribution: str) -> str:
    """The installed version of `distribution`, or NOT_INSTALLED."""
    from importlib import metadata  # ~20 ms, which a wrapped loop's import need not pay

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED
