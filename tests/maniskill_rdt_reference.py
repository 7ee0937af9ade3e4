"""A plain loop written as RDT-1B's eval_sim/eval_rdt_maniskill.py runs ManiSkill
(thu-ml/RoboticsDiffusionTransformer), run in ManiSkill's interpreter by tests/test_maniskill.py:
one env made as the script makes it, its episodes reset in the script's order from its base seed
(the first `warmup` steps of each earlier episode played, as a run plays them), then episode
EPISODE with `steps` fixed joint targets (its first joints, nudged); saves what the script gives
its model at each step (the rendered image, the proprio), the reward and the script's success.

Usage: python maniskill_rdt_reference.py ENV_ID EPISODE STEPS REWARD_MODE OUT.npz (REWARD_MODE:
the script's --reward-mode, dense unless given)"""

import sys

import gymnasium as gym
import mani_skill.envs  # noqa: F401
import numpy as np

BASE_SEED = 20241201


def main(env_id: str, episode: int, steps: int, reward_mode: str, out: str) -> None:
    shader = "default"
    env = gym.make(
        env_id,
        obs_mode="rgb",
        control_mode="pd_joint_pos",
        render_mode="rgb_array",
        reward_mode=reward_mode,
        sensor_configs=dict(shader_pack=shader),
        human_render_camera_configs=dict(shader_pack=shader),
        viewer_camera_configs=dict(shader_pack=shader),
        sim_backend="auto",
    )
    for earlier in range(episode):  # the episodes a run plays before it
        obs, _ = env.reset(seed=earlier + BASE_SEED)
        for _ in range(3):
            obs, *_ = env.step(obs["agent"]["qpos"][0, :-1].numpy())
    obs, _ = env.reset(seed=episode + BASE_SEED)
    img = env.render().squeeze(0).detach().cpu().numpy()
    proprio = obs["agent"]["qpos"][:, :-1]
    nudges = np.random.default_rng(0).normal(0, 0.05, size=(steps, proprio.shape[1]))
    actions = (proprio[0].numpy() + nudges).astype(np.float32)
    saved = {"actions": actions, "first/image": img, "first/state": proprio[0].numpy()}
    for i, action in enumerate(actions):
        obs, reward, terminated, truncated, info = env.step(action)
        saved[f"step{i}/image"] = env.render().squeeze(0).detach().cpu().numpy()
        saved[f"step{i}/state"] = obs["agent"]["qpos"][0, :-1].numpy()
        saved[f"step{i}/reward"] = np.float64(reward.item())
        saved[f"step{i}/success"] = np.bool_(
            bool(terminated or truncated) and bool(info["success"])
        )
    np.savez(out, **saved)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
