"""Kinetix's levels (kinetix-env 3.0.2, JAX) as the real-time chunking paper's evaluation stages
them (`real-time-chunking-kinetix/src/eval_flow.py` with `train_expert.py`'s constants), one env a
rollout, built in Kinetix's interpreter by the env server. It imports nothing of policybench (the
launcher puts it beside the server); JAX and Kinetix are imported when an env is made.

The env, as eval_flow.py makes it: symbolic flat observations and continuous actions on the large
static parameters (12 polygons, 4 circles, 6 joints, 2 thrusters, 4 motor and 2 thruster
bindings) with frame_skip 2, the default EnvParams (256 steps an episode), and its noisy-action
wrapper: Gaussian noise of standard deviation 0.1 added to every action before the env steps.
eval_flow.py counts the first episode of each of its 2048 envs (`returned_episode_solved` at the
first done): a rollout here is that first episode, solved when it ends on the goal
(Kinetix's `GoalR`).

Randomness: rollout seed s is `jax.random.key(s)`; the reset and each step take the next split
of it, and a step splits its key into the noise's and the env's, as the wrapper does. eval_flow.py
splits one key for all its envs and between its policy's calls, so its noise for a level differs
draw by draw; its distribution is the same.

Levels: eval_flow.py evaluates 12 levels from the paper's repository (`worlds/l/*.json`):
`levels="rtc"` (the default Eval) loads those files, kept in kinetix_rtc_levels.json.gz (MIT;
source and commit in kinetix_rtc_levels.LICENSE; each file's sha256 in RTC_LEVEL_SHA256), which
the launcher puts beside this module. `levels="wheel"` loads the 8 of those names that
kinetix-env 3.0.2 ships under `levels/l/` (Kinetix's own files, whose geometry differs from the
paper's: see docs/suites.md); it lacks the other 4 (MISSING)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

# eval_flow.py's levels, in its order; those kinetix-env 3.0.2 ships; and those it lacks.
RTC_LEVELS = (
    "grasp_easy",
    "catapult",
    "cartpole_thrust",
    "hard_lunar_lander",
    "mjc_half_cheetah",
    "mjc_swimmer",
    "mjc_walker",
    "h17_unicycle",
    "chain_lander",
    "catcher_v3",
    "trampoline",
    "car_launch",
)
MISSING = ("catapult", "cartpole_thrust", "catcher_v3", "trampoline")
WHEEL_LEVELS = tuple(name for name in RTC_LEVELS if name not in MISSING)
RTC_LEVELS_FILE = "kinetix_rtc_levels.json.gz"
RTC_LEVEL_SHA256 = {  # of each file as the paper's repository holds it (commit cc6c5f5)
    "grasp_easy": "a1d41d62a35234ba2a1874d05a8a9a386bb35c4664fcf53d047fd7799e0071a5",
    "catapult": "e8f159cebd3bf7b4ae3a6fbd0d447e0682a55798430570e80c701648fdf40974",
    "cartpole_thrust": "ac9a36a985b2232100366026866c11ccb7783f96ee453197c481253757e6be23",
    "hard_lunar_lander": "867e87f81b29bfaa2293a8956685c27a7aa697b04a280ded6714e9c6403cc40f",
    "mjc_half_cheetah": "6b4ec8a866eeec640a74f947300d9c890330252c081c2bbfc84362e4bcdfa514",
    "mjc_swimmer": "3804348cb20234cf292990f6df66622a7d7b1eac8ccfc7e8c886964743759a0c",
    "mjc_walker": "ec439be32710102d66df2be05977f4a6881de9ce8884bb48af0c833cb3673043",
    "h17_unicycle": "3f981f0bde771ccece0355cb9b81ec72c72c73e0be2cf40c491ccebcdb69514a",
    "chain_lander": "f38e88c59d3b6bf7d0b57677e7d900498711425f544a603e95f0e00516ed6457",
    "catcher_v3": "295e345ba2ae4933f60ed68f9fb02388075eef91fec748a892710d098cd652a3",
    "trampoline": "35422286b9e42502802a99c840f792e9afe24b4890aa44e8f4688ce421e381ad",
    "car_launch": "42d1df84c703d2daf6e0f13db8d24f3f3bc8896fee07f8b40aef0f2e84946f89",
}
LARGE_ENV_PARAMS = {  # train_expert.py's
    "num_polygons": 12,
    "num_circles": 4,
    "num_joints": 6,
    "num_thrusters": 2,
    "num_motor_bindings": 4,
    "num_thruster_bindings": 2,
}
FRAME_SKIP = 2
ACTION_NOISE_STD = 0.1
MAX_STEPS = 256  # Kinetix's EnvParams.max_timesteps
CONTROL_HZ = 30.0  # physics at 60 Hz (jax2d's dt), two physics steps an action
GOAL = "GoalR"  # Kinetix's info key: the episode ended on the goal
STATE_KEY = (
    "state"  # the observation's key, as policybench.keys.STATE spells it (not importable here)
)


class Box:
    """The action space as the env server describes it (a gymnasium Box's fields)."""

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low, self.high = low.astype(np.float32), high.astype(np.float32)
        self.shape, self.dtype = self.low.shape, self.low.dtype


class KinetixEnv:
    """One Kinetix level, of the paper's files (`levels="rtc"`) or the wheel's. `reset(seed=s)`
    starts the level with key s; `step(a)` adds the wrapper's noise and steps; an episode ends on
    the goal, on failure or at 256 steps, with `is_success` when on the goal."""

    metadata = {"render_modes": []}
    render_mode = None
    observation_space = None

    def __init__(self, task: str, levels: str = "rtc") -> None:
        import jax

        keep_compiled(jax)
        import kinetix.environment.env_state as env_state
        from kinetix.environment.env import make_kinetix_env
        from kinetix.environment.spaces import ActionType, ObservationType

        self._jax = jax
        static = env_state.StaticEnvParams(**LARGE_ENV_PARAMS, frame_skip=FRAME_SKIP)
        self._params = env_state.EnvParams()
        self._level, level_static, level_params = load_level(task, levels)
        assert level_static == static and level_params == self._params, task  # as train_expert
        self.env = make_kinetix_env(
            ActionType.CONTINUOUS,
            ObservationType.SYMBOLIC_FLAT,
            None,
            self._params,
            static,
            auto_reset=False,
        )
        space = self.env.action_space(self._params)
        self.action_space = Box(np.asarray(space.low), np.asarray(space.high))
        self._step = jax.jit(self._noisy_step)
        self._key = self._state = None

    def _noisy_step(self, key: Any, state: Any, action: Any):
        noise_key, env_key = self._jax.random.split(key)
        noisy = action + self._jax.random.normal(noise_key, action.shape) * ACTION_NOISE_STD
        return self.env.step(env_key, state, noisy, self._params)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        jax = self._jax
        self._key, key = jax.random.split(jax.random.key(0 if seed is None else seed))
        obs, self._state = self.env.reset(key, self._params, override_reset_state=self._level)
        return {STATE_KEY: np.asarray(obs)}, {}

    def step(self, action: np.ndarray):
        self._key, key = self._jax.random.split(self._key)
        action = np.asarray(action, dtype=np.float32)
        obs, self._state, reward, done, info = self._step(key, self._state, action)
        done = bool(done)
        solved = done and bool(info[GOAL])
        return {STATE_KEY: np.asarray(obs)}, float(reward), done, False, {"is_success": solved}

    def close(self) -> None:
        self._state = None


def compilation_cache() -> str:
    """Where JAX keeps compiled programs for Kinetix's envs: $JAX_COMPILATION_CACHE_DIR, else
    under the user's cache folder."""
    given = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return given or os.path.join(base, "policybench", "jax")


def keep_compiled(jax: Any) -> None:
    """JAX's persistent compilation cache, so that an env process after the first loads the
    compiled step (the same program for every level: a level is data) instead of compiling it
    again (11 s of 16 on this machine's CPU)."""
    jax.config.update("jax_compilation_cache_dir", compilation_cache())


def level_text(task: str, levels: str) -> str:
    """The level file's text: the paper's (checked against its sha256) or the wheel's."""
    if levels == "rtc":
        if task not in RTC_LEVELS:
            raise ValueError(
                f"no level {task!r} in the paper's; its levels: {', '.join(RTC_LEVELS)}"
            )
        with gzip.open(Path(__file__).with_name(RTC_LEVELS_FILE), "rt") as file:
            text = json.load(file)[task]
        if hashlib.sha256(text.encode()).hexdigest() != RTC_LEVEL_SHA256[task]:
            raise ValueError(f"{RTC_LEVELS_FILE}'s {task} is not the paper's file (sha256 differs)")
        return text
    if levels == "wheel":
        if task not in WHEEL_LEVELS:
            lacking = f" (kinetix-env 3.0.2 lacks {task})" if task in MISSING else ""
            raise ValueError(
                f"no Kinetix level {task!r}{lacking}; its levels: {', '.join(WHEEL_LEVELS)}"
            )
        import kinetix

        return Path(kinetix.__path__[0], "levels", "l", f"{task}.json").read_text()
    raise ValueError(f"levels={levels!r}: expected 'rtc' (the paper's files) or 'wheel'")


def load_level(task: str, levels: str) -> tuple[Any, Any, Any]:
    """(level, its static env params, its env params), as Kinetix's load_from_json_file reads a
    file."""
    import kinetix.util.saving as saving

    return saving.import_env_state_from_json(json.loads(level_text(task, levels)))


def make(task: str, **kwargs: Any) -> KinetixEnv:
    """The env server's entry."""
    return KinetixEnv(task, **kwargs)
