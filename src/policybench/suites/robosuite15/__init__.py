"""robosuite 1.5's tasks (robosuite 1.5.2 on MuJoCo 3): Lift, Stack, NutAssembly, PickPlace, Door,
Wipe, ToolHang and the two-arm TwoArmLift, TwoArmPegInHole, TwoArmHandover and TwoArmTransport,
on Pandas with their default composite controller (BASIC), from state, in an interpreter of
their own (LIBERO pins robosuite 1.4.0), staged as robosuite's own loop makes and resets an env
(see robosuite_env for the env, the rules and the sources). Numbers here and robomimic's
(robosuite 1.4.1, MuJoCo 2.3.7, OSC in the world frame) are not comparable: robosuite 1.5
changed its controllers, its physics version and its default controller's frame. No expert
ships: robosuite has none."""

from __future__ import annotations

import functools

import numpy as np

from policybench import keys
from policybench.envserver import Interpreter, Isolated
from policybench.policy.base import Observation
from policybench.policy.codec import Codec, action_dims, keep, prompt
from policybench.policy.contract import Contract, actions_only
from policybench.spec import Eval, seeded_per_task
from policybench.suites.robosuite15.robosuite_env import CONTROL_HZ, HORIZON, TASKS

INTERPRETER = Interpreter(
    "robosuite",
    requirements=("robosuite==1.5.2", "mujoco==3.3.0", "mink==0.0.5", "numpy==1.26.4", "msgpack"),
)
ENTRY = "robosuite_env:make"
MODULES = ("policybench.suites.robosuite15.robosuite_env",)
INSTRUCTIONS = {
    "lift": "lift the cube",
    "stack": "stack the red cube on the green cube",
    "nut_assembly": "fit the square nut onto the square peg and the round nut onto the round peg",
    "pick_place": "place each object into its bin",
    "door": "open the door",
    "wipe": "wipe the markings off the table",
    "tool_hang": "insert the hook into the stand and hang the tool on it",
    "two_arm_lift": "lift the pot with both arms",
    "two_arm_peg_in_hole": "insert the peg into the hole",
    "two_arm_handover": "hand the hammer from one arm to the other",
    "two_arm_transport": "hand the hammer over and drop it in the target bin, clearing the trash",
}


def arms(task: str) -> int:
    return len(TASKS[task]["robots"])


def grips(task: str) -> bool:
    """Wipe's Panda holds a wiping tool and TwoArmPegInHole's hold the peg and the hole, not
    grippers: 6 numbers an arm."""
    return task not in ("wipe", "two_arm_peg_in_hole")


def action_width(task: str) -> int:
    return (7 if grips(task) else 6) * arms(task)


def contract(task: str) -> Contract:
    """What robosuite 1.5's BASIC controller plays: per arm, an OSC_POSE delta in [-1, 1] (0.05 m,
    0.5 rad at 1; rotation as axis-angle, in the robot base's frame) and a gripper command that
    closes at +1."""
    return Contract(
        action="eef-delta",
        rotation="axis-angle",
        gripper="positive-closes" if grips(task) else None,
        gripper_range=(-1.0, 1.0) if grips(task) else None,
        control_hz=CONTROL_HZ,
    )


def codecs(task: str) -> dict[str, Codec]:
    """`robosuite`: the gym wrapper's flat state and the action; `openpi`: the same, with the
    instruction as `prompt`."""
    terms, width = contract(task), action_dims(action_width(task))
    return {
        "robosuite": Codec("robosuite", (keep(keys.STATE), width), terms),
        "openpi": Codec("openpi", (keep(keys.STATE), prompt(), width), terms),
    }


def hold(task: str, last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Zero motion, each gripper's last command kept (zero before any command: robosuite's
    grippers move by the command's sign)."""
    held = np.zeros(action_width(task))
    if last is not None and grips(task):
        held[6::7] = last[6::7]
    return held


def robosuite_eval(task: str) -> Eval:
    """One robosuite task, rollout i the env of seed i."""
    spec = TASKS[task]
    return Eval(
        name=f"robosuite-{task.replace('_', '-')}",
        make_env=Isolated(ENTRY, INTERPRETER, {}, MODULES, renders=False),
        plan=seeded_per_task({task: INSTRUCTIONS[task]}, HORIZON / CONTROL_HZ),
        control_hz=CONTROL_HZ,
        hold=functools.partial(hold, task),
        hold_name="zero motion, grippers kept",
        packages=("robosuite", "mujoco"),
        metadata={
            "robosuite_env": spec["env_name"],
            "robots": spec["robots"],
            "controller": "the robot's default composite controller (Panda: BASIC, OSC_POSE "
            "in the base frame, GRIP)",
            "horizon": HORIZON,
            "interpreter": list(INTERPRETER.requirements),
            "observation": "every entry of robosuite's observation dict, and `state`: its gym "
            "wrapper's flat vector (object-state, robot{i}_proprio-state)",
            "action": f"{action_width(task)}-d: per arm an OSC_POSE delta in [-1, 1] "
            + ("and a gripper command (+1 closes)" if grips(task) else "(no gripper)"),
            "staging_rule": "rollout i is the env made with seed=i (+ --seed), then reset()",
            "score": "solved at the first step where the task's _check_success() holds",
            "reference_loop": "robosuite 1.5.2's robosuite.make and reset (its quick start and "
            "gym wrapper); horizon from robosuite-benchmark",
        },
        codecs=codecs(task),
        contract=actions_only(contract(task)),
    )


LIFT = robosuite_eval("lift")
STACK = robosuite_eval("stack")
NUT_ASSEMBLY = robosuite_eval("nut_assembly")
PICK_PLACE = robosuite_eval("pick_place")
DOOR = robosuite_eval("door")
WIPE = robosuite_eval("wipe")
TOOL_HANG = robosuite_eval("tool_hang")
TWO_ARM_LIFT = robosuite_eval("two_arm_lift")
TWO_ARM_PEG_IN_HOLE = robosuite_eval("two_arm_peg_in_hole")
TWO_ARM_HANDOVER = robosuite_eval("two_arm_handover")
TWO_ARM_TRANSPORT = robosuite_eval("two_arm_transport")
EVALS = (
    LIFT,
    STACK,
    NUT_ASSEMBLY,
    PICK_PLACE,
    DOOR,
    WIPE,
    TOOL_HANG,
    TWO_ARM_LIFT,
    TWO_ARM_PEG_IN_HOLE,
    TWO_ARM_HANDOVER,
    TWO_ARM_TRANSPORT,
)
