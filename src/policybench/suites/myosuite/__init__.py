"""MyoSuite (myosuite 3.0.0): its finger, elbow and hand tasks whose models ship in myo-sim on
PyPI, 50 Hz, in an interpreter of their own (MyoSuite pins gymnasium below 1.3 and brings MuJoCo
4), staged as MyoSuite's own loop runs them (see myosuite_env). `myosuite-finger`, `-elbow` and
`-hand`: reach and pose for a finger, the elbow and the hand, the key turn and the object hold,
each task's `Random` variant (targets drawn at reset). No built-in expert."""

from __future__ import annotations

import functools

import numpy as np

from policybench import keys
from policybench.envserver import Interpreter, Isolated
from policybench.policy.base import Observation
from policybench.spec import Eval, seeded_per_task

INTERPRETER = Interpreter("myosuite", requirements=("myosuite==3.0.0", "msgpack"))
ENTRY = "myosuite_env:make"
MODULES = ("policybench.suites.myosuite.myosuite_env",)
CONTROL_HZ = 50.0  # these tasks' dt: frame_skip 10 of MuJoCo's 2 ms
BODIES = {  # Eval -> (its action size, MyoSuite's registered ids -> (instruction, episode length))
    "myosuite-finger": (
        5,
        {
            "myoFingerReachRandom-v0": ("reach the target with the fingertip", 100),
            "myoFingerPoseRandom-v0": ("hold the finger in the target pose", 100),
        },
    ),
    "myosuite-elbow": (6, {"myoElbowPose1D6MRandom-v0": ("hold the elbow at the target", 100)}),
    "myosuite-hand": (
        39,
        {
            "myoHandReachRandom-v0": ("reach the targets with the fingertips", 100),
            "myoHandPoseRandom-v0": ("hold the hand in the target pose", 100),
            "myoHandKeyTurnRandom-v0": ("turn the key", 200),
            "myoHandObjHoldRandom-v0": ("hold the object", 75),
        },
    ),
}


def hold(size: int, last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """The muscles as last commanded (MyoSuite's actions are activations, not moves); none
    active (-1, normalised) before any command."""
    return np.full(size, -1.0) if last is None else last


def myosuite(name: str) -> Eval:
    size, tasks = BODIES[name]
    return Eval(
        name=name,
        make_env=Isolated(ENTRY, INTERPRETER, {}, MODULES, renders=False),
        plan=seeded_per_task(
            {task: instruction for task, (instruction, _) in tasks.items()},
            timeout_s=max(steps for _, steps in tasks.values()) / CONTROL_HZ,
        ),
        control_hz=CONTROL_HZ,
        hold=functools.partial(hold, size),
        hold_name="activations kept",
        packages=("myosuite", "myo-sim", "mujoco", "gymnasium"),
        metadata={
            "observation": "`state`: the task's observation vector",
            "placement": "seed s: reset(seed=s) (targets drawn from the env's seeded generator)",
            keys.SUCCESS: "MyoSuite's evaluate_success: the step info's `solved` on more than 5 "
            "steps (the rollout ends at the sixth)",
            "max_steps": {task: steps for task, (_, steps) in tasks.items()},
            "interpreter": list(INTERPRETER.requirements),
            "reference_loop": "myosuite.utils.gym.make(task), reset(seed=s), step",
        },
    )


MYOSUITE_FINGER, MYOSUITE_ELBOW, MYOSUITE_HAND = map(myosuite, BODIES)
