"""ManiSkill3's five tasks as RDT-1B reports them (thu-ml/RoboticsDiffusionTransformer,
`eval_sim/eval_rdt_maniskill.py`): PegInsertionSide, PickCube, StackCube, PlugCharger and
PushCube on ManiSkill 3.0.1 in ManiSkill's interpreter, absolute joint targets
(`pd_joint_pos`), the human render camera's 512x512 image and the joints as RDT's proprio,
episodes of seeds 20241201, 20241202, ..., up to 400 steps, solved at the first successful step
(see maniskill/rdt_env for the env and the loop). A protocol beside the Diffusion Policy
baseline's (`maniskill`): the same tasks, another control mode, camera, seeds and length. No
expert ships for this control mode; `--policy` brings one (the script's instruction for each
task is its `prompt`)."""

from __future__ import annotations

import numpy as np

from policybench import keys
from policybench.envserver import Isolated
from policybench.policy.base import Observation
from policybench.policy.codec import Codec, action_dims, keep, prompt
from policybench.policy.contract import Contract, Image, actions_only
from policybench.rendering import SAPIEN
from policybench.spec import Eval, seeded_per_task
from policybench.suites.maniskill import INTERPRETER
from policybench.suites.maniskill.rdt_env import (
    CONTROL_HZ,
    FIRST_SEED,
    MAX_STEPS,
    REWARD_MODES,
    TASKS,
)

ENTRY = "rdt_env:make"
MODULES = ("policybench.suites.maniskill.rdt_env",)
ACTION_WIDTH = 8  # 7 joint targets and the finger's
IMAGE_SIZE = 512  # the human render camera of each task
INSTRUCTIONS = {  # the script's task2lang, as it spells them
    "peg_insertion_side": "Pick up a orange-white peg and insert the orange end into the box "
    "with a hole in it.",
    "pick_cube": "Grasp a red cube and move it to a target goal position.",
    "stack_cube": "Pick up a red cube and stack it on top of a green cube and let go of the cube "
    "without it falling.",
    "plug_charger": "Pick up one of the misplaced shapes on the board/kit and insert it into the "
    "correct empty slot.",
    "push_cube": "Push and move a cube to a goal region in front of it.",
}
CONTRACT = Contract(
    action="joint-absolute",
    control_hz=CONTROL_HZ,
    images={keys.IMAGE: Image(IMAGE_SIZE, IMAGE_SIZE, "none")},
)


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Keep the joints where they are: the targets are absolute, and `state` is the 7 joints
    and the finger."""
    return np.asarray(obs[keys.STATE], dtype=np.float32) if last is None else last


def codecs() -> dict[str, Codec]:
    """`rdt`: what the script gives RDT (the image and the proprio; the instruction's embedding
    is RDT's own) and its 8-d action; `openpi`: the same, with the instruction as `prompt`."""
    seen = (keys.IMAGE, keys.STATE)
    return {
        "rdt": Codec("rdt", (keep(*seen), action_dims(ACTION_WIDTH)), CONTRACT),
        "openpi": Codec("openpi", (keep(*seen), prompt(), action_dims(ACTION_WIDTH)), CONTRACT),
    }


def rdt_eval(task: str) -> Eval:
    """One task of the script, its episodes seeded from its base seed."""
    return Eval(
        name=f"maniskill-rdt-{task.replace('_', '-')}",
        make_env=Isolated(ENTRY, INTERPRETER, {}, MODULES),
        plan=seeded_per_task({task: INSTRUCTIONS[task]}, MAX_STEPS / CONTROL_HZ, FIRST_SEED),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="joints kept",
        renderer=SAPIEN,
        packages=("mani-skill", "sapien"),
        metadata={
            "maniskill_env": TASKS[task],
            "control_mode": "pd_joint_pos",
            "obs_mode": "rgb",
            "reward_mode": REWARD_MODES.get(task, "dense"),
            "max_steps": MAX_STEPS,
            "sim_backend": "auto (one env: physx_cpu)",
            "interpreter": list(INTERPRETER.requirements),
            "observation": f"`image` ({IMAGE_SIZE}x{IMAGE_SIZE}x3 uint8, env.render()), `state` "
            "(qpos without the last finger: RDT's proprio), `agent/qpos`",
            "action": "8-d pd_joint_pos: 7 joint targets (rad) and the finger's (m)",
            "staging_rule": f"rollout i is reset(seed={FIRST_SEED} + i (+ --seed))",
            "score": "solved at the first step that is terminated or truncated and successful "
            "(the script's count), within 400 steps",
            "reference_loop": "RoboticsDiffusionTransformer eval_sim/eval_rdt_maniskill.py",
        },
        codecs=codecs(),
        contract=actions_only(CONTRACT),
    )


PEG_INSERTION_SIDE = rdt_eval("peg_insertion_side")
PICK_CUBE = rdt_eval("pick_cube")
STACK_CUBE = rdt_eval("stack_cube")
PLUG_CHARGER = rdt_eval("plug_charger")
PUSH_CUBE = rdt_eval("push_cube")
EVALS = (PEG_INSERTION_SIDE, PICK_CUBE, STACK_CUBE, PLUG_CHARGER, PUSH_CUBE)
