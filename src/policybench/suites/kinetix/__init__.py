"""Kinetix (kinetix-env 3.0.2), the real-time chunking paper's benchmark: `kinetix`, the 12 levels
its `eval_flow.py` evaluates, from the paper's own files (shipped as data: MIT); `kinetix-wheel`,
the 8 files of those names that the wheel ships (Kinetix's, whose geometry differs). Symbolic
observations, in an interpreter of their own (JAX and its pins), staged as eval_flow.py stages
them (see kinetix_env for the env, the rules and what differs). No expert ships: the paper's
policies are flow policies trained on its own experts' data. With `--latency-sweep` this is the
paper's experiment on policybench's harness: bring a policy (`--policy=openpi` for a served one,
or `module:attr`)."""

from __future__ import annotations

import numpy as np

from policybench import keys
from policybench.envserver import Interpreter, Isolated
from policybench.policy.base import Observation
from policybench.policy.codec import Codec, action_dims, keep, prompt
from policybench.policy.contract import Contract, actions_only
from policybench.spec import Eval, seeded_per_task
from policybench.suites.kinetix.kinetix_env import (
    ACTION_NOISE_STD,
    CONTROL_HZ,
    FRAME_SKIP,
    MAX_STEPS,
    MISSING,
    RTC_LEVELS,
    RTC_LEVELS_FILE,
    WHEEL_LEVELS,
)

INTERPRETER = Interpreter(
    "kinetix",
    requirements=("kinetix-env==3.0.2", "jax==0.9.0", "jaxlib==0.9.0", "msgpack"),
)
ENTRY = "kinetix_env:make"
MODULES = ("policybench.suites.kinetix.kinetix_env",)
DATA = (f"policybench.suites:data/{RTC_LEVELS_FILE}",)
ACTION_WIDTH = 6  # 4 motor bindings, 2 thruster bindings
INSTRUCTIONS = {  # Kinetix's goal: the green shape touches the blue one
    "grasp_easy": "grasp the goal object",
    "catapult": "catapult the green ball onto the goal",
    "cartpole_thrust": "thrust the cart so the green shape touches the goal",
    "catcher_v3": "catch the green ball on the goal",
    "trampoline": "bounce the green ball onto the goal",
    "hard_lunar_lander": "land the lander on the goal",
    "mjc_half_cheetah": "run the half cheetah to the goal",
    "mjc_swimmer": "swim to the goal",
    "mjc_walker": "walk to the goal",
    "h17_unicycle": "ride the unicycle to the goal",
    "chain_lander": "land the chain on the goal",
    "car_launch": "launch the car to the goal",
}
CONTRACT = Contract(control_hz=CONTROL_HZ)


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Motors and thrusters off."""
    return np.zeros(ACTION_WIDTH)


def codecs() -> dict[str, Codec]:
    """`rtc`: what eval_flow.py's flow policy sees (the symbolic vector, `state`) and its 6-d
    action; `openpi`: the same, with the level's instruction as `prompt`."""
    return {
        "rtc": Codec("rtc", (keep(keys.STATE), action_dims(ACTION_WIDTH)), CONTRACT),
        "openpi": Codec(
            "openpi", (keep(keys.STATE), prompt(), action_dims(ACTION_WIDTH)), CONTRACT
        ),
    }


def kinetix_eval(name: str, levels: str, tasks: tuple[str, ...], about: str) -> Eval:
    """The Eval of one set of level files (see kinetix_env.level_text)."""
    return Eval(
        name=name,
        make_env=Isolated(ENTRY, INTERPRETER, {"levels": levels}, MODULES, DATA, renders=False),
        plan=seeded_per_task({task: INSTRUCTIONS[task] for task in tasks}, MAX_STEPS / CONTROL_HZ),
        control_hz=CONTROL_HZ,
        hold=hold,
        hold_name="motors and thrusters off",
        packages=("kinetix-env", "jax"),
        metadata={
            "levels": list(tasks),
            "level_files": about,
            "static_env_params": "large (12 polygons, 4 circles, 6 joints, 2 thrusters)",
            "frame_skip": FRAME_SKIP,
            "action_noise_std": ACTION_NOISE_STD,
            "max_steps": MAX_STEPS,
            "interpreter": list(INTERPRETER.requirements),
            "observation": "`state`: Kinetix's symbolic flat observation (679 numbers)",
            "action": "6-d: 4 motor bindings and 2 thruster bindings in [-1, 1], noise "
            f"N(0, {ACTION_NOISE_STD}) added before the env steps",
            "staging_rule": "rollout i of a level is its episode of key jax.random.key(i "
            "(+ --seed)), the reset and each step taking the next split",
            "score": "the first episode solved (eval_flow.py's returned_episode_solved at the "
            "first done)",
            "reference_loop": "real-time-chunking-kinetix src/eval_flow.py",
        },
        codecs=codecs(),
        contract=actions_only(CONTRACT),
    )


KINETIX = kinetix_eval(
    "kinetix",
    "rtc",
    RTC_LEVELS,
    "the paper's worlds/l/*.json (real-time-chunking-kinetix cc6c5f5, MIT), shipped as data",
)
KINETIX_WHEEL = kinetix_eval(
    "kinetix-wheel",
    "wheel",
    WHEEL_LEVELS,
    f"kinetix-env 3.0.2's levels/l/*.json of the paper's names (it lacks {', '.join(MISSING)}); "
    "Kinetix's own files, whose geometry differs from the paper's",
)
