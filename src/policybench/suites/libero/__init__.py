"""LIBERO (robosuite + hf-libero): the spatial, object, goal, 10 and 90 suites, each rollout staged
as openpi's LIBERO example (or lerobot-eval) stages its episode, with their protocol constants."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policybench import keys
from policybench.envserver import isolable
from policybench.perturbation import INITIAL_STATE, MUJOCO_AXES
from policybench.policy.base import Observation
from policybench.policy.codec import (
    Codec,
    CodecStep,
    action_dims,
    concat,
    expect_size,
    keep,
    prompt,
    rename,
    resize_with_pad_to,
    rotate_180,
    take_first,
)
from policybench.policy.contract import Contract, Image, actions_only
from policybench.rendering import MUJOCO
from policybench.spec import Eval, Rollout, numbered
from policybench.suites.libero.env import HOW_TO_INSTALL
from policybench.suites.libero.staging import LEROBOT_STAGING, OPENPI_STAGING, Staging
from policybench.suites.libero.tasks import TASKS

INIT_STATES_PER_TASK = 50  # every LIBERO task ships 50 fixed init states


@dataclass(frozen=True)
class LiberoProtocol:
    """The constants a LIBERO result depends on, in one place; recorded with every rollout.

    Defaults are openpi's LIBERO example (examples/libero/main.py): 20 Hz control, 10 settle
    steps of zero motion with the gripper open before the policy's first observation, 256x256
    renders sent rotated by 180 degrees and resized with padding to 224x224, the 8-d state, and
    the first 5 actions of each chunk played before the model is asked again; each rollout's
    scene staged as openpi stages its episodes (`staging`).
    """

    name: str = "openpi"
    control_hz: float = 20.0  # LIBERO's robosuite control_freq
    settle_steps: int = 10
    settle_action: tuple[float, ...] = (0.0,) * 6 + (-1.0,)
    max_steps: Mapping[str, int] = field(
        default_factory=lambda: {
            "libero_spatial": 220,
            "libero_object": 280,
            "libero_goal": 300,
            "libero_10": 520,
            "libero_90": 400,
        }
    )
    camera_size: int = 256
    model_image_size: int = 224
    rotate_180: bool = True
    action_horizon: int = 5  # openpi's replan_steps: actions played of each chunk
    staging: Staging = OPENPI_STAGING

    def settings(self, suite: str) -> dict[str, Any]:
        """What an Episode records as the Eval's settings."""
        return {
            "protocol": self.name,
            "suite": suite,
            "max_steps": self.max_steps[suite],
            "settle_steps": self.settle_steps,
            "settle_action": list(self.settle_action),
            "observation": (
                f"{keys.IMAGE}: agentview, {keys.WRIST_IMAGE}: robot0_eye_in_hand, "
                f"{self.camera_size}x{self.camera_size} uint8 as LIBERO renders them "
                "(upside down); "
                f"{keys.STATE}: eef pos (3), eef axis-angle (3), gripper qpos (2)"
            ),
            "camera_size": self.camera_size,
            "openpi_images": (
                f"rotated 180 degrees, resized with padding to "
                f"{self.model_image_size}x{self.model_image_size}"
                if self.rotate_180
                else f"resized with padding to {self.model_image_size}x{self.model_image_size}"
            ),
            "action_horizon": self.action_horizon,
            **self.staging.settings(),
            "success_check": "LIBERO's goal predicates (the env's done)",
        }


OPENPI = LiberoProtocol()
LEROBOT = dataclasses.replace(
    OPENPI,
    name="lerobot",
    max_steps={**OPENPI.max_steps, "libero_spatial": 280},
    staging=LEROBOT_STAGING,
)
"""openpi's values with LeRobot's 280-step limit on libero_spatial, staged as lerobot-eval stages
its episodes (LeRobot's LiberoEnv also renders 256x256 and settles 10 steps)."""
PROTOCOLS = {protocol.name: protocol for protocol in (OPENPI, LEROBOT)}


def task_id(index: int) -> str:
    return f"task{index}"


def language_of(task: str) -> str:
    """A task's instruction, as LIBERO's benchmark derives it from the task's file name."""
    if task[0].isupper():  # libero_10 and libero_90 names start with their scene
        scene = task.find("SCENE")
        task = task[scene + (8 if "SCENE10" in task else 7) :]
    return " ".join(task.split("_"))


@dataclass(frozen=True)
class InitStatePerTask:
    """`rollouts_per_task` rollouts of every task; rollout i starts from the task's init state i
    (`init_state=i` in its scene) and is seeded as `staging` says."""

    instructions: Mapping[str, str]
    timeout_s: float
    staging: Staging = OPENPI_STAGING
    init_states: int = INIT_STATES_PER_TASK

    def __call__(
        self, eval_name: str, rollouts_per_task: int, base_seed: int
    ) -> tuple[Rollout, ...]:
        if rollouts_per_task > self.init_states:
            raise ValueError(
                f"{eval_name} has {self.init_states} init states per task, so at most "
                f"{self.init_states} rollouts per task; got --rollouts {rollouts_per_task}"
            )
        planned = [
            (instruction, self.staging.scene(task, i, base_seed))
            for task, instruction in self.instructions.items()
            for i in range(rollouts_per_task)
        ]
        return numbered(eval_name, self.timeout_s, planned)


def openpi_codec(protocol: LiberoProtocol = OPENPI) -> Codec:
    """openpi's LIBERO example: `observation/image` and `observation/wrist_image` rotated by 180
    degrees then resized with padding to `model_image_size` (uint8), `observation/state` the
    8-d state, `prompt`; of each `[H, 7]` answer the first `action_horizon` actions are played
    before asking again, as the example does."""
    cameras = (keys.IMAGE, keys.WRIST_IMAGE)
    size = protocol.model_image_size
    rotate: tuple[CodecStep, ...] = (rotate_180(*cameras),) if protocol.rotate_180 else ()
    return Codec(
        "openpi",
        (
            *rotate,
            resize_with_pad_to(*cameras, height=size, width=size),
            rename({keys.IMAGE: "observation/image", keys.WRIST_IMAGE: "observation/wrist_image"}),
            concat(keys.STATE, into="observation/state"),
            keep("observation/image", "observation/wrist_image", "observation/state"),
            prompt(),
            action_dims(7),
            take_first(protocol.action_horizon),
        ),
        libero_contract(
            protocol,
            {"observation/image": size, "observation/wrist_image": size},
            "both" if protocol.rotate_180 else "none",
        ),
    )


def lerobot_codec(protocol: LiberoProtocol = OPENPI) -> Codec:
    """LeRobot's LIBERO conventions (lerobot.envs.libero and its LiberoProcessorStep): the
    agent view as `observation.images.image` and the wrist view as `observation.images.image2`,
    both as rendered (`camera_size` square) and rotated by 180 degrees; `observation.state` the
    8-d state (eef pos, axis-angle, gripper qpos); the instruction as `task`; 7-d actions."""
    cameras = (keys.IMAGE, keys.WRIST_IMAGE)
    size = protocol.camera_size
    names = {keys.IMAGE: "observation.images.image", keys.WRIST_IMAGE: "observation.images.image2"}
    return Codec(
        "lerobot",
        (
            expect_size(*cameras, height=size, width=size),
            rotate_180(*cameras),
            rename(names),
            concat(keys.STATE, into="observation.state"),
            keep(*names.values(), "observation.state"),
            prompt("task"),
            action_dims(7),
        ),
        libero_contract(protocol, dict.fromkeys(names.values(), size), "both"),
    )


def libero_contract(protocol: LiberoProtocol, cameras: Mapping[str, int], flip: str) -> Contract:
    """What a LIBERO model follows: robosuite's OSC_POSE deltas (end-effector position and
    axis-angle), a gripper that +1 closes and -1 opens, LIBERO's control rate, the two cameras
    (`cameras`: the model's key to its square size) flipped as `flip` from their render (both
    ways: turned by 180 degrees), and the 8-d state (openpi's and LeRobot's)."""
    return Contract(
        action="eef-delta",
        rotation="axis-angle",
        gripper="positive-closes",
        gripper_range=(-1.0, 1.0),
        control_hz=protocol.control_hz,
        images={key: Image(size, size, flip) for key, size in cameras.items()},
        state=("eef_pos:3", "eef_axis_angle:3", "gripper_qpos:2"),
    )


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """No end-effector motion; the gripper as last commanded (open before any command)."""
    gripper = -1.0 if last is None else float(last[6])
    return np.array([0.0] * 6 + [gripper])


def libero(suite: str, protocol: LiberoProtocol = OPENPI) -> Eval:
    """One LIBERO suite's tasks (`task0`, `task1`, ... in LIBERO's order) under `protocol`."""
    if suite not in TASKS:
        raise ValueError(f"no LIBERO suite {suite!r}; known: {sorted(TASKS)}")
    names = TASKS[suite]
    instructions = {task_id(i): language_of(name) for i, name in enumerate(names)}
    suffix = "" if protocol.name == OPENPI.name else f"-{protocol.name}"
    if PROTOCOLS.get(protocol.name) == protocol:  # by name: it can run in another interpreter
        make_env = isolable(make_libero, suite=suite, protocol=protocol.name)
    else:  # a protocol of the user's own: its env runs in this process
        make_env = functools.partial(make_libero, suite=suite, protocol=protocol)
    return Eval(
        name=f"{suite}{suffix}",
        make_env=make_env,
        plan=InitStatePerTask(
            instructions, protocol.max_steps[suite] / protocol.control_hz, protocol.staging
        ),
        control_hz=protocol.control_hz,
        hold=hold,
        hold_name="zero motion, keep gripper",
        requires=("libero", "robosuite", "bddl"),
        extra="libero",
        install=HOW_TO_INSTALL,
        packages=("hf-libero", "robosuite", "mujoco", "bddl", "numpy"),
        renderer=MUJOCO,
        metadata=protocol.settings(suite),
        codecs={"openpi": openpi_codec(protocol), "lerobot": lerobot_codec(protocol)},
        contract=actions_only(openpi_codec(protocol).contract),
        perturbations={**MUJOCO_AXES, INITIAL_STATE.name: INITIAL_STATE},
        paraphrases=Paraphrases(suite),
    )


def make_libero(task: str, suite: str, protocol: str | LiberoProtocol) -> Any:
    """The env of one task (`task0`, ...) of a LIBERO suite under `protocol` (or the one of that
    name: a module-level factory, so the env can run in an interpreter of its own)."""
    from policybench.suites.libero.env import LiberoEnv

    staged = PROTOCOLS[protocol] if isinstance(protocol, str) else protocol
    return LiberoEnv(
        suite,
        TASKS[suite][int(task.removeprefix("task"))],
        camera_size=staged.camera_size,
        settle_steps=staged.settle_steps,
        settle_action=staged.settle_action,
        staging=staged.staging,
    )


class Paraphrases(Mapping[str, tuple[str, ...]]):
    """A suite's paraphrased instructions (the `instruction` perturbation axis): LIBERO-PRO's
    language perturbation of the same tasks, in the same order (its `_lan` problem files; none
    for LIBERO-90), read when first asked: LIBERO-PRO's package imports this one."""

    def __init__(self, suite: str) -> None:
        self.suite = suite

    def _texts(self) -> dict[str, tuple[str, ...]]:
        from policybench.suites.libero_pro.tasks import INSTRUCTIONS

        said = INSTRUCTIONS.get(f"{self.suite}_lan", ())
        return {task_id(index): (text,) for index, text in enumerate(said)}

    def __getitem__(self, task: str) -> tuple[str, ...]:
        return self._texts()[task]

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts())

    def __len__(self) -> int:
        return len(self._texts())


LIBERO_SPATIAL = libero("libero_spatial")
LIBERO_OBJECT = libero("libero_object")
LIBERO_GOAL = libero("libero_goal")
LIBERO_10 = libero("libero_10")
LIBERO_90 = libero("libero_90")
LIBERO_SPATIAL_LEROBOT = libero("libero_spatial", LEROBOT)
LIBERO_OBJECT_LEROBOT = libero("libero_object", LEROBOT)
LIBERO_GOAL_LEROBOT = libero("libero_goal", LEROBOT)
LIBERO_10_LEROBOT = libero("libero_10", LEROBOT)
LIBERO_90_LEROBOT = libero("libero_90", LEROBOT)
