"""A plain loop written as ManiSkill's Diffusion Policy baseline evaluates on CPU
(examples/baselines/diffusion_policy: make_env.py's CPU evaluation env, evaluate.py's loop,
baselines.sh's control mode and episode length), or, for the tasks of primitive shapes, as its
PPO baseline's evaluation env is made (examples/baselines/ppo/ppo.py: its default control mode,
the registered episode length, ManiSkill's default reward, a Dict action space flattened), run
in ManiSkill's interpreter by tests/test_maniskill.py: the env of `task`, reset with `seed`, then
`steps` fixed actions; saves each observation (the newest frame of the baseline's two-frame
stack), reward and success.

Usage: python maniskill_reference.py TASK OBS_MODE SEED STEPS OUT.npz"""

import sys

import gymnasium as gym
import mani_skill.envs  # noqa: F401
import numpy as np
from mani_skill.utils.wrappers import CPUGymWrapper, FrameStack
from mani_skill.utils.wrappers.flatten import (
    FlattenActionSpaceWrapper,
    FlattenRGBDObservationWrapper,
)

# baselines.sh's arguments per task: env id, --control-mode, --max_episode_steps; the reward
# make_env.py asks for
BASELINE = {
    "pick_cube": ("PickCube-v1", "pd_ee_delta_pos", 100, "sparse"),
    "push_cube": ("PushCube-v1", "pd_ee_delta_pos", 100, "sparse"),
    "stack_cube": ("StackCube-v1", "pd_ee_delta_pos", 200, "sparse"),
    "peg_insertion_side": ("PegInsertionSide-v1", "pd_ee_delta_pose", 300, "sparse"),
    "push_t": ("PushT-v1", "pd_ee_delta_pose", 150, "sparse"),
    # ppo.py's: control_mode's default; the registration's max_episode_steps; no reward_mode
    "plug_charger": ("PlugCharger-v1", "pd_joint_delta_pos", 200, None),
    "roll_ball": ("RollBall-v1", "pd_joint_delta_pos", 80, None),
    "two_robot_stack_cube": ("TwoRobotStackCube-v1", "pd_joint_delta_pos", 100, None),
}


def main(task: str, obs_mode: str, seed: int, steps: int, out: str) -> None:
    env_id, control_mode, max_steps, reward_mode = BASELINE[task]
    env_kwargs = dict(
        control_mode=control_mode,
        obs_mode=obs_mode,
        render_mode="rgb_array",
        max_episode_steps=max_steps,
    )
    if reward_mode is not None:
        env_kwargs["reward_mode"] = reward_mode
    env = gym.make(env_id, reconfiguration_freq=1, sim_backend="physx_cpu", **env_kwargs)
    if isinstance(env.action_space, gym.spaces.Dict):
        env = FlattenActionSpaceWrapper(env)
    if obs_mode == "rgb":  # train_rgbd.py's wrapper
        env = FlattenRGBDObservationWrapper(env, rgb=True, depth=False, state=True)
    env = FrameStack(env, num_stack=2)
    env = CPUGymWrapper(env, ignore_terminations=True, record_metrics=True)
    rng = np.random.default_rng(0)
    width = gym.spaces.flatdim(env.action_space)  # both arms' for two robots
    actions = rng.uniform(-1, 1, size=(steps, width)).astype(np.float32)
    saved = {"actions": actions}

    def keep(prefix, obs):
        for key, value in obs.items() if isinstance(obs, dict) else [("state", obs)]:
            saved[f"{prefix}/{key}"] = np.asarray(value)[-1]  # the newest frame

    obs, _ = env.reset(seed=seed)
    keep("first", obs)
    for i, action in enumerate(actions):
        obs, reward, _, _, info = env.step(action)
        keep(f"step{i}", obs)
        saved[f"step{i}/reward"] = np.float64(reward)
        saved[f"step{i}/success"] = np.bool_(info["success"])
    np.savez(out, **saved)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
