"""robomimic's tasks (the Diffusion Policy paper's main table): Lift, PickPlaceCan,
NutAssemblySquare, TwoArmTransport and ToolHang on robosuite 1.4.1 with MuJoCo 2.3.7, in an
interpreter of their own, staged as Diffusion Policy's `env_runner/robomimic_image_runner.py`
stages its test episodes (see robomimic_env for the env metadata, its sources, and the rules)."""

from __future__ import annotations

import numpy as np

from policybench.envserver import Interpreter, Isolated
from policybench.policy.base import Observation
from policybench.policy.codec import Codec, action_dims, keep, prompt
from policybench.policy.contract import Contract, Image, actions_only
from policybench.record.trace import CpuNumerics
from policybench.rendering import MUJOCO
from policybench.spec import Eval, seeded_per_task
from policybench.suites.robomimic import expert
from policybench.suites.robomimic.robomimic_env import CONTROL_HZ, CONTROLLER, TASKS, image_keys

INTERPRETER = Interpreter(
    "robomimic",
    requirements=("robosuite==1.4.1", "mujoco==2.3.7", "numpy==1.26.4", "msgpack"),
)
ENTRY = "robomimic_env:make"
# robosuite's operational-space controller solves with numpy's linear algebra, whose BLAS kernels
# OpenBLAS picks by CPU: on a machine whose OpenBLAS chose Prescott, Transport's golden differed
# from step 2 by 1.1e-5 (object[26]: 0.804514047652276 for 0.8045254977372683); forcing each
# kernel family here with OPENBLAS_CORETYPE (bench/golden_numerics.py) reproduces that value
# under Prescott (Haswell, Zen: 4.3e-6) and moves the cameras' thumbnails by a level at most. The
# goldens' observations and rewards hold to 1e-3, their thumbnails to 2 levels (their commands,
# played chunk by chunk, stay exact: an action moved by 1e-3 still fails).
CPU_NUMERICS = CpuNumerics(
    why="robosuite's controller calls numpy's BLAS, whose kernels OpenBLAS picks by CPU",
    abs=1e-3,
    rel=0.0,
    image_levels=2,
)
MODULES = ("policybench.suites.robomimic.robomimic_env",)
TEST_START_SEED = 100000  # the runner's test_start_seed (config/task/<task>_image.yaml)
INSTRUCTIONS = {
    "lift": "lift the cube",
    "can": "pick up the can and place it in its bin",
    "square": "fit the square nut onto the square peg",
    "transport": "hand the hammer over and drop it in the target bin, clearing the trash",
    "tool_hang": "insert the hook into the stand and hang the tool on it",
}
ARM = ("eef_pos", "eef_quat", "gripper_qpos")  # each robot's entries Diffusion Policy's model sees


def robots(task: str) -> range:
    return range(len(TASKS[task]["robots"]))


def model_keys(task: str) -> tuple[str, ...]:
    """Diffusion Policy's shape_meta observation keys for `task`: its cameras, then each robot's
    end-effector position, quaternion and gripper joints."""
    arms = [f"robot{i}_{part}" for i in robots(task) for part in ARM]
    return (*image_keys(task), *arms)


def contract(task: str) -> Contract:
    """What robomimic's actions and images are: per arm, an end-effector delta in OSC_POSE's
    input range (position, then axis-angle rotation) and a gripper command that closes at +1;
    images upright (robomimic flips robosuite's bottom-up renders), float CHW in [0, 1]."""
    size = TASKS[task]["size"]
    return Contract(
        action="eef-delta",
        rotation="axis-angle",
        gripper="positive-closes",
        gripper_range=(-1.0, 1.0),
        control_hz=CONTROL_HZ,
        images={key: Image(size, size, "none") for key in image_keys(task)},
    )


def diffusion_policy_codec(task: str) -> Codec:
    """The observations Diffusion Policy's image runner gives its policy (shape_meta's keys, as
    robomimic makes them), and its actions: 7 numbers an arm."""
    steps = (keep(*model_keys(task)), action_dims(7 * len(robots(task))))
    return Codec("diffusion-policy", steps, contract(task))


def openpi_codec(task: str) -> Codec:
    """For a served model (`--policy=openpi`): the same observations, and the instruction as
    `prompt`."""
    steps = (keep(*model_keys(task)), prompt(), action_dims(7 * len(robots(task))))
    return Codec("openpi", steps, contract(task))


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Zero motion (OSC_POSE's deltas), each gripper's last command kept (robosuite's grippers
    move by the command's sign: zero keeps them as they are, so before any command, zero)."""
    held = np.zeros(7 if last is None else len(last))
    if last is not None:
        held[6::7] = last[6::7]
    return held


EXPERTS = {"lift": expert.lift_expert, "can": expert.can_expert}


def robomimic(task: str) -> Eval:
    """One robomimic task, its test episodes seeded TEST_START_SEED, TEST_START_SEED + 1, ..."""
    spec = TASKS[task]
    return Eval(
        name=f"robomimic-{task.replace('_', '-')}",
        make_env=Isolated(ENTRY, INTERPRETER, {}, MODULES),
        plan=seeded_per_task(
            {task: INSTRUCTIONS[task]}, spec["max_steps"] / CONTROL_HZ, TEST_START_SEED
        ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="zero motion, grippers kept",
        scripted=EXPERTS.get(task),
        expert_reads=expert.EXPERT_READS,  # not its cameras' images: what a replay needs
        renderer=MUJOCO,
        packages=("robosuite", "mujoco"),
        metadata={
            "robosuite_env": spec["env_name"],
            "robots": spec["robots"],
            "cameras": spec["cameras"],
            "image_size": spec["size"],
            "max_steps": spec["max_steps"],
            "controller": CONTROLLER["type"],
            "interpreter": list(INTERPRETER.requirements),
            "observation": "robomimic's EnvRobosuite.get_observation: <camera>_image float32 "
            "3xHxW in [0, 1], flipped upright; object; every robot{i}_* entry",
            "action": f"{7 * len(robots(task))}-d: per arm OSC_POSE deltas in [-1, 1] (0.05 m, "
            "0.5 rad at 1) and a gripper command (+1 closes)",
            "staging_rule": "rollout i is the runner's test episode of seed "
            f"{TEST_START_SEED} + i (+ --seed): numpy's global RNG seeded with it, env.reset()",
            "score": "the runner's mean of each episode's max reward equals the success rate "
            "here: robosuite's sparse reward is 1 exactly on a step in the goal state",
            "reference_loop": "diffusion_policy/env_runner/robomimic_image_runner.py",
        },
        codecs={"diffusion-policy": diffusion_policy_codec(task), "openpi": openpi_codec(task)},
        contract=actions_only(contract(task)),
    )


LIFT = robomimic("lift")
CAN = robomimic("can")
SQUARE = robomimic("square")
TRANSPORT = robomimic("transport")
TOOL_HANG = robomimic("tool_hang")
