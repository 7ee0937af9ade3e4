"""A plain loop written as ManiSkill's Diffusion Policy baseline evaluates on CPU
(examples/baselines/diffusion_policy: make_env.py's CPU evaluation env, evaluate.py's loop,
baselines.sh's control mode and episode length), run in ManiSkill's interpreter by
tests/test_maniskill.py: the env of `task`, reset with `seed`, then `steps` fixed actions; saves
each observation (the newest frame of the baseline's two-frame stack), reward and success.

Usage: python maniskill_reference.py TASK OBS_MODE SEED STEPS OUT.npz"""

import sys

import gymnasium as gym
import mani_skill.envs  # noqa: F401
import numpy as np
from mani_skill.utils.wrappers import CPUGymWrapper, FrameStack
from mani_skill.utils.wrappers.flatten import FlattenRGBDObservationWrapper

# baselines.sh's arguments per task: env id, --control-mode, --max_episode_steps
BASELINE = {
    "pick_cube": ("PickCube-v1", "pd_ee_delta_pos", 100),
    "push_cube": ("PushCube-v1", "pd_ee_delta_pos", 100),
    "stack_cube": ("StackCube-v1", "pd_ee_delta_pos", 200),
    "peg_insertion_side": ("PegInsertionSide-v1", "pd_ee_delta_pose", 300),
    "push_t": ("PushT-v1", "pd_ee_delta_pose", 150),
}


def main(task: str, obs_mode: str, seed: int, steps: int, out: str) -> None:
    env_id, control_mode, max_steps = BASELINE[task]
    env_kwargs = dict(
        control_mode=control_mode,
        reward_mode="sparse",
        obs_mode=obs_mode,
        render_mode="rgb_array",
        max_episode_steps=max_steps,
    )
    env = gym.make(env_id, reconfiguration_freq=1, sim_backend="physx_cpu", **env_kwargs)
    if obs_mode == "rgb":  # train_rgbd.py's wrapper
        env = FlattenRGBDObservationWrapper(env, rgb=True, depth=False, state=True)
    env = FrameStack(env, num_stack=2)
    env = CPUGymWrapper(env, ignore_terminations=True, record_metrics=True)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(steps, *env.action_space.shape)).astype(np.float32)
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
