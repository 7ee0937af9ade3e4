"""The pipelines the goldens pin: one chunk-predicting pipeline (codec, ChunkPlayer, latency,
harness) on a rendered MetaWorld task, and one plain simulator run per suite."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")  # rendering without a display

from policybench import keys
from policybench.harness import run_rollout
from policybench.perturbation import Grid, Perturbation
from policybench.policy.base import Chunk, ChunkSource, ModelCall, SessionContext, Step
from policybench.policy.chunk_player import ChunkPlayer, ChunkPolicy
from policybench.policy.codec import Codec, action_dims, rotate_180
from policybench.policy.latency import InferenceLatency, LatencyMode
from policybench.record.trace import CpuNumerics, TraceRecorder, canonical_trace
from policybench.rendering import env_render_problem
from policybench.spec import Eval, Plan
from policybench.world import World

PIPELINE_LATENCY_S = 0.03  # 2.4 control periods at 80 Hz: chunks land between ticks
# A new chunk when the last is played out: each call then waits 3 steps (the delay) holding.
PIPELINE_EXECUTE_STEPS = None
PIPELINE_TIMEOUT_S = 0.6  # 48 steps at 80 Hz
PIPELINE_CODEC = Codec("golden", (rotate_180(keys.IMAGE), action_dims(4)))
# One perturbed scene per axis of the pipeline's Eval (the GoldenReacher reads the image, so the
# camera and light axes change its actions, not its observations alone).
PERTURBED_GOLDENS = {
    "action-noise": Perturbation("action_noise", 0.3),
    "obs-noise": Perturbation("obs_noise", 0.01),
    "camera-pose": Perturbation("camera_pose", 0.05),
    "lighting": Perturbation("lighting", 0.5),
    "colour": Perturbation("colour", 0.3),
    "grid-camera-pose-action-noise": Grid(
        (Perturbation("camera_pose", 0.05), Perturbation("action_noise", 0.3))
    ),
}


class GoldenReacher:
    """A deterministic chunk model: 8 waypoints towards the goal it reads from the state, lifted
    by how much brighter the image's top half is than its bottom half (so image orientation
    matters). Two extra action dimensions carry (chunk number, waypoint index) for the trace."""

    name = "golden-reacher"
    horizon = 8

    def open(self, context: SessionContext) -> Callable[[Any], Chunk]:
        chunks = 0

        def predict(obs: Any) -> Chunk:
            nonlocal chunks
            state, image = obs[keys.STATE], obs[keys.IMAGE].astype(np.float64)
            half = image.shape[0] // 2
            lift = (image[:half].mean() - image[half:].mean()) / 255.0
            toward = np.clip((state[36:39] - state[0:3]) * 8.0, -1.0, 1.0)
            rows = [
                [*(toward * (1.0 - k / (2 * self.horizon))), -1.0, chunks, k]
                for k in range(self.horizon)
            ]
            actions = np.array(rows)
            actions[:, 2] += lift
            chunks += 1
            return Chunk(actions, context.control_hz)

        return predict

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "horizon": self.horizon}


class WaypointTap:
    """A Policy: a ChunkPolicy over `model` that notes, by sim time, which waypoint (chunk
    number, index) each call played. The model's chunks carry both in two action dimensions
    that the codec drops; a played command is matched to the chunk row it was cut from."""

    def __init__(self, model: GoldenReacher, codec: Codec, **play: Any) -> None:
        self.rows: dict[bytes, list[int]] = {}
        self.inner = ChunkPolicy(_NotingModel(model, self.rows), codec, **play)
        self.name = self.inner.name
        self.waypoints: dict[int, list[int] | None] = {}

    def new_session(self, context: SessionContext) -> _TappedSession:
        return _TappedSession(self.inner.new_session(context), self)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


@dataclasses.dataclass(frozen=True)
class _NotingModel:
    """GoldenReacher, noting each chunk row's (chunk number, index) by its played dimensions."""

    model: GoldenReacher
    rows: dict[bytes, list[int]]

    @property
    def name(self) -> str:
        return self.model.name

    def open(self, context: SessionContext) -> ChunkSource:
        source = self.model.open(context)

        def predict(obs: Any) -> Chunk:
            chunk = source(obs)
            for row in chunk.actions:
                self.rows.setdefault(row[:4].tobytes(), [int(v) for v in row[4:6]])
            return chunk

        return predict

    def describe(self) -> dict[str, Any]:
        return self.model.describe()


class _TappedSession:
    def __init__(self, player: ChunkPlayer, tap: WaypointTap) -> None:
        self._player = player
        self._tap = tap

    @property
    def calls(self) -> list[ModelCall]:
        return self._player.calls

    def __call__(self, obs: Any, time_ns: int) -> Step:
        step = self._player(obs, time_ns)
        if step.commands is not None:
            self._tap.waypoints[time_ns] = self._tap.rows.get(step.commands.tobytes())
        return step


def pipeline_trace(
    latency_s: float = PIPELINE_LATENCY_S,
    codec: Codec = PIPELINE_CODEC,
    perturbation: Perturbation | None = None,
) -> dict[str, Any]:
    """GoldenReacher -> codec -> ChunkPlayer (fixed latency, a chunk at a time) -> harness, on
    MetaWorld reach-v3 seen through a 64x64 corner camera; `perturbation` on its scene."""
    from policybench.suites.metaworld import mt10

    eval = mt10(camera="corner", size=64, shadows=False)
    rollout = dataclasses.replace(
        _first_rollout(eval, "reach-v3"), timeout_s=PIPELINE_TIMEOUT_S, perturbation=perturbation
    )
    tap = WaypointTap(
        GoldenReacher(),
        codec,
        execute_steps=PIPELINE_EXECUTE_STEPS,
        latency=InferenceLatency(LatencyMode.FIXED, latency_s),
    )
    recorder = TraceRecorder()
    episode = run_rollout(rollout, _world(eval), tap, recorder)
    return canonical_trace(episode, recorder.observations, tap.waypoints, calls=True)


@dataclasses.dataclass(frozen=True)
class FixedActions:
    """Plays one fixed action sequence as a single chunk."""

    actions: np.ndarray
    name: str = "fixed-actions"

    def open(self, context: SessionContext) -> Callable[[Any], Chunk]:
        return lambda obs: Chunk(self.actions, context.control_hz)

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, "length": len(self.actions)}


def _pusht_circle(steps: int = 40) -> np.ndarray:
    angles = np.linspace(0.0, 2 * np.pi, steps, endpoint=False)
    return np.stack([256 + 150 * np.cos(angles), 256 + 150 * np.sin(angles)], axis=1)


def _aloha_reach(steps: int = 30) -> np.ndarray:
    """From gym-aloha's rest pose, both arms swing their waists apart and reach forward a little;
    grippers half open. Gentle, so the trace is no chaotic flailing."""
    k = np.arange(steps)[:, None] / steps
    rest = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0])
    reach = np.hstack([0.2 * np.sin(np.pi * k), 0.2 * k, -0.2 * k, 0 * k, 0.1 * k, 0 * k])
    left, right = rest + reach, rest + reach * [-1, 1, 1, 1, 1, 1]
    gripper = np.full((steps, 1), 0.5)
    return np.hstack([left, gripper, right, gripper])


def _waves(steps: int, dims: int) -> np.ndarray:
    """Each dimension a slow sine of its own phase, within [-0.5, 0.5]: actions for a suite whose
    actions are normalized joint commands."""
    k = np.arange(steps)[:, None] / steps
    return 0.5 * np.sin(2 * np.pi * k + np.arange(dims)[None, :])


def _libero_moves(steps: int = 8) -> np.ndarray:
    """End-effector deltas round a small circle while descending; the gripper closes at the end."""
    angles = np.linspace(0.0, 2 * np.pi, steps, endpoint=False)[:, None]
    moves = np.hstack([0.5 * np.cos(angles), 0.5 * np.sin(angles), -0.3 + 0 * angles])
    gripper = np.where(np.arange(steps) < steps // 2, -1.0, 1.0)[:, None]
    return np.hstack([moves, np.zeros((steps, 3)), gripper])


def _sim_goldens() -> dict[str, Callable[[], tuple[Eval, str, Any, float | None]]]:
    def metaworld(task: str, name: str = "MT10_STATE"):
        from policybench.suites import metaworld

        eval = getattr(metaworld, name)
        return eval, task, eval.scripted(), None

    def gym_hil(pixels: bool):
        from policybench.suites import gym_hil as suite

        eval = suite.GYM_HIL_PIXELS if pixels else suite.GYM_HIL
        steps = 3 if pixels else 20
        actions = 0.05 * _waves(steps, 7)  # the target moved by up to 2.5 cm a step
        return eval, "PandaPickCube", FixedActions(actions), steps / eval.control_hz

    def metaworld_lerobot(difficulty: str, task: str):
        from policybench.suites import metaworld

        # LeRobot's protocol, 480x480: its first observation and three steps pin the staging.
        eval = getattr(metaworld, f"MT50_LEROBOT_{difficulty.upper()}")
        return eval, task, FixedActions(_waves(3, 4)), 3 / eval.control_hz

    def ml45(split: str, task: str):
        from policybench.suites import metaworld_ml

        eval = metaworld_ml.ML45_TRAIN if split == "train" else metaworld_ml.ML45_TEST
        return eval, task, FixedActions(_waves(20, 4)), 20 / eval.control_hz

    def ogbench():
        from policybench.suites.ogbench import OGBENCH_CUBE_SINGLE

        # The cube oracle's first second (20 steps): the arm over the cube, the goal beside it.
        eval = OGBENCH_CUBE_SINGLE
        return eval, "task1_horizontal", eval.scripted(), 20 / eval.control_hz

    def dm_control():
        from policybench.suites.dm_control_manipulation import DM_CONTROL_MANIPULATION as eval

        # The arm's joints and the fingers swung slowly (a third of their speed limits), 20 steps.
        return eval, "lift_brick", FixedActions(0.2 * _waves(20, 9)), 20 / eval.control_hz

    def playground():
        from policybench.suites.playground import PLAYGROUND_PANDA as eval

        # EnvPool's PandaPickCube, its joint targets swung slowly for 20 steps.
        return eval, "PandaPickCube", FixedActions(0.5 * _waves(20, 8)), 20 / eval.control_hz

    def panda_gym():
        from policybench.suites.panda_gym import PANDA_GYM_REACH as eval

        # panda-gym's README policy on Reach, its first 10 steps (0.4 s).
        return eval, "Reach", eval.scripted(), 10 / eval.control_hz

    def pusht():
        from policybench.suites.pusht import PUSHT

        return PUSHT, "push-t", FixedActions(_pusht_circle()), 4.0

    def aloha():
        from policybench.suites.aloha import Rendering, aloha

        eval = aloha(Rendering(size=(120, 160), shadows=False))  # cheap frames; same physics
        return eval, "transfer_cube", FixedActions(_aloha_reach()), 0.6

    def libero():
        from policybench.suites.libero import OPENPI, libero

        # Rollout 0 as openpi stages it (seed 7, the env's first reset, init state 0), openpi's
        # settle steps, 64x64 frames (cheap; same physics and staging), 8 actions.
        protocol = dataclasses.replace(OPENPI, name="golden", camera_size=64)
        return libero("libero_spatial", protocol), "task0", FixedActions(_libero_moves()), 0.4

    def libero_staged(suite: str, task: str, rollout: int, lerobot: bool):
        from policybench.suites.libero import LEROBOT, OPENPI, libero

        # The first observation of a later rollout (one step): the staging alone.
        protocol = dataclasses.replace(LEROBOT if lerobot else OPENPI, camera_size=64)
        eval = libero(suite, dataclasses.replace(protocol, name=f"golden-{protocol.name}"))
        eval = dataclasses.replace(eval, plan=_FromInitState(eval.plan, rollout))
        return eval, task, FixedActions(_libero_moves(1)), 0.05

    def robotics(name: str, task: str):
        from policybench.suites import gymnasium_robotics as suite

        eval = suite.KITCHEN if name == "kitchen" else suite.adroit(task)
        actions = _waves(20, eval.make_env(task).action_space.shape[0])
        return eval, task, FixedActions(actions), 20 / eval.control_hz

    def lerobot_plugin():
        from policybench.suites.lerobot_env import plugin_eval

        # lerobot_env_so101's pick-cube, its block placed by the seed (random_block_position).
        eval = plugin_eval("lerobot_env_so101", name="so101-placed", random_block_position=True)
        return eval, "SO101PickCube-v0", FixedActions(_waves(20, 4)), 2.0

    return {
        "metaworld-reach-v3": lambda: metaworld("reach-v3"),
        "so101-pick-cube": lerobot_plugin,
        "kitchen-microwave": lambda: robotics("kitchen", "microwave"),
        "adroit-door": lambda: robotics("adroit", "door"),
        "metaworld-pick-place-v3": lambda: metaworld("pick-place-v3"),
        "metaworld-mt50-stick-pull-v3": lambda: metaworld("stick-pull-v3", "MT50_STATE"),
        "metaworld-mt50-lerobot-easy-faucet-open": lambda: metaworld_lerobot(
            "easy", "faucet-open-v3"
        ),
        "metaworld-mt50-lerobot-medium-hammer": lambda: metaworld_lerobot("medium", "hammer-v3"),
        "metaworld-mt50-lerobot-hard-assembly": lambda: metaworld_lerobot("hard", "assembly-v3"),
        "metaworld-mt50-lerobot-very-hard-stick-pull": lambda: metaworld_lerobot(
            "very_hard", "stick-pull-v3"
        ),
        "metaworld-ml45-train-reach-wall": lambda: ml45("train", "reach-wall-v3"),
        "gym-hil-pick-cube": lambda: gym_hil(False),
        "gym-hil-pixels-pick-cube": lambda: gym_hil(True),
        "metaworld-ml45-test-door-lock": lambda: ml45("test", "door-lock-v3"),
        "pusht": pusht,
        "ogbench-cube-single": ogbench,
        "dm-control-lift-brick": dm_control,
        "playground-panda-pick-cube": playground,
        "panda-gym-reach": panda_gym,
        "aloha-transfer-cube": aloha,
        "libero-spatial-task0": libero,
        "libero-spatial-task4-rollout3": lambda: libero_staged("libero_spatial", "task4", 3, False),
        "libero-10-task8-lerobot-rollout2": lambda: libero_staged("libero_10", "task8", 2, True),
    }


@dataclasses.dataclass(frozen=True)
class _FromInitState:
    """A LIBERO plan whose tasks start at init state `first`: a golden pins a later rollout
    without running the ones before it (their numbering is the full plan's)."""

    plan: Plan
    first: int

    def __call__(self, eval_name: str, rollouts_per_task: int, base_seed: int):
        from policybench.suites.libero.staging import INIT_STATE

        planned = self.plan(eval_name, self.first + rollouts_per_task, base_seed)
        return tuple(r for r in planned if r.scene.fields[INIT_STATE] >= self.first)


SIM_GOLDENS = tuple(_sim_goldens())
SIM_REQUIRES = {name: "metaworld" for name in SIM_GOLDENS if name.startswith("metaworld-")}
SIM_REQUIRES["pusht"] = "gym_pusht"
SIM_REQUIRES["ogbench-cube-single"] = "ogbench"
SIM_REQUIRES["dm-control-lift-brick"] = "dm_control"
SIM_REQUIRES["playground-panda-pick-cube"] = "envpool"
SIM_REQUIRES["panda-gym-reach"] = "panda_gym"
SIM_REQUIRES["kitchen-microwave"] = SIM_REQUIRES["adroit-door"] = "gymnasium_robotics"
SIM_REQUIRES["aloha-transfer-cube"] = "gym_aloha"
SIM_REQUIRES["so101-pick-cube"] = "lerobot_env_so101"
SIM_REQUIRES["gym-hil-pick-cube"] = SIM_REQUIRES["gym-hil-pixels-pick-cube"] = "gym_hil"
SIM_REQUIRES["libero-spatial-task0"] = "libero"
SIM_REQUIRES["libero-spatial-task4-rollout3"] = "libero"
SIM_REQUIRES["libero-10-task8-lerobot-rollout2"] = "libero"


# A perturbed scene of each suite with a fixed-action golden (MetaWorld's every axis is pinned
# by PERTURBED_GOLDENS): the suite's own staging of an axis, on the same scene and actions.
PERTURBED_SIM_GOLDENS = {
    "aloha-transfer-cube": Perturbation("camera_pose", 0.05),
    "libero-spatial-task0": Grid((Perturbation("lighting", 0.5), Perturbation("colour", 0.3))),
    "pusht": Perturbation("action_noise", 0.3),
}


def sim_trace(
    name: str,
    perturb: Callable[[Any], None] | None = None,
    perturbation: Perturbation | Grid | None = None,
) -> dict[str, Any]:
    """Seed 0 of a suite's env under its scripted policy or a fixed action sequence; `perturb`
    may change the env after it is built (the golden tests use it to show the goldens bite);
    `perturbation`: the scene perturbed along its axes."""
    eval, task, model, timeout_s = _sim_goldens()[name]()
    if perturb is not None:
        make_env = eval.make_env

        def perturbed(task: str):
            env = make_env(task)
            perturb(env)
            return env

        eval = dataclasses.replace(eval, make_env=perturbed)
    rollout = dataclasses.replace(_first_rollout(eval, task), perturbation=perturbation)
    if timeout_s is not None:
        rollout = dataclasses.replace(rollout, timeout_s=timeout_s)
    recorder = TraceRecorder()
    episode = run_rollout(rollout, _world(eval), ChunkPolicy(model), recorder)
    return canonical_trace(episode, recorder.observations)


def isolated_trace(
    eval: Eval,
    task: str,
    actions: np.ndarray,
    timeout_s: float,
    numerics: CpuNumerics | None = None,
) -> dict[str, Any]:
    """Rollout 0 of `task` of an Eval whose env runs in an interpreter of its own, `actions`
    played as one chunk for `timeout_s`; skipped where that interpreter is not installed, or
    the rendering device its env needs is missing (SAPIEN's Vulkan device). `numerics`: the
    tolerance its simulated values hold to where they depend on the CPU (stated in the golden,
    which then keeps its images' thumbnails to compare them within a level or two)."""
    import pytest

    from policybench.envserver.interpreters import InterpreterMissing, python_of
    from policybench.rendering import NEEDS_DEVICE

    try:
        python_of(eval.make_env.interpreter)
    except InterpreterMissing as missing:
        pytest.skip(str(missing))
    lacking = env_render_problem(eval) if eval.renderer in NEEDS_DEVICE else None
    if lacking is not None:
        pytest.skip(f"{eval.name}: {lacking}")
    rollout = dataclasses.replace(_first_rollout(eval, task), timeout_s=timeout_s)
    recorder = TraceRecorder(levels=numerics is not None)
    world = World(eval)
    try:
        episode = run_rollout(rollout, world, ChunkPolicy(FixedActions(actions)), recorder)
    finally:
        world.close()
    python = str(python_of(eval.make_env.interpreter))  # its numerics are the env's
    return canonical_trace(episode, recorder.observations, numerics=numerics, python=python)


def _world(eval: Eval) -> World:
    """The Eval's World, once this machine has shown it renders what the Eval needs (a GL
    backend that hangs would otherwise hang the golden in its first reset)."""
    unrenderable = env_render_problem(eval)
    if unrenderable is not None:
        raise RuntimeError(f"{eval.name}: {unrenderable}")
    return World(eval)


def _first_rollout(eval: Eval, task: str):
    return next(r for r in eval.rollouts(1, 0) if r.scene.task == task)
