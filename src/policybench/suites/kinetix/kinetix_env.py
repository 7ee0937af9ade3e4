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

Levels: eval_flow.py evaluates 12 levels from the paper's repository (`worlds/l/*.json`, on the
Kinetix commit it pins). kinetix-env 3.0.2 ships 8 of them under `levels/l/` (LEVELS) and lacks 4
(MISSING); its 8 are Kinetix's own files of those names, whose geometry differs from the paper's
(docs/suites.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

# eval_flow.py's levels, in its order, that kinetix-env 3.0.2 ships; and those it lacks.
LEVELS = (
    "grasp_easy",
    "hard_lunar_lander",
    "mjc_half_cheetah",
    "mjc_swimmer",
    "mjc_walker",
    "h17_unicycle",
    "chain_lander",
    "car_launch",
)
MISSING = ("catapult", "cartpole_thrust", "catcher_v3", "trampoline")
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
    """One Kinetix level. `reset(seed=s)` starts the level with key s; `step(a)` adds the
    wrapper's noise and steps; an episode ends on the goal, on failure or at 256 steps, with
    `is_success` when on the goal."""

    metadata = {"render_modes": []}
    render_mode = None
    observation_space = None

    def __init__(self, task: str) -> None:
        if task not in LEVELS:
            lacking = f" (kinetix-env 3.0.2 lacks {task})" if task in MISSING else ""
            raise ValueError(f"no Kinetix level {task!r}{lacking}; its levels: {', '.join(LEVELS)}")
        import jax
        import kinetix
        import kinetix.environment.env_state as env_state
        import kinetix.util.saving as saving
        from kinetix.environment.env import make_kinetix_env
        from kinetix.environment.spaces import ActionType, ObservationType

        self._jax = jax
        static = env_state.StaticEnvParams(**LARGE_ENV_PARAMS, frame_skip=FRAME_SKIP)
        self._params = env_state.EnvParams()
        path = f"{kinetix.__path__[0]}/levels/l/{task}.json"
        self._level, level_static, level_params = saving.load_from_json_file(path)
        assert level_static == static and level_params == self._params, path  # as train_expert
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


def make(task: str, **kwargs: Any) -> KinetixEnv:
    """The env server's entry."""
    return KinetixEnv(task, **kwargs)
