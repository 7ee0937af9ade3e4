"""Diffusion Policy's robomimic test episode as a plain loop on robomimic 0.3.0's own env code,
run in the robomimic interpreter (a child process): `python robomimic_03.py SDIST TASK SEED
STEPS OUT` writes OUT (npz): the first observation and, for STEPS seeded random actions, each
step's observation, reward and success.

robomimic 0.3.0 is an sdist whose build needs cmake and torch; its env code needs neither to
create and step an env. So its `envs/env_base.py`, `envs/env_robosuite.py`, `utils/obs_utils.py`
and `utils/tensor_utils.py` are unpacked from the sdist (tox fetches it; $ROBOMIMIC_SDIST) into
a package of their own, with stand-ins only for what they import and this loop never runs:
`mujoco_py` (named once, for an exception type), `torch` (its Tensor type, to dispatch on), and
`egl_probe` (which picks a GPU for EGL; none here).

The loop is Diffusion Policy's (env_runner/robomimic_image_runner.py, env/robomimic/
robomimic_image_wrapper.py), its torch, video and vector-env parts left out: the observation
modalities from its shape_meta, the env created from the dataset's env metadata with images on
and object observations off (which EnvRobosuite turns on again), hard_reset off, and a test
episode: numpy's global RNG seeded with the seed, then env.reset(). Before the env, what the
runner's process did to numpy's global RNG: the workspace seeded it with training.seed (42),
and AsyncVectorEnv built its dummy env (`create_env(..., enable_render=False)`) before forking
the process that builds this env."""

from __future__ import annotations

import sys
import tarfile
import types
from pathlib import Path

import numpy as np

MODULES = (
    "envs/env_base.py",
    "envs/env_robosuite.py",
    "utils/obs_utils.py",
    "utils/tensor_utils.py",
)


def unpack(sdist: Path, into: Path) -> None:
    """robomimic 0.3.0's env modules as the package `robomimic` under `into`."""
    with tarfile.open(sdist) as archive:
        for name in MODULES:
            member = archive.getmember(f"robomimic-0.3.0/robomimic/{name}")
            target = into / "robomimic" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.extractfile(member).read())
    for package in ("robomimic", "robomimic/envs", "robomimic/utils"):
        (into / package / "__init__.py").touch()


def stand_ins() -> None:
    class Tensor:  # never made: TensorUtils dispatches on the type
        pass

    torch = types.ModuleType("torch")
    torch.Tensor = Tensor
    torch.nn = types.ModuleType("torch.nn")
    torch.nn.functional = types.ModuleType("torch.nn.functional")
    mujoco_py = types.ModuleType("mujoco_py")
    mujoco_py.builder = types.SimpleNamespace(MujocoException=RuntimeError)
    egl_probe = types.ModuleType("egl_probe")
    egl_probe.get_available_devices = lambda: []
    sys.modules.update(
        {
            "torch": torch,
            "torch.nn": torch.nn,
            "torch.nn.functional": torch.nn.functional,
            "mujoco_py": mujoco_py,
            "egl_probe": egl_probe,
        }
    )


def main() -> None:
    sdist, task, seed, steps, out = sys.argv[1:]
    work = Path(out).parent / "robomimic-0.3.0"
    unpack(Path(sdist), work)
    stand_ins()
    sys.path[:0] = [
        str(work),
        str(Path(__file__).resolve().parents[1] / "src/policybench/suites/robomimic"),
    ]
    import robomimic.utils.obs_utils as ObsUtils
    import robomimic_env  # policybench's data: the env metadata and shape_meta's keys
    from robomimic.envs.env_robosuite import EnvRobosuite

    images = robomimic_env.image_keys(task)
    arms = [
        f"robot{i}_{p}"
        for i in range(len(robomimic_env.TASKS[task]["robots"]))
        for p in ("eef_pos", "eef_quat", "gripper_qpos")
    ]
    ObsUtils.initialize_obs_modality_mapping_from_dict({"rgb": images, "low_dim": arms})
    env_kwargs = robomimic_env.env_kwargs(task)
    env_kwargs["use_object_obs"] = False  # the runner's; EnvRobosuite sets it again
    np.random.seed(42)  # the workspace's training.seed
    EnvRobosuite(  # AsyncVectorEnv's dummy_env_fn, before the fork
        env_name=robomimic_env.TASKS[task]["env_name"],
        render=False,
        render_offscreen=False,
        use_image_obs=False,
        postprocess_visual_obs=True,
        **env_kwargs,
    ).env.close()
    env = EnvRobosuite(
        env_name=robomimic_env.TASKS[task]["env_name"],
        render=False,
        render_offscreen=True,
        use_image_obs=True,
        postprocess_visual_obs=True,
        **env_kwargs,
    )
    env.env.hard_reset = False
    np.random.seed(int(seed))
    first = env.reset()
    low, high = env.env.action_spec
    actions = np.random.default_rng(0).uniform(low, high, (int(steps), len(low)))
    saved = {f"first/{k}": v for k, v in first.items()}
    for i, action in enumerate(actions):
        obs, reward, _, _ = env.step(action)
        saved.update({f"step{i}/{k}": v for k, v in obs.items()})
        saved[f"step{i}/reward"] = np.float64(reward)
        saved[f"step{i}/success"] = np.bool_(env.is_success()["task"])
    np.savez(out, actions=actions, **saved)


if __name__ == "__main__":
    main()
