"""MyoSuite's musculoskeletal tasks (myosuite 3.0.0, Apache-2.0; its models from myo-sim 0.2.3 on
PyPI) as MyoSuite's own loop runs them, one env a task, built in MyoSuite's interpreter by the env
server (MyoSuite pins gymnasium below 1.3 and brings MuJoCo 4). It imports nothing of policybench
(the launcher puts it beside the server); MyoSuite is imported when an env is made.

The loop: `myosuite.utils.gym.make(task)`, `reset(seed=s)`, `step(action)` until terminated or
truncated (each task's registered episode length). Actions: one a muscle (and actuator) in
[-1, 1], which MyoSuite maps to activations in [0, 1] (its `normalize_act`). Observation:
`state`, the task's observation vector.

Success, as MyoSuite counts it (`utils/path_utils.evaluate_success`): an episode is solved when its
step info's `solved` held on more than 5 steps; a rollout here is a success at the step where the
sixth solved step comes (the rest of the episode cannot undo it), and ends there."""

from __future__ import annotations

from typing import Any

import numpy as np

STATE_KEY = "state"  # policybench.keys.STATE (this module imports nothing of policybench)
SUCCESSFUL_STEPS = 5  # path_utils.evaluate_success's default: solved on more steps than this


class MyoSuiteEnv:
    """One MyoSuite task as a gymnasium env: its observation as `state`; success its sixth solved
    step."""

    metadata = {"render_modes": []}

    def __init__(self, task: str) -> None:
        import gymnasium
        from myosuite.utils import gym

        self._env = gym.make(task)
        self.action_space = self._env.action_space
        self.observation_space = gymnasium.spaces.Dict({STATE_KEY: self._env.observation_space})
        self._solved = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = self._env.reset(seed=seed)
        self._solved = 0
        return {STATE_KEY: np.asarray(obs)}, {}

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self._env.step(np.asarray(action))
        self._solved += bool(info["solved"])
        success = self._solved > SUCCESSFUL_STEPS
        done = bool(terminated), bool(truncated)
        return {STATE_KEY: np.asarray(obs)}, float(reward), *done, {"is_success": success}

    def close(self) -> None:
        self._env.close()


def make(task: str, **kwargs: Any) -> MyoSuiteEnv:
    """The env server's entry."""
    return MyoSuiteEnv(task, **kwargs)
