"""robosuite 1.5's tasks (robosuite 1.5.2, MuJoCo 3) as robosuite's own loop runs them, built in
robosuite's interpreter by the env server. It imports nothing of policybench (the launcher puts
it beside the server); robosuite is imported when an env is made.

The env, as robosuite's quick start and gym wrapper make one: `robosuite.make(name,
robots=..., controller_configs=load_composite_controller_config(robot=...)` (the robot's
default composite controller: Panda's is BASIC, an OSC_POSE arm with input_ref_frame "base" and
a GRIP gripper), `has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False,
reward_shaping=False, control_freq=20, horizon=500, seed=s)`, then `reset()`. robosuite 1.5 draws
every placement from the env's own `np.random.default_rng(seed)`, so the scene of seed s is the
same in any process and any order. robosuite ships no evaluation loop: the horizon is
robosuite-benchmark's (500 steps), and a rollout is solved at the first step where the task's
`_check_success()` holds, as robomimic's rollouts end.

Observations: every entry of robosuite's observation dict by its name, and `state`: the gym
wrapper's flat vector (`object-state`, then each robot's `robot{i}_proprio-state`)."""

from __future__ import annotations

from typing import Any

import numpy as np

# Per task: robosuite's env name and robots (two Pandas for the two-arm tasks, opposite each
# other: robosuite's default configuration).
TASKS: dict[str, dict[str, Any]] = {
    "lift": {"env_name": "Lift", "robots": ["Panda"]},
    "stack": {"env_name": "Stack", "robots": ["Panda"]},
    "nut_assembly": {"env_name": "NutAssembly", "robots": ["Panda"]},
    "pick_place": {"env_name": "PickPlace", "robots": ["Panda"]},
    "door": {"env_name": "Door", "robots": ["Panda"]},
    "wipe": {"env_name": "Wipe", "robots": ["Panda"]},
    "tool_hang": {"env_name": "ToolHang", "robots": ["Panda"]},
    "two_arm_lift": {"env_name": "TwoArmLift", "robots": ["Panda", "Panda"]},
    "two_arm_peg_in_hole": {"env_name": "TwoArmPegInHole", "robots": ["Panda", "Panda"]},
    "two_arm_handover": {"env_name": "TwoArmHandover", "robots": ["Panda", "Panda"]},
    "two_arm_transport": {"env_name": "TwoArmTransport", "robots": ["Panda", "Panda"]},
}
HORIZON = 500  # robosuite-benchmark's
CONTROL_HZ = 20
STATE_KEY = "state"  # policybench.keys.STATE's spelling (not importable here)
SEED_ARGUMENT = "seed"  # robosuite.make's


def make_kwargs(task: str, seed: int | None) -> dict[str, Any]:
    """robosuite.make's arguments for `task` with the env's seed."""
    from robosuite import load_composite_controller_config

    spec = TASKS[task]
    return {
        "env_name": spec["env_name"],
        "robots": list(spec["robots"]),
        "controller_configs": load_composite_controller_config(robot=spec["robots"][0]),
        "has_renderer": False,
        "has_offscreen_renderer": False,
        "use_camera_obs": False,
        "reward_shaping": False,
        "control_freq": CONTROL_HZ,
        "horizon": HORIZON,
        SEED_ARGUMENT: seed,
    }


def flat_state(obs: dict[str, np.ndarray], robots: int) -> np.ndarray:
    """robosuite's GymWrapper's vector: object-state, then each robot's proprio-state."""
    parts = ["object-state", *(f"robot{i}_proprio-state" for i in range(robots))]
    return np.concatenate([np.asarray(obs[key]) for key in parts if key in obs])


class Box:
    """The action space as the env server describes it (a gymnasium Box's fields)."""

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low, self.high = low.astype(np.float32), high.astype(np.float32)
        self.shape, self.dtype = self.low.shape, self.low.dtype


class RobosuiteEnv:
    """One robosuite task. `reset(seed=s)` makes the env of seed s (robosuite seeds an env when
    it is made) and resets it; `step(a)` is one control step, ending the episode when the task
    succeeds."""

    metadata = {"render_modes": []}
    render_mode = None
    observation_space = None

    def __init__(self, task: str) -> None:
        if task not in TASKS:
            raise ValueError(f"no robosuite task {task!r}; its tasks: {', '.join(TASKS)}")
        self.task, self.env = task, None
        self.robots = len(TASKS[task]["robots"])
        self._build(None)
        low, high = self.env.action_spec
        self.action_space = Box(np.asarray(low), np.asarray(high))

    def _build(self, seed: int | None) -> None:
        import robosuite

        if self.env is not None:
            self.env.close()
        self.env = robosuite.make(**make_kwargs(self.task, seed))

    def observe(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        seen = {key: np.asarray(value) for key, value in obs.items()}
        return {STATE_KEY: flat_state(seen, self.robots), **seen}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._build(seed)
        return self.observe(self.env.reset()), {}

    def step(self, action: np.ndarray):
        obs, reward, _, _ = self.env.step(np.asarray(action, dtype=np.float64))
        solved = bool(self.env._check_success())
        return self.observe(obs), float(reward), solved, False, {"is_success": solved}

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def make(task: str, **kwargs: Any) -> RobosuiteEnv:
    """The env server's entry."""
    return RobosuiteEnv(task, **kwargs)
