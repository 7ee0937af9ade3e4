"""robomimic's five tasks as robosuite 1.4.1 envs, built in robomimic's interpreter by the env
server, staged as Diffusion Policy's image runner stages its test episodes. It imports nothing
of policybench (the launcher puts it beside the server); robosuite is imported when an env is made.

The env metadata that normally comes with a downloaded robomimic dataset (its `env_args`) is
here as data, per task (`TASKS`, `env_kwargs`), from these sources:
- the controller: robosuite 1.4.1's default OSC_POSE config (`controllers/config/osc_pose.json`),
  which the v1.4.1 datasets ("*_v141.hdf5") record;
- cameras and image sizes: robomimic 0.3.0's `scripts/extract_obs_from_raw_datasets.sh`, the
  commands that made the image datasets (84x84 agentview and wrist; ToolHang 240x240 sideview
  and wrist; Transport's two shoulder and two wrist cameras);
- everything else: robomimic's dataset env metadata as its docs show it (docs/modules/
  environments.md: control_freq 20, reward_shaping false, ignore_done true, ...) and what
  robomimic's `EnvRobosuite.__init__` sets over it when Diffusion Policy's runner creates an env
  with images (`render_offscreen=True, use_image_obs=True`: an offscreen renderer, camera
  observations, object observations on, depths off), then `env.hard_reset = False`.

Staging (diffusion_policy/env_runner/robomimic_image_runner.py and env/robomimic/
robomimic_image_wrapper.py): a test episode of seed s sets numpy's global RNG with s and calls
`env.reset()` (robosuite draws its placements from that RNG); observations are robomimic's
`EnvRobosuite.get_observation`: each camera image flipped upside down (robosuite renders
bottom-up) and made a float32 CHW array in [0, 1], `object` (the object state), and every
`robot{i}_*` entry; the reward is robosuite's (sparse: 1 on a step in the goal state); an
episode runs its task's max steps whatever happens (robomimic's envs never end one).

The model: robosuite draws what its model randomizes (Lift's cube is 20 to 22 mm a side,
Transport's objects) from numpy's global RNG when an env is created, and with hard_reset off
never again. In the runner that RNG is as Diffusion Policy's workspace left it: seeded with
`training.seed` (42 in every workspace config) when the workspace is made, then, in the process
that makes the runner, its AsyncVectorEnv builds a dummy env (`dummy_env_fn`: no renderer, no
camera observations) before it forks the env processes; each env process inherits that RNG and
builds its env from it, so every process builds the same model. policybench replays that
sequence when it creates an env (`TRAINING_SEED`, then a model without cameras built and
dropped): the model of the runner's env, as long as nothing between the workspace's seeding and
the runner draws from numpy's global RNG (in the code read, the policy's construction and the
dataset's validation split do not: the latter draws from a Generator of its own)."""

from __future__ import annotations

from typing import Any

import numpy as np

CONTROLLER = {
    "type": "OSC_POSE",
    "input_max": 1,
    "input_min": -1,
    "output_max": [0.05, 0.05, 0.05, 0.5, 0.5, 0.5],
    "output_min": [-0.05, -0.05, -0.05, -0.5, -0.5, -0.5],
    "kp": 150,
    "damping_ratio": 1,
    "impedance_mode": "fixed",
    "kp_limits": [0, 300],
    "damping_ratio_limits": [0, 10],
    "position_limits": None,
    "orientation_limits": None,
    "uncouple_pos_ori": True,
    "control_delta": True,
    "interpolation": None,
    "ramp_ratio": 0.2,
}
WRIST = "robot0_eye_in_hand"
# Per task: robosuite's env, its robots, its cameras and image size, and Diffusion Policy's max
# steps for its proficient-human (ph) datasets (config/task/<task>_image.yaml).
TASKS: dict[str, dict[str, Any]] = {
    "lift": {
        "env_name": "Lift",
        "robots": ["Panda"],
        "cameras": ["agentview", WRIST],
        "size": 84,
        "max_steps": 400,
    },
    "can": {
        "env_name": "PickPlaceCan",
        "robots": ["Panda"],
        "cameras": ["agentview", WRIST],
        "size": 84,
        "max_steps": 400,
    },
    "square": {
        "env_name": "NutAssemblySquare",
        "robots": ["Panda"],
        "cameras": ["agentview", WRIST],
        "size": 84,
        "max_steps": 400,
    },
    "transport": {
        "env_name": "TwoArmTransport",
        "robots": ["Panda", "Panda"],
        "cameras": ["shouldercamera0", "shouldercamera1", WRIST, "robot1_eye_in_hand"],
        "size": 84,
        "max_steps": 700,
    },
    "tool_hang": {
        "env_name": "ToolHang",
        "robots": ["Panda"],
        "cameras": ["sideview", WRIST],
        "size": 240,
        "max_steps": 700,
    },
}
CONTROL_HZ = 20  # robosuite's control_freq in every robomimic dataset
TRAINING_SEED = 42  # Diffusion Policy's training.seed, numpy's when the runner is made


def env_kwargs(task: str, absolute: bool = False, images: bool = True) -> dict[str, Any]:
    """robosuite.make's arguments for `task`, as robomimic's EnvRobosuite passes them with
    images on (off: the runner's dummy env); `absolute`: Diffusion Policy's absolute-action
    variant (control_delta off)."""
    spec = TASKS[task]
    return {
        "has_renderer": False,
        "has_offscreen_renderer": images,
        "ignore_done": True,
        "use_object_obs": True,
        "use_camera_obs": images,
        "control_freq": CONTROL_HZ,
        "controller_configs": {**CONTROLLER, "control_delta": not absolute},
        "robots": list(spec["robots"]),
        "camera_depths": False,
        "camera_heights": spec["size"],
        "camera_widths": spec["size"],
        "reward_shaping": False,
        "camera_names": list(spec["cameras"]),
    }


def image_keys(task: str) -> list[str]:
    return [f"{camera}_image" for camera in TASKS[task]["cameras"]]


def observe(env: Any, raw: dict[str, Any], images: list[str]) -> dict[str, np.ndarray]:
    """robomimic's EnvRobosuite.get_observation of robosuite's `raw` observation (see the module's
    doc): the images flipped and made float32 CHW in [0, 1], `object`, the robots' entries."""
    observed = {}
    for key in raw:
        if key in images:
            frame = raw[key][::-1].astype(np.float32)
            frame /= 255.0
            observed[key] = frame.clip(0.0, 1.0).transpose(2, 0, 1)
    observed["object"] = np.array(raw["object-state"])
    for robot in env.robots:
        prefix = robot.robot_model.naming_prefix
        for key in raw:
            if key.startswith(prefix) and key not in observed and not key.endswith("proprio-state"):
                observed[key] = np.array(raw[key])
    return observed


class Box:
    """The action space as the env server describes it (a gymnasium Box's fields): robosuite's
    action_spec."""

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low, self.high = low.astype(np.float32), high.astype(np.float32)
        self.shape, self.dtype = self.low.shape, self.low.dtype


class RobomimicEnv:
    """One robomimic task's robosuite env. `reset(seed=s)` stages Diffusion Policy's test episode
    of seed s; `step(a)` is one control step, never ending the episode (the Eval's timeout does,
    at the task's max steps); info carries `is_success` (robosuite's _check_success)."""

    metadata = {"render_modes": []}
    render_mode = None
    observation_space = None

    def __init__(self, task: str, absolute: bool = False) -> None:
        import robosuite

        if task not in TASKS:
            raise ValueError(f"no robomimic task {task!r}; its tasks: {', '.join(TASKS)}")
        self.task = task
        name = TASKS[task]["env_name"]
        np.random.seed(TRAINING_SEED)  # the runner's numpy, as its workspace seeded it
        robosuite.make(name, **env_kwargs(task, absolute, images=False)).close()  # its dummy env
        self.env = robosuite.make(name, **env_kwargs(task, absolute))
        # EnvRobosuite turns on every joint position and end-effector velocity observable.
        for name in self.env.observation_names:
            if "joint_pos" in name or "eef_vel" in name:
                self.env.modify_observable(observable_name=name, attribute="active", modifier=True)
        self.env.hard_reset = False  # Diffusion Policy's runner, after creating the env
        low, high = self.env.action_spec
        self.action_space = Box(low, high)
        self._images = image_keys(task)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            np.random.seed(seed)
        raw = self.env.reset()
        return observe(self.env, raw, self._images), {}

    def step(self, action: np.ndarray):
        raw, reward, _, _ = self.env.step(np.asarray(action))
        info = {"is_success": bool(self.env._check_success())}  # gymnasium's key, World reads it
        return observe(self.env, raw, self._images), float(reward), False, False, info

    def close(self) -> None:
        self.env.close()


def make(task: str, **kwargs: Any) -> RobomimicEnv:
    """The env server's entry."""
    return RobomimicEnv(task, **kwargs)
