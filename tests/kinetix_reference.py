"""A plain loop written as the real-time chunking paper's eval_flow.py runs one of its envs on a
level (kinetix-env 3.0.2's API: `reset(..., override_reset_state=level)` where the paper's pinned
Kinetix had `reset_to_level`), run in Kinetix's interpreter by tests/test_kinetix.py: the level,
reset with key `seed`, then `steps` seeded random actions through train_expert.py's noisy-action
wrapper; saves each observation, reward, done and GoalR. LEVEL is a level file's path, as
eval_flow.py names its `worlds/l/*.json`.

Usage: python kinetix_reference.py LEVEL.json SEED STEPS OUT.npz"""

import sys

import jax
import kinetix.environment.env_state as kenv_state
import kinetix.util.saving as saving
import numpy as np
from kinetix.environment.env import make_kinetix_env
from kinetix.environment.spaces import ActionType, ObservationType

LARGE_ENV_PARAMS = {
    "num_polygons": 12,
    "num_circles": 4,
    "num_joints": 6,
    "num_thrusters": 2,
    "num_motor_bindings": 4,
    "num_thruster_bindings": 2,
}
FRAME_SKIP = 2
ACTION_NOISE_STD = 0.1


def main(path: str, seed: int, steps: int, out: str) -> None:
    static_env_params = kenv_state.StaticEnvParams(**LARGE_ENV_PARAMS, frame_skip=FRAME_SKIP)
    env_params = kenv_state.EnvParams()
    level, _, _ = saving.load_from_json_file(path)
    env = make_kinetix_env(
        ActionType.CONTINUOUS,
        ObservationType.SYMBOLIC_FLAT,
        None,
        env_params,
        static_env_params,
        auto_reset=False,
    )

    @jax.jit  # eval_flow.py runs its whole loop compiled (jax.lax.scan under jax.jit)
    def noisy_step(key, state, action):  # NoisyActionWrapper.step_env
        key1, key2 = jax.random.split(key)
        action = action + jax.random.normal(key1, action.shape) * ACTION_NOISE_STD
        return env.step(key2, state, action, env_params)

    actions = np.random.default_rng(0).uniform(-1, 1, size=(steps, 6)).astype(np.float32)
    rng = jax.random.key(seed)
    rng, key = jax.random.split(rng)
    obs, state = env.reset(key, env_params, override_reset_state=level)
    saved = {"actions": actions, "first/state": np.asarray(obs)}
    for i, action in enumerate(actions):
        rng, key = jax.random.split(rng)
        obs, state, reward, done, info = noisy_step(key, state, action)
        saved[f"step{i}/state"] = np.asarray(obs)
        saved[f"step{i}/reward"] = np.float64(reward)
        saved[f"step{i}/done"] = np.bool_(done)
        saved[f"step{i}/goal"] = np.bool_(info["GoalR"])
    np.savez(out, **saved)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
