"""ManiSkill3's tasks as RDT-1B evaluates them (thu-ml/RoboticsDiffusionTransformer,
`eval_sim/eval_rdt_maniskill.py`), on ManiSkill 3.0.1 in ManiSkill's interpreter, built by the
env server. It imports nothing of policybench (the launcher puts it beside the server);
ManiSkill is imported when an env is made.

The env, as the script makes it: `gym.make(id, obs_mode="rgb", control_mode="pd_joint_pos",
render_mode="rgb_array", reward_mode="dense" (PlugCharger: "sparse", its only reward),
sensor_configs=dict(shader_pack="default"), ..., sim_backend="auto")` (one env: SAPIEN's CPU
physics), no wrapper. What RDT sees: `env.render()` (the task's human render camera, 512x512 RGB) as
`image`, and `obs["agent"]["qpos"][:, :-1]` (7 joints and the first finger) as `state`. Its actions:
8 absolute joint targets (the arm's 7 and the gripper's finger position), which the script plays 16
a model call.

The loop: episode i is `reset(seed=20241201 + i)`; it steps until 400 steps or until a step is
terminated or truncated *and* successful (`info["success"]`), which ends the episode solved. The
env's own time limit (its registered episode length) marks steps truncated and stops nothing."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

TASKS = {  # the script's task2lang, by policybench's task names
    "peg_insertion_side": "PegInsertionSide-v1",
    "pick_cube": "PickCube-v1",
    "stack_cube": "StackCube-v1",
    "plug_charger": "PlugCharger-v1",
    "push_cube": "PushCube-v1",
}
# The script's --reward-mode (dense unless given): PlugCharger-v1 has no dense reward, and the
# script fails on it without `--reward-mode sparse`.
REWARD_MODES = {"plug_charger": "sparse"}
FIRST_SEED = 20241201  # the script's base_seed
MAX_STEPS = 400  # the script's MAX_EPISODE_STEPS
CONTROL_HZ = 20
SHADER = "default"
# policybench's observation keys (policybench.keys spells them; not importable here), and
# ManiSkill's success flag in info.
IMAGE_KEY, STATE_KEY, QPOS_KEY = "image", "state", "agent/qpos"
SUCCESS_KEY = "success"


def make_kwargs(task: str) -> dict[str, Any]:
    """gym.make's arguments as the script passes them (its defaults)."""
    shader = {"shader_pack": SHADER}
    return {
        "obs_mode": "rgb",
        "control_mode": "pd_joint_pos",
        "render_mode": "rgb_array",
        "reward_mode": REWARD_MODES.get(task, "dense"),
        "sensor_configs": shader,
        "human_render_camera_configs": shader,
        "viewer_camera_configs": shader,
        "sim_backend": "auto",
    }


class RdtEnv:
    """One task. `reset(seed=s)` stages the episode of seed s; `step(a)` plays one joint target
    and ends the episode when it succeeds as the script counts success."""

    metadata = {"render_modes": []}
    render_mode = None
    observation_space = None

    def __init__(self, task: str) -> None:
        import mani_skill.envs  # noqa: F401  (registers the tasks)

        if task not in TASKS:
            raise ValueError(
                f"no task {task!r} in RDT's ManiSkill evaluation; its tasks: {', '.join(TASKS)}"
            )
        self.env = gym.make(TASKS[task], **make_kwargs(task))
        space = self.env.action_space
        self.action_space = gym.spaces.Box(space.low, space.high, dtype=space.dtype)

    def observe(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        qpos = np.asarray(obs["agent"]["qpos"])[0]
        image = np.asarray(self.env.render()).squeeze(0)
        return {IMAGE_KEY: image, STATE_KEY: qpos[:-1], QPOS_KEY: qpos}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = self.env.reset(seed=seed, options=options)
        return self.observe(obs), {}

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(action))
        solved = bool(terminated or truncated) and bool(info[SUCCESS_KEY])
        reward = float(np.asarray(reward).reshape(-1)[0])
        return self.observe(obs), reward, solved, False, {"is_success": solved}

    def close(self) -> None:
        self.env.close()


def make(task: str, **kwargs: Any) -> RdtEnv:
    """The env server's entry."""
    return RdtEnv(task, **kwargs)
