"""gymnasium-robotics' manipulation tasks: FrankaKitchen-v1 (a Franka arm in a kitchen, joint
velocity control) and the four Adroit hand tasks (a 24-joint hand on an arm, joint position
targets), from their state vectors, staged as a plain gymnasium loop stages them:
`gym.make(id)` with its registered episode limit, `reset(seed=s)`, `step(a)` until it ends.

No expert ships with either: the demonstrations behind their published numbers are Minari's (or
D4RL's) datasets, downloaded, which this machine's run does not. Their numbers are not those of
D4RL's kitchen and Adroit on mujoco-py, on which Diffusion Policy and the offline-RL papers report:
see docs/suites.md.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.envserver import isolable
from policybench.policy.base import Observation
from policybench.policy.codec import Codec, action_dims, concat, keep, prompt, rename
from policybench.policy.contract import Contract, actions_only
from policybench.spec import Eval, seeded_per_task

KITCHEN_ID = "FrankaKitchen-v1"
KITCHEN_STEPS = 280  # its registered episode limit
KITCHEN_HZ = 12.5  # 40 MuJoCo steps of 2 ms a control step
# One task a rollout: each object alone, and Minari's D4RL kitchen sets (D4RL/kitchen/complete-v2
# and mixed-v2 name their tasks_to_complete so).
KITCHEN_OBJECTS = (
    "microwave",
    "kettle",
    "bottom burner",
    "top burner",
    "light switch",
    "slide cabinet",
    "hinge cabinet",
)
KITCHEN_SETS = {
    "complete": ("microwave", "kettle", "light switch", "slide cabinet"),
    "mixed": ("microwave", "kettle", "bottom burner", "light switch"),
}
KITCHEN_INSTRUCTIONS = {
    "microwave": "open the microwave",
    "kettle": "move the kettle to the top left burner",
    "bottom burner": "turn on the bottom burner",
    "top burner": "turn on the top burner",
    "light switch": "turn on the light switch",
    "slide cabinet": "open the slide cabinet",
    "hinge cabinet": "open the hinge cabinet",
}

ADROIT_IDS = {
    "door": "AdroitHandDoor-v1",
    "hammer": "AdroitHandHammer-v1",
    "pen": "AdroitHandPen-v1",
    "relocate": "AdroitHandRelocate-v1",
}
ADROIT_SIZES = {"door": (28, 39), "hammer": (26, 46), "pen": (24, 45), "relocate": (30, 39)}
ADROIT_STEPS = 200  # each task's registered episode limit
ADROIT_HZ = 100.0  # 5 MuJoCo steps of 2 ms a control step
ADROIT_INSTRUCTIONS = {
    "door": "undo the latch and swing the door open",
    "hammer": "pick up the hammer and drive the nail into the board",
    "pen": "rotate the pen to the target orientation",
    "relocate": "move the ball to the target position",
}


def kitchen_tasks(task: str) -> tuple[str, ...]:
    """The kitchen's tasks_to_complete for one of our tasks (an object, its spaces dashed, or
    a Minari set)."""
    if task in KITCHEN_SETS:
        return KITCHEN_SETS[task]
    named = task.replace("-", " ")
    if named in KITCHEN_OBJECTS:
        return (named,)
    raise ValueError(f"no kitchen task {task!r}; known: {', '.join(kitchen_task_names())}")


def kitchen_task_names() -> list[str]:
    return [*(name.replace(" ", "-") for name in KITCHEN_OBJECTS), *KITCHEN_SETS]


class StateSuccess(gym.Wrapper):
    """The env's state vector as `state` (the kitchen's `observation` entry; its goals are
    constants of the task; a copy, as Adroit's env reuses its array), and `success` in each
    step's info as the published numbers count it: the kitchen's when its tasks_to_complete are
    all done; Adroit's once its goal has been achieved on more than `held` steps of the episode
    (hand_dapg's evaluate_success: 25, or 20 for the pen), where the env's own `success` is that
    step's alone."""

    def __init__(self, env: gym.Env, held: int | None = None) -> None:
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Dict(
            {keys.STATE: space["observation"] if isinstance(space, gym.spaces.Dict) else space}
        )
        self.held = held
        self.achieved = 0  # steps of this episode on which Adroit's goal was achieved

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed)
        self.achieved = 0
        return self._state(obs), info

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if "tasks_to_complete" in info:  # the kitchen: success is every task done
            info = {**info, keys.SUCCESS: not info["tasks_to_complete"]}
        elif self.held is not None:
            self.achieved += bool(info.get(keys.SUCCESS))
            info = {**info, GOAL_ACHIEVED: info.get(keys.SUCCESS)}
            info[keys.SUCCESS] = self.achieved > self.held
        return self._state(obs), reward, terminated, truncated, info

    @staticmethod
    def _state(obs: Any) -> dict[str, np.ndarray]:
        state = obs["observation"] if isinstance(obs, dict) else obs
        return {keys.STATE: np.array(state, copy=True)}


GOAL_ACHIEVED = "goal_achieved"  # Adroit's own per-step success, kept beside ours
# hand_dapg's evaluate_success: an episode succeeds whose goal was achieved on more steps than this.
ADROIT_HELD = {"door": 25, "hammer": 25, "pen": 20, "relocate": 25}


def make_kitchen(task: str) -> gym.Env:
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    made = gym.make(KITCHEN_ID, tasks_to_complete=list(kitchen_tasks(task)), **UNCHECKED)
    return StateSuccess(made)


def make_adroit(task: str) -> gym.Env:
    import gymnasium_robotics

    if task not in ADROIT_IDS:
        raise ValueError(f"no Adroit task {task!r}; known: {', '.join(ADROIT_IDS)}")
    gym.register_envs(gymnasium_robotics)
    return StateSuccess(gym.make(ADROIT_IDS[task], **UNCHECKED), held=ADROIT_HELD[task])


def hold_still(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """The kitchen's actions are joint velocities: zero holds the arm where it is."""
    return np.zeros(9) if last is None else np.zeros_like(last)


def codecs(actions: int, contract: Contract) -> dict[str, Codec]:
    """openpi's keys in the style of its examples (the state as `observation/state`, the
    instruction as the prompt) and LeRobot's (`observation.state`, `task`); `actions` wide."""
    openpi = Codec(
        "openpi",
        (
            concat(keys.STATE, into="observation/state"),
            keep("observation/state"),
            prompt(),
            action_dims(actions),
        ),
        contract,
    )
    lerobot = Codec(
        "lerobot",
        (
            rename({keys.STATE: "observation.state"}),
            keep("observation.state"),
            prompt("task"),
            action_dims(actions),
        ),
        contract,
    )
    return {"openpi": openpi, "lerobot": lerobot}


KITCHEN_CONTRACT = Contract(action="joint-velocity", rotation="none", control_hz=KITCHEN_HZ)
ADROIT_CONTRACT = Contract(action="joint-absolute", rotation="none", control_hz=ADROIT_HZ)

# gymnasium's passive checker warns on the first steps and changes nothing the env computes.
UNCHECKED = {"disable_env_checker": True}
PACKAGES = ("gymnasium-robotics", "mujoco", "gymnasium")


def kitchen() -> Eval:
    tasks = {task: _listed(kitchen_tasks(task)) for task in kitchen_task_names()}
    return Eval(
        name="kitchen",
        make_env=isolable(make_kitchen, renders=False),
        plan=seeded_per_task(tasks, timeout_s=KITCHEN_STEPS / KITCHEN_HZ),
        control_hz=KITCHEN_HZ,
        hold=hold_still,
        hold_name="zero joint velocity",
        requires=("gymnasium_robotics",),
        extra="robotics",
        packages=PACKAGES,
        metadata={
            "observation": f"{keys.STATE}: the kitchen's 59-d observation (robot and objects)",
            "action": "9-d joint velocities in [-1, 1] (7 arm joints, 2 fingers)",
            "max_steps": KITCHEN_STEPS,
            "success_check": "every task in tasks_to_complete done (the env's own check)",
            "reference_loop": f"gym.make({KITCHEN_ID!r}, tasks_to_complete=[...]), reset(seed)",
        },
        codecs=codecs(9, KITCHEN_CONTRACT),
        contract=actions_only(KITCHEN_CONTRACT),
    )


def _listed(objects: tuple[str, ...]) -> str:
    said = [KITCHEN_INSTRUCTIONS[name] for name in objects]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"


def adroit(task: str) -> Eval:
    """One Adroit task (its action and state sizes are its own)."""
    actions, state = ADROIT_SIZES[task]
    return Eval(
        name=f"adroit-{task}",
        make_env=isolable(make_adroit, renders=False),
        plan=seeded_per_task({task: ADROIT_INSTRUCTIONS[task]}, ADROIT_STEPS / ADROIT_HZ),
        control_hz=ADROIT_HZ,
        hold=functools.partial(hold_targets, actions),
        hold_name="hold the last joint targets",
        stop_on_success=True,  # once held long enough, the episode cannot fail
        requires=("gymnasium_robotics",),
        extra="robotics",
        packages=PACKAGES,
        metadata={
            "observation": f"{keys.STATE}: the task's {state}-d state vector",
            "action": f"{actions} joint position targets in [-1, 1] (-1, 1: a joint's limits)",
            "max_steps": ADROIT_STEPS,
            "success_check": f"the env's info['success'] on more than {ADROIT_HELD[task]} "
            "steps (hand_dapg's evaluate_success)",
            "reference_loop": f"gym.make({ADROIT_IDS[task]!r}), reset(seed)",
        },
        codecs=codecs(actions, ADROIT_CONTRACT),
        contract=actions_only(ADROIT_CONTRACT),
    )


def hold_targets(size: int, last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Adroit's actions are joint position targets: the last ones hold the hand; before any,
    zero (the middle of every joint's range)."""
    return np.zeros(size, np.float32) if last is None else last


KITCHEN = kitchen()
ADROIT_DOOR = adroit("door")
ADROIT_HAMMER = adroit("hammer")
ADROIT_PEN = adroit("pen")
ADROIT_RELOCATE = adroit("relocate")
