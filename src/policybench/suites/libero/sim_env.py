"""One LIBERO task's env as a gymnasium env, staged by a reset plan: shared by hf-libero's suites
in this process and LIBERO-PRO's in its own interpreter, whose launcher puts it there as is."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

if __package__:  # policybench.suites.libero
    from policybench import keys
    from policybench.perturbation import MujocoStaging
    from policybench.suites.libero import replay
else:  # a top-level module in another interpreter, beside the leaf modules it uses
    import keys
    import replay
    from perturbation import MujocoStaging

INIT_STATE = "init_state"  # the reset option (and Scene field) naming the init state
AGENT_CAMERA, WRIST_CAMERA = "agentview", "robot0_eye_in_hand"


@dataclass(frozen=True)
class ResetPlan:
    """What the env does to reach a rollout's first observation, in order:

    1. LIBERO's env holds `builds` copies of its joint samplers, as an env whose model was built
       `builds` times holds them (each model build appends one; a reset draws from each);
    2. numpy's global RNG is seeded with `seed` (LIBERO's `env.seed`);
    3. the random draws of `replayed` resets are replayed (the RNG and the env advance exactly as
       that many resets would advance them, none is run);
    4. one real reset; then the task's init state `init_state` and the settle steps.
    """

    seed: int
    init_state: int
    replayed: int = 0
    builds: int = 1

    def __post_init__(self) -> None:
        if self.replayed < 0 or self.builds < 1:
            raise ValueError(f"a reset plan needs replayed >= 0 and builds >= 1, got {self}")


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """robosuite's xyzw quaternion as an axis-angle vector (robosuite's own formula, as
    openpi's LIBERO example uses it)."""
    w = float(np.clip(quat[3], -1.0, 1.0))
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return np.asarray(quat[:3], dtype=np.float64) * 2.0 * math.acos(w) / den


def state_of(raw: dict[str, np.ndarray]) -> np.ndarray:
    """The 8-d state of openpi's and LeRobot's LIBERO: eef position, eef axis-angle, gripper
    joint positions."""
    return np.concatenate(
        (
            raw["robot0_eef_pos"],
            quat_to_axis_angle(raw["robot0_eef_quat"]),
            raw["robot0_gripper_qpos"],
        )
    )


class LiberoSimEnv(gym.Env):
    """One LIBERO task (its problem file and its fixed init states), built by whichever `libero`
    package the interpreter holds. `reset(seed=s, options={"init_state": i})` stages the scene
    as `plan(s, i)` says, sets init state i, then plays `settle_steps` of `settle_action`
    (objects come to rest) unseen by the policy; numpy's global RNG is left as it was.
    Observations: `image` (agent view) and `wrist_image` as LIBERO renders them (upside down),
    `state` (8-d). Success is LIBERO's own goal check. `env_kwargs` go to LIBERO's env."""

    metadata = {"render_modes": ["rgb_array"]}
    name = "LIBERO"  # in error messages

    def __init__(
        self,
        bddl_file: Path,
        init_states: np.ndarray,
        camera_size: int,
        settle_steps: int,
        settle_action: Any,
        **env_kwargs: Any,
    ) -> None:
        from libero.libero.envs import OffScreenRenderEnv

        self.bddl_file, self.init_states = bddl_file, init_states
        self._env = OffScreenRenderEnv(
            bddl_file_name=str(bddl_file),
            camera_heights=camera_size,
            camera_widths=camera_size,
            **env_kwargs,
        )
        # The joint samplers one model build adds (LIBERO appends them again at every build).
        self._joint_samplers = tuple(self._env.env.object_property_initializers)
        self.language = self._env.language_instruction
        self._settle = (settle_steps, np.asarray(settle_action, dtype=np.float64))
        self._staging: MujocoStaging | None = None  # the perturbation axes on its model
        size = (camera_size, camera_size, 3)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float64)
        self.observation_space = gym.spaces.Dict(
            {
                keys.IMAGE: gym.spaces.Box(0, 255, size, np.uint8),
                keys.WRIST_IMAGE: gym.spaces.Box(0, 255, size, np.uint8),
                keys.STATE: gym.spaces.Box(-np.inf, np.inf, (8,), np.float64),
            }
        )

    def plan(self, seed: int, init_state: int) -> ResetPlan:
        """How the scene of `seed` and init state `init_state` is staged."""
        raise NotImplementedError

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        index = (options or {}).get(INIT_STATE)
        count = len(self.init_states)
        if not isinstance(index, int) or not 0 <= index < count:
            raise ValueError(
                f"{self.name} reset needs options={{'{INIT_STATE}': i}} with 0 <= i < {count}, "
                f"got {options!r}"
            )
        if not isinstance(seed, int):
            raise ValueError(
                f"{self.name} reset needs an int seed (the scene's seed), got {seed!r}; stage "
                "scenes through World.reset(scene) or pass seed=scene.seed"
            )
        super().reset(seed=seed)
        raw = self.stage(self.plan(seed, index))
        self._staged(options)  # cameras and lights, before the settle steps render
        if self._staging is not None and self._staging.displace(self._sim.data._data, options):
            raw = self._env.env._get_observations(force_update=True)  # the objects moved
        steps, action = self._settle
        for _ in range(steps):
            raw, _, _, _ = self._env.step(action)
        return self._observe(raw), {}

    def _staged(self, options: dict[str, Any] | None) -> None:
        """The perturbation axes (policybench.perturbation) on the model this reset left: a
        model kept from the last reset is restored to how it was built, a rebuilt one is."""
        model = self._sim.model._model
        if self._staging is None or self._staging.model is not model:
            self._staging = MujocoStaging(model)
        self._staging.stage(options)
        context = getattr(self._sim, "_render_context_offscreen", None)
        self._staging.sync(getattr(context, "con", None))  # the staged textures

    @property
    def _sim(self) -> Any:
        """robosuite's MjSim of the model the last reset built."""
        return self._env.env.sim

    def stage(self, plan: ResetPlan) -> dict[str, np.ndarray]:
        """Resets the env as `plan` says and sets its init state; LIBERO's raw observation."""
        robosuite_env = self._env.env
        outside = np.random.get_state()
        try:
            robosuite_env.object_property_initializers = list(self._joint_samplers) * plan.builds
            self._env.seed(plan.seed)  # numpy's global RNG, which LIBERO's resets draw from
            if plan.replayed:
                poses = replay.fresh_poses(robosuite_env, str(self.bddl_file))
                replay.replay_resets(robosuite_env, plan.replayed, poses)
            self._env.reset()
        finally:
            np.random.set_state(outside)
        return self._env.set_init_state(self.init_states[plan.init_state])

    def step(self, action: np.ndarray):
        raw, reward, done, info = self._env.step(np.asarray(action, dtype=np.float64))
        # LIBERO's `done` is its goal check; the harness decides when the episode ends.
        return self._observe(raw), float(reward), False, False, {**info, keys.SUCCESS: bool(done)}

    @property
    def libero(self) -> Any:
        """LIBERO's own env (an `OffScreenRenderEnv`), for inspection."""
        return self._env

    def sim_state(self) -> np.ndarray:
        """The full MuJoCo state (time, qpos, qvel), as LIBERO's init states hold it."""
        return self._env.get_sim_state()

    @staticmethod
    def _observe(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {
            keys.IMAGE: raw[f"{AGENT_CAMERA}_image"],
            keys.WRIST_IMAGE: raw[f"{WRIST_CAMERA}_image"],
            keys.STATE: state_of(raw),
        }

    def close(self) -> None:
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.close()
