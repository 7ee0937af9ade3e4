"""ManiSkill3's tabletop tasks as ManiSkill 3.0.1 envs on SAPIEN's CPU physics, built in ManiSkill's
interpreter by the env server, staged as ManiSkill's Diffusion Policy baseline evaluates on CPU
(examples/baselines/diffusion_policy: `baselines.sh` for each task's control mode and episode
length, `diffusion_policy/make_env.py` for the env, `diffusion_policy/evaluate.py` for the loop);
the other tasks built of primitive shapes (PRIMITIVE_TASKS) the same way, in the control mode and
episode length of ManiSkill's PPO baseline, whose evaluation env is made alike (reconfigured each
reset, terminations ignored, success_once).
It imports nothing of policybench (the launcher puts it beside the server); ManiSkill is imported
when an env is made.

The env, as `make_eval_envs` builds each CPU evaluation env: `gym.make(id, reconfiguration_freq=1,
obs_mode=..., control_mode=..., reward_mode="sparse", render_mode="rgb_array",
max_episode_steps=...)`, `sim_backend="physx_cpu"`, wrapped in `CPUGymWrapper(ignore_terminations=
True, record_metrics=True)`: an episode runs its whole length whatever happens, and the baseline
scores it by `success_once` (success on any step), reported here as `is_success` once reached.
RGB Evals add `FlattenRGBDObservationWrapper(rgb=True, depth=False, state=True)` as the RGB
baseline (`train_rgbd.py`) does.

Staging: an episode of seed s is `reset(seed=s)`: ManiSkill seeds its episode RNG and torch's with
s, so the scene is the same in any process and any order. The baseline's evaluation resets
unseeded (episode seeds drawn from a main RNG seeded 2022 when the env is made, placements from
torch's global generator); docs/suites.md says what that changes."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# Per task: ManiSkill's env id, the Diffusion Policy baseline's control mode and episode length
# (baselines.sh), and the backend that renders its observations: state observations need no
# renderer except PushT-v1's (its goal region is a render-only actor).
TASKS: dict[str, dict[str, Any]] = {
    "pick_cube": {"env_id": "PickCube-v1", "control_mode": "pd_ee_delta_pos", "max_steps": 100},
    "push_cube": {"env_id": "PushCube-v1", "control_mode": "pd_ee_delta_pos", "max_steps": 100},
    "stack_cube": {"env_id": "StackCube-v1", "control_mode": "pd_ee_delta_pos", "max_steps": 200},
    "peg_insertion_side": {
        "env_id": "PegInsertionSide-v1",
        "control_mode": "pd_ee_delta_pose",
        "max_steps": 300,
    },
    "push_t": {"env_id": "PushT-v1", "control_mode": "pd_ee_delta_pose", "max_steps": 150},
}
# ManiSkill 3.0.1's other tabletop tasks that need no downloaded asset (its asset registry,
# mani_skill/utils/assets/data.py, lists none for them), as ManiSkill's PPO baseline evaluates
# them (examples/baselines/ppo/ppo.py): its default control mode, the task's registered episode
# length and the task's default reward (ppo.py sets none; PlugCharger has only sparse). The
# two-robot tasks' actions are both arms', flattened (ppo.py's FlattenActionSpaceWrapper).
PRIMITIVE_TASKS: dict[str, dict[str, Any]] = {
    task: {
        "env_id": env_id,
        "control_mode": "pd_joint_delta_pos",
        "max_steps": steps,
        "reward_mode": None,  # the task's default
    }
    for task, env_id, steps in (
        ("lift_peg_upright", "LiftPegUpright-v1", 50),
        ("place_sphere", "PlaceSphere-v1", 50),
        ("plug_charger", "PlugCharger-v1", 200),
        ("poke_cube", "PokeCube-v1", 50),
        ("pull_cube", "PullCube-v1", 50),
        ("pull_cube_tool", "PullCubeTool-v1", 100),
        ("roll_ball", "RollBall-v1", 80),
        ("stack_pyramid", "StackPyramid-v1", 250),
        ("two_robot_pick_cube", "TwoRobotPickCube-v1", 100),
        ("two_robot_stack_cube", "TwoRobotStackCube-v1", 100),
    )
}
ALL_TASKS = {**TASKS, **PRIMITIVE_TASKS}
CONTROL_HZ = 20  # every task's control_freq
OBS_MODES = ("state", "rgb")
# ManiSkill's names, not policybench's (this module runs where policybench is not installed): the
# flat state vector's observation key, as policybench.keys.STATE spells it, and ManiSkill's
# success flag in info.
STATE_KEY, SUCCESS_KEY = "state", "success"


def needs_renderer(task: str, obs_mode: str) -> bool:
    """Whether the env renders: RGB observations, and PushT-v1's state (its goal region is a
    render-only actor)."""
    return obs_mode == "rgb" or task == "push_t"


def make_kwargs(task: str, obs_mode: str) -> dict[str, Any]:
    """gym.make's arguments for `task` as the baseline's CPU evaluation env passes them."""
    spec = ALL_TASKS[task]
    reward_mode = spec.get("reward_mode", "sparse")
    return {
        "num_envs": 1,
        "obs_mode": "state_dict" if obs_mode == "state" else "rgb",
        "control_mode": spec["control_mode"],
        **({} if reward_mode is None else {"reward_mode": reward_mode}),
        "render_mode": "rgb_array",
        "max_episode_steps": spec["max_steps"],
        "reconfiguration_freq": 1,
        "sim_backend": "physx_cpu",
        "render_backend": "cpu" if needs_renderer(task, obs_mode) else "none",
    }


def named(state: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """ManiSkill's nested state dict as flat entries, `group/name` (`agent/qpos`,
    `extra/tcp_pose`, ...)."""
    entries = {}
    for key, value in state.items():
        if isinstance(value, dict):
            entries.update(named(value, f"{prefix}{key}/"))
        else:
            entries[f"{prefix}{key}"] = value
    return entries


class FlatAndNamed(gym.ObservationWrapper):
    """The batched state dict as the baseline's policy sees it, `state` (flattened as ManiSkill
    flattens it for obs_mode "state"), and its entries by name."""

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        from mani_skill.utils import common

        device = self.env.unwrapped.device
        flat = common.flatten_state_dict(observation, use_torch=True, device=device)
        return {STATE_KEY: flat, **named(observation)}


class ManiSkillEnv:
    """One ManiSkill task. `reset(seed=s)` stages the episode of seed s; `step(a)` is one control
    step, never ending the episode (the Eval's timeout does, at the baseline's episode length);
    info carries `is_success`: ManiSkill's success on this step or an earlier one (the
    baseline's success_once)."""

    metadata = {"render_modes": []}
    render_mode = None
    observation_space = None

    def __init__(self, task: str, obs_mode: str = "state") -> None:
        import mani_skill.envs  # noqa: F401  (registers the tasks)
        from mani_skill.utils.wrappers.flatten import (
            FlattenActionSpaceWrapper,
            FlattenRGBDObservationWrapper,
        )
        from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

        if task not in ALL_TASKS:
            raise ValueError(f"no ManiSkill task {task!r}; its tasks: {', '.join(ALL_TASKS)}")
        if obs_mode not in OBS_MODES:
            raise ValueError(f"no observation mode {obs_mode!r}; one of {', '.join(OBS_MODES)}")
        self.task, self.obs_mode = task, obs_mode
        env = gym.make(ALL_TASKS[task]["env_id"], **make_kwargs(task, obs_mode))
        flat_actions = None
        if isinstance(env.action_space, gym.spaces.Dict):  # two robots: both arms, flattened
            env = flat_actions = FlattenActionSpaceWrapper(env)
        if obs_mode == "rgb":
            env = FlattenRGBDObservationWrapper(env, rgb=True, depth=False, state=True)
        else:
            env = FlatAndNamed(env)
        self.env = CPUGymWrapper(env, ignore_terminations=True, record_metrics=True)
        # CPUGymWrapper shows the base env's action space (a Dict for two robots); it plays the
        # flat actions the wrapper below it takes.
        self.action_space = (flat_actions or self.env).action_space
        self._succeeded = False

    def observe(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        """State: the flat vector the baseline's policy sees (`state`) and its entries by name;
        RGB: `rgb` (HxWx3 uint8) and `state`, as FlattenRGBDObservationWrapper gives them."""
        return {key: np.asarray(value) for key, value in obs.items()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = self.env.reset(seed=seed, options=options)
        self._succeeded = False
        return self.observe(obs), {}

    def step(self, action: np.ndarray):
        obs, reward, _, _, info = self.env.step(np.asarray(action, dtype=np.float32))
        self._succeeded = self._succeeded or bool(info.get(SUCCESS_KEY, False))
        done = {"is_success": self._succeeded}  # gymnasium's key, which World reads
        return self.observe(obs), float(reward), False, False, done

    def close(self) -> None:
        self.env.close()


def make(task: str, **kwargs: Any) -> ManiSkillEnv:
    """The env server's entry."""
    return ManiSkillEnv(task, **kwargs)
