"""MetaWorld v3 (Sawyer arm, MuJoCo): the MT10 tasks as an Eval, with MetaWorld's shipped
expert policies as the `scripted` policy. State observations by default, a camera on request."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import keys
from policybench.envserver import isolable
from policybench.perturbation import INITIAL_STATE, MUJOCO_AXES, MujocoStaging
from policybench.policy.base import ChunkSource, Observation, SessionContext, one_action_a_call
from policybench.policy.codec import (
    Codec,
    CodecStep,
    action_dims,
    concat,
    expect_size,
    first_dims,
    keep,
    prompt,
    rename,
)
from policybench.policy.contract import Contract, Image, actions_only
from policybench.rendering import MUJOCO
from policybench.spec import Eval, Rollout, Scene, numbered, seeded_per_task
from policybench.suites.metaworld_lerobot_tasks import LEROBOT_DIFFICULTY, LEROBOT_TASKS

CONTROL_HZ = 80.0  # MetaWorld steps 5 MuJoCo frames of 2.5 ms
MAX_STEPS = 500  # MetaWorld's own max_path_length; stepping past it raises

MT10 = {
    "reach-v3": "reach the goal position",
    "push-v3": "push the puck to the goal",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "door-open-v3": "open the door",
    "drawer-open-v3": "open the drawer",
    "drawer-close-v3": "close the drawer",
    "button-press-topdown-v3": "press the button from the top",
    "peg-insert-side-v3": "insert the peg into the hole from the side",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}
# Two paraphrases of each MT10 instruction (the `instruction` perturbation axis), written for
# policybench: the same goal in other words, for a policy that reads the instruction.
PARAPHRASES = {
    "reach-v3": ("move the gripper to the target", "bring the hand to the goal point"),
    "push-v3": ("slide the puck over to the target", "nudge the puck until it reaches the goal"),
    "pick-place-v3": (
        "grab the puck and put it on the target",
        "lift the puck, set it at the goal",
    ),
    "door-open-v3": ("swing the door open", "pull the door open"),
    "drawer-open-v3": ("pull the drawer out", "slide the drawer open"),
    "drawer-close-v3": ("push the drawer shut", "slide the drawer in"),
    "button-press-topdown-v3": ("push the button down from above", "press down on the button"),
    "peg-insert-side-v3": ("put the peg in the hole sideways", "slide the peg into the side hole"),
    "window-open-v3": ("open the window by sliding it", "push the window open"),
    "window-close-v3": ("close the window by sliding it", "push the window shut"),
}


class SeededPlacement(gym.Wrapper):
    """A MetaWorld task env whose object and goal placement is drawn from the reset seed.

    MetaWorld's own wrappers pick one of 50 pre-sampled placements with a generator that the
    reset seed does not touch; here `reset(seed=s)` always stages the same placement for `s`,
    on any worker, after any earlier rollout.
    """

    def __init__(
        self, task: str, camera: str | None = None, size: int = 224, shadows: bool = True
    ) -> None:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
        from metaworld.types import Task

        env_cls = ALL_V3_ENVIRONMENTS[task]
        env = env_cls(
            render_mode="rgb_array" if camera else None,
            camera_name=camera,
            width=size,
            height=size,
        )
        # Placement comes from the seed at each reset; this only marks the task as set and the
        # goal as observable, as MetaWorld's MT benchmarks do.
        placeholder = {"env_cls": env_cls, "rand_vec": np.zeros(0), "partially_observable": False}
        env.set_task(Task(env_name=task, data=pickle.dumps(placeholder)))
        if not shadows:  # software rendering runs about three times faster without them
            env.model.light_castshadow[:] = 0
        super().__init__(env)
        self._camera = camera
        self._staging = MujocoStaging(env.model)  # the perturbation axes: cameras, lights

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        env = self.env.unwrapped
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True
        env.seed(0 if seed is None else seed)
        self._staging.stage(options)
        obs, info = env.reset()
        if self._staging.displace(env.data, options):
            obs = observed_again(env)
        return self._observe(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(obs), reward, terminated, truncated, info

    def _observe(self, state: np.ndarray) -> np.ndarray | dict[str, np.ndarray]:
        if self._camera is None:
            return state
        return {keys.STATE: state, keys.IMAGE: rendered(self.env, self._staging)}


PLACEMENT_AXES = {INITIAL_STATE.name: INITIAL_STATE}  # the objects moved once staged


def rendered(env: gym.Env, staging: MujocoStaging) -> np.ndarray:
    """The env's frame, its own GL context made current first, with the staged textures.
    gymnasium's renderer makes its context current only when it holds two viewers, so after
    another suite's renderer (LIBERO's, ALOHA's) took the thread's context, MetaWorld drew
    through that one: a wrong frame, and one that no longer followed its own model's changes."""
    viewer = env.unwrapped.mujoco_renderer._get_viewer(env.unwrapped.render_mode)
    viewer.make_context_current()
    staging.sync(viewer.con)
    return env.render()


def observed_again(env: Any) -> np.ndarray:
    """MetaWorld's reset observation of its scene as it is now (its previous frame the same, as
    a reset's is), after the initial-state axis moved the objects."""
    env._prev_obs = env._get_curr_obs_combined_no_goal()
    return env._get_obs().astype(np.float64)


# LeRobot's MetaWorld (lerobot.envs.metaworld.MetaworldEnv), as lerobot-eval runs it.
LEROBOT_CAMERA = "corner2"
LEROBOT_CAMERA_POS = (0.75, 0.075, 0.7)  # where LeRobot moves corner2 (after arXiv 2206.14244)
LEROBOT_SIZE = 480
LEROBOT_MT1_SEED = 42
LEROBOT_START_SEED = 1000  # lerobot-eval's default --seed
DRAW = "draw"  # a LeRobot 0.4 scene field: which placement of the seeded stream it takes
# What lerobot-eval hands a policy as `task`: LeRobot's descriptions of the tasks
# (lerobot/envs/metaworld_config.json's TASK_DESCRIPTIONS, the same in LeRobot 0.4.4 and 0.6.1).
LEROBOT_MT10 = {task: LEROBOT_TASKS[task] for task in MT10}
# MetaWorld MT50: every task, each instructed by its LeRobot description.
MT50 = dict(sorted(LEROBOT_TASKS.items()))


class LeRobotMetaWorld(gym.Env):
    """A MetaWorld task env built as LeRobot's MetaworldEnv builds it (0.4.4 and 0.6.1 alike):
    `MT1(task, seed=42)`'s first train task, reset once, randomization unfrozen, the `corner2`
    camera moved to LEROBOT_CAMERA_POS and its 480x480 image flipped upright, up to MetaWorld's
    500 steps. Observes `image` and the full 39-d `state`; success is MetaWorld's
    `info["success"]` (LeRobot's `is_success`).

    Reset as LeRobot 0.6.1's env resets (PR 3727): `reset(seed=s)` seeds the env's own
    generator (`env.seed(s)`, `seeded_rand_vec`), so the placement is the seed's alone: the same
    on any worker, after any earlier episode, in any batch.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": CONTROL_HZ}
    seeded = True  # placements from the env's own seeded generator (LeRobot 0.6.1)

    def __init__(self, task: str, shadows: bool = True) -> None:
        import metaworld

        mt1 = metaworld.MT1(task, seed=LEROBOT_MT1_SEED)
        env = mt1.train_classes[task](render_mode="rgb_array", camera_name=LEROBOT_CAMERA)
        env.set_task(mt1.train_tasks[0])
        env.model.cam_pos[2] = LEROBOT_CAMERA_POS
        if not shadows:
            env.model.light_castshadow[:] = 0
        env.reset()
        env._freeze_rand_vec = False
        env.seeded_rand_vec = self.seeded
        self._env = env
        self._staging = MujocoStaging(env.model)  # the perturbation axes: cameras, lights
        self.action_space = env.action_space
        self.observation_space = gym.spaces.Dict(
            {
                keys.IMAGE: gym.spaces.Box(0, 255, (LEROBOT_SIZE, LEROBOT_SIZE, 3), np.uint8),
                keys.STATE: env.observation_space,
            }
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._env.seed(seed)
        state, info = self._env.reset(seed=seed)
        return self._staged(state, options), info

    def _staged(self, state: np.ndarray, options: dict[str, Any] | None) -> dict[str, np.ndarray]:
        self._staging.stage(options)
        if self._staging.displace(self._env.data, options):
            state = observed_again(self._env)
        return self._observe(state)

    def step(self, action: np.ndarray):
        state, reward, terminated, truncated, info = self._env.step(action)
        return self._observe(state), reward, terminated, truncated, info

    def _observe(self, state: np.ndarray) -> dict[str, np.ndarray]:
        image = np.ascontiguousarray(np.flip(rendered(self._env, self._staging), (0, 1)))
        return {keys.IMAGE: image, keys.STATE: state}

    def close(self) -> None:
        self._env.close()


class LeRobot04MetaWorld(LeRobotMetaWorld):
    """LeRobotMetaWorld reset as LeRobot 0.4.4's env resets: it ignores the reset seed, and
    each reset draws the placement from numpy's global generator, which lerobot-eval seeds once
    (`--seed S`). So `reset(seed=s, options={"draw": i})` stages the placement of the i-th reset
    after `np.random.seed(s - i)`: lerobot-eval's episode i of a run with `--seed S` (one env at
    a time), unless an earlier episode of that run succeeded (LeRobot 0.4's env then resets once
    more, moving every later placement on).
    """

    seeded = False

    def __init__(self, task: str, shadows: bool = True) -> None:
        super().__init__(task, shadows)
        self._stream: tuple[int, int, Any] | None = None  # (stream seed, next draw, its state)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        draw = int((options or {}).get(DRAW, 0))
        stream_seed = (0 if seed is None else seed) - draw
        saved = np.random.get_state()
        try:
            if self._stream is not None and self._stream[:2] == (stream_seed, draw):
                np.random.set_state(self._stream[2])
            else:  # replay the stream's earlier resets: a reset may draw more than once
                np.random.seed(stream_seed)
                for _ in range(draw):
                    self._env.reset()
            state, info = self._env.reset()
            self._stream = (stream_seed, draw + 1, np.random.get_state())
        finally:
            np.random.set_state(saved)
        return self._staged(state, options), info


@dataclass(frozen=True)
class LeRobotDraws:
    """lerobot-eval's order: each task in turn, `rollouts_per_task` episodes, every reset taking
    the next placement of one stream seeded `base_seed`; rollout i of task k is seeded
    `base_seed + k * rollouts_per_task + i` and takes that draw."""

    instructions: Mapping[str, str]
    timeout_s: float

    def __call__(
        self, eval_name: str, rollouts_per_task: int, base_seed: int
    ) -> tuple[Rollout, ...]:
        planned = []
        for k, (task, instruction) in enumerate(self.instructions.items()):
            for i in range(rollouts_per_task):
                draw = k * rollouts_per_task + i
                planned.append((instruction, Scene(task, base_seed + draw, {DRAW: draw})))
        return numbered(eval_name, self.timeout_s, planned)


def lerobot_codec(camera: str | None = None, size: int = 224) -> Codec:
    """LeRobot's MetaWorld conventions (`pixels_agent_pos`): the camera image as
    `observation.image` (480x480 for LeRobot's checkpoints), the first 4 state dimensions (hand
    position, gripper) as `observation.state`, the instruction as `task`; 4-d actions. Without a
    camera the image is missing, and a checkpoint that wants one names it."""
    return Codec(
        "lerobot",
        (
            *_camera_image(camera, size, "observation.image"),
            first_dims(keys.STATE, count=4),
            rename({keys.STATE: "observation.state"}),
            keep("observation.image", "observation.state"),
            prompt("task"),
            action_dims(4),
        ),
        _contract(camera, size, "observation.image", LEROBOT_STATE),
    )


def hold(last: np.ndarray | None, obs: Observation) -> np.ndarray:
    """Stay put (zero end-effector delta) and keep the gripper effort last commanded."""
    gripper = -1.0 if last is None else float(last[3])
    return np.array([0.0, 0.0, 0.0, gripper])


# An Eval with what every MetaWorld Eval shares: its rate, its hold, what it needs installed.
metaworld_eval = functools.partial(
    Eval,
    control_hz=CONTROL_HZ,
    hold=hold,
    hold_name="zero-delta, keep gripper",
    requires=("metaworld",),
    extra="metaworld",
    packages=("metaworld", "mujoco", "gymnasium"),
)


class MetaWorldExpert:
    """MetaWorld's hand-written expert for the task the instruction names, one action a call."""

    name = "scripted"

    def __init__(self, instructions: Mapping[str, str]) -> None:
        self._task_of = {instruction: task for task, instruction in instructions.items()}

    def open(self, context: SessionContext) -> ChunkSource:
        from metaworld.policies import ENV_POLICY_MAP

        task = self._task_of.get(context.instruction)
        if task is None:
            raise ValueError(
                f"no MetaWorld expert for instruction {context.instruction!r}; "
                f"known: {sorted(self._task_of)}"
            )
        expert = ENV_POLICY_MAP[task]()
        # A copy of the state: some experts write into it, and a served one arrives read-only.
        return one_action_a_call(
            lambda obs: expert.get_action(np.array(obs[keys.STATE])), context.control_hz
        )

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "expert": "metaworld.policies"}


def openpi_codec(camera: str | None = None, size: int = 224) -> Codec:
    """openpi's keys in the style of its LIBERO example: the 39-d state as `observation/state`,
    the camera image (as rendered, size x size) as `observation/image`, the instruction as the
    prompt; the first 4 action dimensions (end-effector delta, gripper) are played."""
    return Codec(
        "openpi",
        (
            *_camera_image(camera, size, "observation/image"),
            concat(keys.STATE, into="observation/state"),
            keep("observation/image", "observation/state"),
            prompt(),
            action_dims(4),
        ),
        _contract(camera, size, "observation/image", STATE_LAYOUT),
    )


# MetaWorld v3's 39-d state: the hand, the gripper's opening, two objects' positions and
# quaternions, the same 18 of the frame before, and the goal.
STATE_LAYOUT = ("hand_pos:3", "gripper_opening:1", "objects:14", "previous_frame:18", "goal_pos:3")
LEROBOT_STATE = STATE_LAYOUT[:2]


def _contract(camera: str | None, size: int, image: str, state: tuple[str, ...]) -> Contract:
    """What a MetaWorld model follows: end-effector position deltas and a gripper command that
    +1 closes, at 80 Hz; the camera (if any) as rendered, and the state as `state` lays it out."""
    return Contract(
        action="eef-delta",
        rotation="none",
        gripper="positive-closes",
        gripper_range=(-1.0, 1.0),
        control_hz=CONTROL_HZ,
        images={image: Image(size, size)} if camera else {},
        state=state,
    )


def _camera_image(camera: str | None, size: int, into: str) -> tuple[CodecStep, ...]:
    """A codec's steps for the camera image, checked at size x size and sent as `into`; none
    for a state-only Eval."""
    if not camera:
        return ()
    return (expect_size(keys.IMAGE, height=size, width=size), rename({keys.IMAGE: into}))


def _state_slice(start: int, stop: int) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    def derive(signals: Mapping[str, np.ndarray]) -> np.ndarray:
        values = signals[f"obs.{keys.STATE}"][:, start:stop]
        return values[:, 0] if stop - start == 1 else values

    return derive


# What trajectory specs may name of a MetaWorld rollout, read from its 39-d state (MetaWorld v3's
# `_get_obs`): the hand's position (m), the gripper's opening (0 shut .. 1 open), the first
# object's position, and the goal's.
SIGNALS = {
    "hand": _state_slice(0, 3),
    "gripper_opening": _state_slice(3, 4),
    "object": _state_slice(4, 7),
    "goal": _state_slice(36, 39),
}


def mt10(
    camera: str | None = None,
    size: int = 224,
    shadows: bool = True,
    tasks: Mapping[str, str] = MT10,
    benchmark: str = "mt10",
) -> Eval:
    """The MT10 tasks (or `tasks`, the Eval then named for `benchmark`); `camera` (e.g.
    "corner") adds a rendered `image` to each observation."""
    return metaworld_eval(
        name=f"metaworld-{benchmark}" + ("" if camera is None else f"-{camera}"),
        make_env=isolable(
            SeededPlacement, camera is not None, camera=camera, size=size, shadows=shadows
        ),
        plan=seeded_per_task(tasks, timeout_s=MAX_STEPS / CONTROL_HZ),
        renderer=None if camera is None else MUJOCO,
        scripted=lambda: MetaWorldExpert(tasks),
        expert_reads=(keys.STATE,),
        metadata={
            "observation": "state" if camera is None else f"state+{camera}@{size}",
            "placement": (
                "seed s: at every reset MetaWorld's own placement sampler, randomization unfrozen"
                " and seeded with env.seed(s) (seeded_rand_vec)"
            ),
            "shadows": shadows,
            # The task's goal position is in the state (state[36:39]), as in MetaWorld's MT
            # benchmarks (partially_observable=False); its ML benchmarks hide it.
            "goal_observable": True,
        },
        codecs={"openpi": openpi_codec(camera, size), "lerobot": lerobot_codec(camera, size)},
        contract=actions_only(openpi_codec(camera, size).contract),
        signals=SIGNALS,
        perturbations={
            **({} if camera is None else MUJOCO_AXES),
            INITIAL_STATE.name: INITIAL_STATE,
        },
        paraphrases=_paraphrases(tasks),
    )


def _paraphrases(tasks: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The tasks' paraphrases, when every one of them has some (else none: the axis needs all)."""
    if not all(task in PARAPHRASES for task in tasks):
        return {}
    return {task: PARAPHRASES[task] for task in tasks}


# The LeRobot versions whose MetaWorld staging an Eval follows: how a seed becomes a placement,
# as each version's env and lerobot-eval stage it, and its plan.
LEROBOT_VERSIONS = {
    "0.6.1": (
        "seed s: the env's own generator seeded with env.seed(s) at reset (seeded_rand_vec); "
        f"rollout i of every task is seeded {LEROBOT_START_SEED} + --seed + i (lerobot-eval: "
        "start seed + episode index, any batch size)"
    ),
    "0.4.4": (
        "scene draw i, seed s: the placement of the i-th reset after np.random.seed(s - i)"
        " (lerobot-eval: episode i of --seed s - i, one env at a time, no earlier success)"
    ),
}


def mt10_lerobot(
    tasks: Mapping[str, str] = LEROBOT_MT10,
    shadows: bool = True,
    version: str = "0.6.1",
    benchmark: str = "mt10",
) -> Eval:
    """The MT10 tasks as lerobot-eval `version` runs LeRobot's MetaWorld env: a 480x480
    `corner2` image and the state, LeRobot's task descriptions as instructions, up to 500 steps
    (MetaWorld's max_path_length, which lerobot-eval takes as its step limit), ending at the
    first success. 0.6.1 (`metaworld-mt10-lerobot`) seeds each placement; 0.4.4
    (`metaworld-mt10-lerobot-0.4`) draws them in turn from one seeded stream."""
    if version not in LEROBOT_VERSIONS:
        raise ValueError(
            f"no LeRobot MetaWorld staging {version!r}; known: {list(LEROBOT_VERSIONS)}"
        )
    latest = version == "0.6.1"
    timeout_s = MAX_STEPS / CONTROL_HZ
    return metaworld_eval(
        name=f"metaworld-{benchmark}-lerobot"
        + ("" if latest else "-" + version.rpartition(".")[0])
        + ("" if shadows else "-noshadows"),
        make_env=functools.partial(
            LeRobotMetaWorld if latest else LeRobot04MetaWorld, shadows=shadows
        ),
        plan=seeded_per_task(tasks, timeout_s, LEROBOT_START_SEED)
        if latest
        else LeRobotDraws(dict(tasks), timeout_s=timeout_s),
        scripted=lambda: MetaWorldExpert(tasks),
        expert_reads=(keys.STATE,),
        metadata={
            "protocol": "lerobot",
            "lerobot_version": version,
            "observation": f"state+{LEROBOT_CAMERA}@{LEROBOT_SIZE} flipped upright",
            "instructions": "LeRobot's task descriptions (metaworld_config.json)",
            "camera_pos": list(LEROBOT_CAMERA_POS),
            "task_source": f"MT1(task, seed={LEROBOT_MT1_SEED}).train_tasks[0], unfrozen",
            "placement": LEROBOT_VERSIONS[version],
            "max_steps": MAX_STEPS,
            "shadows": shadows,
            "success_check": "MetaWorld info['success'] (LeRobot's is_success)",
            "goal_observable": True,  # MT1's train tasks show the goal in state[36:39]
        },
        codecs={"lerobot": lerobot_codec(LEROBOT_CAMERA, LEROBOT_SIZE)},
        contract=actions_only(lerobot_codec(LEROBOT_CAMERA, LEROBOT_SIZE).contract),
        signals=SIGNALS,
        perturbations={**MUJOCO_AXES, **PLACEMENT_AXES},
        paraphrases=_paraphrases(tasks),
    )


def mt50_lerobot(difficulty: str) -> Eval:
    """One of LeRobot's MT50 difficulty groups (`easy`, `medium`, `hard`, `very_hard`) as
    lerobot-eval 0.6.1 runs it: `metaworld-mt50-lerobot-<group>`, the four together MT50."""
    if difficulty not in LEROBOT_DIFFICULTY:
        raise ValueError(
            f"no MetaWorld difficulty {difficulty!r}; known: {list(LEROBOT_DIFFICULTY)}"
        )
    tasks = {task: LEROBOT_TASKS[task] for task in LEROBOT_DIFFICULTY[difficulty]}
    eval = mt10_lerobot(tasks, benchmark="mt50")
    return dataclasses.replace(
        eval,
        name=f"{eval.name}-{difficulty.replace('_', '-')}",
        metadata={**eval.metadata, "difficulty": difficulty},
    )


MT10_STATE = mt10()
MT50_STATE = mt10(tasks=MT50, benchmark="mt50")
MT10_LEROBOT = mt10_lerobot()
# LeRobot's MT50, a group an Eval: 28 easy, 11 medium, 6 hard and 5 very hard tasks.
MT50_LEROBOT_EASY = mt50_lerobot("easy")
MT50_LEROBOT_MEDIUM = mt50_lerobot("medium")
MT50_LEROBOT_HARD = mt50_lerobot("hard")
MT50_LEROBOT_VERY_HARD = mt50_lerobot("very_hard")
MT10_LEROBOT_04 = mt10_lerobot(version="0.4.4")
