"""A plain loop written as robosuite 1.5's quick start runs a task, run in robosuite's
interpreter by tests/test_robosuite.py: `robosuite.make` with the robot's default composite
controller, no renderer, no camera, sparse reward, 20 Hz, horizon 500 and `seed`, `reset()`,
then `steps` seeded random actions from `env.action_spec`; saves each observation entry, the
gym wrapper's flat vector, each reward and `_check_success()`.

Usage: python robosuite_reference.py ENV_NAME ROBOTS SEED STEPS OUT.npz (ROBOTS: Panda or
Panda,Panda)"""

import sys

import numpy as np
import robosuite as suite
from robosuite import load_composite_controller_config


def main(env_name: str, robots: list[str], seed: int, steps: int, out: str) -> None:
    env = suite.make(
        env_name,
        robots=robots,
        controller_configs=load_composite_controller_config(robot=robots[0]),
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
        reward_shaping=False,
        control_freq=20,
        horizon=500,
        seed=seed,
    )
    # GymWrapper's keys and flattening (wrapping the env itself would reset it once more)
    keys = ["object-state", *(f"robot{i}_proprio-state" for i in range(len(env.robots)))]

    def flatten(obs):
        return np.concatenate([np.array(obs[key]).flatten() for key in keys if key in obs])

    low, high = env.action_spec
    actions = np.random.default_rng(0).uniform(low, high, size=(steps, len(low)))
    obs = env.reset()
    saved = {"actions": actions, "first/state": flatten(obs)}
    saved.update({f"first/{key}": np.asarray(value) for key, value in obs.items()})
    for i, action in enumerate(actions):
        obs, reward, _, _ = env.step(action)
        saved[f"step{i}/state"] = flatten(obs)
        saved.update({f"step{i}/{key}": np.asarray(value) for key, value in obs.items()})
        saved[f"step{i}/reward"] = np.float64(reward)
        saved[f"step{i}/success"] = np.bool_(env._check_success())
    np.savez(out, **saved)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
