"""ManiSkill3's tabletop tasks (PickCube, PushCube, StackCube, PegInsertionSide, PushT) on
ManiSkill 3.0.1 with SAPIEN's CPU physics, in an interpreter of their own, staged as ManiSkill's
Diffusion Policy baseline evaluates them on CPU (see maniskill_env for the env, its sources and
the rules). Each task is two Evals: state observations (`maniskill-<task>`) and RGB
(`maniskill-<task>-rgb`). SAPIEN needs a Vulkan device even to build a scene: without one (Mesa's
Vulkan driver before 25 counts as none) the Evals are skipped, saying what to install."""

from __future__ import annotations

import functools

import numpy as np

from policybench import keys
from policybench.envserver import Interpreter, Isolated
from policybench.policy.base import Observation
from policybench.policy.codec import Codec, action_dims, keep, prompt
from policybench.policy.contract import Contract, Image, actions_only
from policybench.record.trace import CpuNumerics
from policybench.rendering import SAPIEN
from policybench.spec import Eval, seeded_per_task
from policybench.suites.maniskill import expert
from policybench.suites.maniskill.maniskill_env import (
    ALL_TASKS,
    CONTROL_HZ,
    PRIMITIVE_TASKS,
    needs_renderer,
)

# SAPIEN's PhysX computes in its own CPU code paths: the same episode on two x86-64 machines
# (both OpenBLAS SkylakeX, so not BLAS) differs within its 8 golden steps by up to 1.0e-4 in
# PushT's joint velocities (0.347074419260025 for 0.3471747636795044 at step 6) and 5.4e-6 in
# PegInsertionSide's (0.5245123505592346 for 0.5245177745819092), from step 3. Its goldens'
# observations and rewards hold to ten times what was seen; everything else exactly.
CPU_NUMERICS = CpuNumerics(
    why="SAPIEN's PhysX has CPU code paths of its own (up to 1e-4 within 8 steps on another CPU)",
    abs=1e-3,
    rel=0.0,
    image_levels=2,
    measured_by="two machines' runs of the same goldens (docs/guides/goldens-and-ci.md)",
)

INTERPRETER = Interpreter(
    "maniskill",
    # mplib 0.1.1 (ManiSkill's pin, for its motion planners) crashes under numpy 2.
    requirements=(
        "mani-skill==3.0.1",
        "sapien==3.0.3",
        "torch==2.13.0",
        "numpy==1.26.4",
        "msgpack",
    ),
)
ENTRY = "maniskill_env:make"
MODULES = ("policybench.suites.maniskill.maniskill_env",)
FIRST_SEED = 1  # the baselines' default --seed
RGB = "rgb"  # the RGB Evals' image key, as FlattenRGBDObservationWrapper names it
IMAGE_SIZE = 128  # every task's cameras
# The robot's cameras, stacked on the channels of `rgb` (FlattenRGBDObservationWrapper): the
# tasks on PandaWristCam add its hand camera to the base camera.
WRIST_CAMERA_TASKS = ("stack_cube", "peg_insertion_side", "plug_charger", "stack_pyramid")
OPEN = 1.0  # the gripper's command: its joint target, normalized (+1 open, -1 closed)
INSTRUCTIONS = {
    "pick_cube": "pick up the cube and move it to the goal",
    "push_cube": "push the cube into the goal region",
    "stack_cube": "stack the red cube on the green cube",
    "peg_insertion_side": "insert the peg into the hole in the box",
    "push_t": "push the T into the goal region",
    "lift_peg_upright": "lift the peg and stand it upright",
    "place_sphere": "place the sphere into the bin",
    "plug_charger": "plug the charger into the receptacle",
    "poke_cube": "poke the cube into the goal region with the peg",
    "pull_cube": "pull the cube into the goal region",
    "pull_cube_tool": "pull the cube closer with the L-shaped tool",
    "roll_ball": "roll the ball into the goal region",
    "stack_pyramid": "stack the three cubes into a pyramid",
    "two_robot_pick_cube": "pick up the cube with two arms and move it to the goal",
    "two_robot_stack_cube": "stack the cubes with two arms",
}
# Action width (an arm's), the contract's action kind and its rotation, by control mode.
CONTROLS = {
    "pd_ee_delta_pos": (4, "eef-delta", "none"),
    "pd_ee_delta_pose": (7, "eef-delta", "euler-xyz"),
    "pd_joint_delta_pos": (8, "joint-delta", None),  # 7 joints and the gripper
}


def arms(task: str) -> int:
    return 2 if task.startswith("two_robot_") else 1


def action_width(task: str) -> int:
    """PushT-v1's stick has no gripper: its pose actions are 6 numbers. Two robots: both arms'."""
    width, _, _ = CONTROLS[ALL_TASKS[task]["control_mode"]]
    return width - 1 if task == "push_t" else width * arms(task)


def contract(task: str, obs_mode: str) -> Contract:
    """What ManiSkill's actions and images are: end-effector deltas in [-1, 1] (0.1 m and 0.1
    rad at 1; rotations as XYZ Euler angles) or joint deltas (0.1 rad at 1), a gripper that opens
    at +1, images upright."""
    _, kind, rotation = CONTROLS[ALL_TASKS[task]["control_mode"]]
    grips = task != "push_t"
    return Contract(
        action=kind,
        rotation=rotation,
        gripper="negative-closes" if grips else None,
        gripper_range=(-1.0, 1.0) if grips else None,
        control_hz=CONTROL_HZ,
        images={RGB: Image(IMAGE_SIZE, IMAGE_SIZE, "none")} if obs_mode == RGB else {},
    )


def rgb_shape(task: str) -> str:
    """`rgb`'s shape and what it holds: 3 channels a camera."""
    if task in WRIST_CAMERA_TASKS:
        return f"{IMAGE_SIZE}x{IMAGE_SIZE}x6: base_camera's and hand_camera's RGB"
    return f"{IMAGE_SIZE}x{IMAGE_SIZE}x3: base_camera"


def model_keys(obs_mode: str) -> tuple[str, ...]:
    """What the baseline's policy sees: the flat state vector, and the camera for RGB."""
    return (keys.STATE, RGB) if obs_mode == RGB else (keys.STATE,)


def codecs(task: str, obs_mode: str) -> dict[str, Codec]:
    """`diffusion-policy`: the baseline's observations and actions; `openpi`: the same, with the
    instruction as `prompt` (a served model's)."""
    width, seen, terms = action_width(task), model_keys(obs_mode), contract(task, obs_mode)
    return {
        "diffusion-policy": Codec("diffusion-policy", (keep(*seen), action_dims(width)), terms),
        "openpi": Codec("openpi", (keep(*seen), prompt(), action_dims(width)), terms),
    }


def hold(task: str, last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Zero motion (deltas), the gripper's last command kept: its command is a position, and
    every episode starts with the gripper open (+1)."""
    held = np.zeros(action_width(task))
    if task != "push_t":
        grippers = [held.size // arms(task) * (i + 1) - 1 for i in range(arms(task))]
        held[grippers] = OPEN if last is None else last[grippers]
    return held


def maniskill(task: str, obs_mode: str = "state") -> Eval:
    """One ManiSkill task, its episodes seeded FIRST_SEED, FIRST_SEED + 1, ..."""
    spec = ALL_TASKS[task]
    reference = (
        "ManiSkill examples/baselines/ppo (ppo.py's evaluation env; control mode and episode "
        "length as ppo.py's defaults and the task's registration)"
        if task in PRIMITIVE_TASKS
        else "ManiSkill examples/baselines/diffusion_policy (make_env.py, evaluate.py, "
        "baselines.sh)"
    )
    suffix = "-rgb" if obs_mode == RGB else ""
    return Eval(
        name=f"maniskill-{task.replace('_', '-')}{suffix}",
        # An env that renders keeps a thread of its own in a server of several; the others
        # share the server's (at --envs-per-worker 8, PickCube steps about 15% faster so).
        make_env=Isolated(
            ENTRY,
            INTERPRETER,
            {"obs_mode": obs_mode},
            MODULES,
            renders=needs_renderer(task, obs_mode),
        ),
        plan=seeded_per_task(
            {task: INSTRUCTIONS[task]}, spec["max_steps"] / CONTROL_HZ, FIRST_SEED
        ),
        control_hz=CONTROL_HZ,
        hold=functools.partial(hold, task),
        hold_name="zero motion, gripper kept",
        scripted=expert.EXPERTS.get(task) if obs_mode == "state" else None,
        renderer=SAPIEN,
        packages=("mani-skill", "sapien"),
        metadata={
            "maniskill_env": spec["env_id"],
            "control_mode": spec["control_mode"],
            "obs_mode": obs_mode,
            "max_steps": spec["max_steps"],
            "sim_backend": "physx_cpu",
            "interpreter": list(INTERPRETER.requirements),
            "observation": "state: `state` (ManiSkill's flat state vector) and its entries "
            f"by name (agent/qpos, extra/tcp_pose, ...); rgb: `state` and `rgb` (uint8 "
            f"{rgb_shape(task)}), as FlattenRGBDObservationWrapper gives them",
            "action": f"{action_width(task)}-d {spec['control_mode']} in [-1, 1]",
            "staging_rule": f"rollout i is reset(seed={FIRST_SEED} + i (+ --seed)) of an env "
            "made as the baseline's CPU evaluation env (reconfiguration_freq=1)",
            "reward_mode": spec.get("reward_mode", "sparse") or "the task's default",
            "score": "success_once: success on any step of the episode (the baseline's "
            "eval/success_once)",
            "reference_loop": reference,
        },
        codecs=codecs(task, obs_mode),
        contract=actions_only(contract(task, obs_mode)),
    )


PICK_CUBE = maniskill("pick_cube")
PUSH_CUBE = maniskill("push_cube")
STACK_CUBE = maniskill("stack_cube")
PEG_INSERTION_SIDE = maniskill("peg_insertion_side")
PUSH_T = maniskill("push_t")
PICK_CUBE_RGB = maniskill("pick_cube", RGB)
PUSH_CUBE_RGB = maniskill("push_cube", RGB)
STACK_CUBE_RGB = maniskill("stack_cube", RGB)
PEG_INSERTION_SIDE_RGB = maniskill("peg_insertion_side", RGB)
PUSH_T_RGB = maniskill("push_t", RGB)
STATE_EVALS = (PICK_CUBE, PUSH_CUBE, STACK_CUBE, PEG_INSERTION_SIDE, PUSH_T)
RGB_EVALS = (PICK_CUBE_RGB, PUSH_CUBE_RGB, STACK_CUBE_RGB, PEG_INSERTION_SIDE_RGB, PUSH_T_RGB)
