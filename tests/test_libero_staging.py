"""LIBERO staging against its sources: a plain loop written like openpi's LIBERO example stages
episodes 0..2 of two tasks in two suites, one written like LeRobot's LiberoEnv (and LeRobot's env
itself, where it is installed) episodes 0..2, and policybench, staging the same rollouts out of
order on an env of its own, shows the same first observation, sim state and body poses, bit for
bit. The rules themselves need no simulator."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from policybench import keys
from policybench.spec import Eval
from policybench.suites import registered_evals
from policybench.suites.libero import (
    LEROBOT,
    LIBERO_SPATIAL,
    LIBERO_SPATIAL_LEROBOT,
    OPENPI,
    LiberoProtocol,
    libero,
    task_id,
)
from policybench.suites.libero.staging import INIT_STATE, LeRobotStaging, OpenpiStaging, ResetPlan
from policybench.suites.libero.tasks import TASKS
from policybench.world import World

REPO = Path(__file__).resolve().parents[1]
CAMERA = 64  # staging does not depend on the render size, and small frames are cheaper
SETTLE_ACTION = [0.0] * 6 + [-1.0]
EPISODES = 3  # each costs a hard reset (seconds) in the reference loop and in policybench's env
# policybench stages the rollouts in this order, on an env of its own: the last episode first
# (its resets replayed on a fresh env), then back to the first, then forward again.
ORDER = (2, 0, 1)
# A drawer opened by LIBERO's joint sampler with a bowl placed inside it, and a stove turned on:
# the tasks whose resets depend most on the env's history.
REPLAYED = (("libero_spatial", 4), ("libero_10", 8))
LEROBOT_START_SEED = 1000  # lerobot-eval's default --seed


# --- The rules, without a simulator ---


def test_openpi_staging_seeds_a_tasks_env_once_with_openpis_seed_plus_the_base_seed():
    rollouts = [r for r in LIBERO_SPATIAL.rollouts(3, 0) if r.scene.task == "task0"]
    assert [r.id for r in rollouts] == [f"task0/seed=7/init_state={i}" for i in range(3)]
    assert LIBERO_SPATIAL.rollouts(1, 5)[0].scene.seed == 12
    assert OpenpiStaging().plan(7, 3) == ResetPlan(seed=7, init_state=3, replayed=3, builds=1)


def test_lerobot_staging_seeds_episode_i_with_the_start_seed_plus_i():
    rollouts = [r for r in LIBERO_SPATIAL_LEROBOT.rollouts(3, 0) if r.scene.task == "task0"]
    assert [(r.scene.seed, r.scene.fields[INIT_STATE]) for r in rollouts] == [
        (1000, 0),
        (1001, 1),
        (1002, 2),
    ]
    assert LIBERO_SPATIAL_LEROBOT.rollouts(1, 5)[0].scene.seed == 1005
    assert LeRobotStaging().plan(1002, 2) == ResetPlan(seed=1002, init_state=2, builds=2)


def test_lerobot_staging_counts_the_resets_of_earlier_batches_in_a_sub_env():
    assert [LeRobotStaging().plan(1000 + e, e).builds for e in (0, 49)] == [2, 2]
    one_by_one = LeRobotStaging(batch_size=1)
    assert [one_by_one.plan(1000 + e, e).builds for e in range(4)] == [2, 3, 4, 5]
    assert LeRobotStaging(batch_size=10).plan(1023, 23).builds == 4
    with pytest.raises(ValueError, match="batch size must be >= 1, got 0"):
        LeRobotStaging(batch_size=0)


def test_the_record_states_each_protocols_staging_rule():
    openpi = LIBERO_SPATIAL.metadata
    assert (openpi["staging"], openpi["staging_seed"]) == ("openpi", 7)
    assert "reset i + 1 times" in openpi["staging_rule"]
    lerobot = LIBERO_SPATIAL_LEROBOT.metadata
    assert (lerobot["staging"], lerobot["staging_seed"], lerobot["lerobot_batch_size"]) == (
        "lerobot",
        1000,
        50,
    )
    assert (lerobot["max_steps"], lerobot["camera_size"], lerobot["settle_steps"]) == (280, 256, 10)


def test_the_lerobot_variant_is_reachable_from_the_command_line():
    assert {f"{suite}-lerobot" for suite in TASKS} <= set(registered_evals())
    command = [sys.executable, "-m", "pytest", "benchmarks/test_libero.py", "--collect-only"]
    command += ["-q", "-p", "no:cacheprovider", "--suite", "spatial-lerobot", "--rollouts", "2"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    items = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(items) == 20, done.stdout[-2000:] + done.stderr[-2000:]  # 10 tasks x 2 rollouts
    second = "test_libero_spatial_lerobot[task0/seed=1001/init_state=1]"
    assert f"benchmarks/test_libero.py::{second}" in items


# --- Replays on the real LIBERO env ---


@dataclass(frozen=True)
class Staged:
    """What a staged episode shows the policy (images, 8-d state) and what made it: the sim
    state and the model's body poses (the fixtures a reset moves)."""

    image: np.ndarray
    wrist_image: np.ndarray
    state: np.ndarray
    sim_state: np.ndarray
    body_pos: np.ndarray
    body_quat: np.ndarray

    def assert_equals(self, other: Staged, what: str) -> None:
        for name in (field.name for field in dataclasses.fields(self)):
            np.testing.assert_array_equal(
                getattr(self, name), getattr(other, name), err_msg=f"{what}: {name}"
            )


def staged_by_libero(raw: dict[str, np.ndarray], env: Any) -> Staged:
    """A LIBERO env's (`OffScreenRenderEnv`) raw observation and state."""
    from policybench.suites.libero.sim_env import state_of

    model = env.sim.model
    return Staged(
        raw["agentview_image"].copy(),
        raw["robot0_eye_in_hand_image"].copy(),
        state_of(raw),
        env.get_sim_state().copy(),
        model.body_pos.copy(),
        model.body_quat.copy(),
    )


def staged_by_policybench(eval: Eval, task: str, order: Sequence[int]) -> dict[int, Staged]:
    """The first observation of rollouts `order` (by init state) of `task`, staged in that order
    by a World of its own."""
    planned = eval.rollouts(max(order) + 1, 0)
    by_init_state = {r.scene.fields[INIT_STATE]: r for r in planned if r.scene.task == task}
    world = World(eval)
    staged = {}
    try:
        for index in order:
            obs = world.reset(by_init_state[index].scene)
            env = world.env_for(task)
            staged[index] = Staged(
                obs[keys.IMAGE],
                obs[keys.WRIST_IMAGE],
                obs[keys.STATE],
                env.sim_state().copy(),
                env.libero.sim.model.body_pos.copy(),
                env.libero.sim.model.body_quat.copy(),
            )
    finally:
        world.close()
    return staged


@pytest.fixture(scope="module")
def libero_ready() -> None:
    """LIBERO set up without a prompt (policybench writes LIBERO's config)."""
    for module in ("libero", "robosuite", "bddl"):
        pytest.importorskip(module, reason=LIBERO_SPATIAL.install)
    from policybench.suites.libero.env import import_libero

    import_libero()


def libero_files(suite: str, index: int) -> tuple[str, np.ndarray]:
    """A task's problem file and init states, where LIBERO's benchmark keeps them (its
    `problem_folder` is the suite; the init states are read without torch)."""
    from libero.libero import get_libero_path

    from policybench.suites.libero.env import load_init_states

    name = TASKS[suite][index]
    bddl = Path(get_libero_path("bddl_files")) / suite / f"{name}.bddl"
    return str(bddl), load_init_states(
        Path(get_libero_path("init_states")) / suite / f"{name}.pruned_init"
    )


def play_on(env: Any, steps: int, rng: np.random.Generator) -> None:
    """The episode goes on for a few actions, as a policy's would, before the next reset."""
    for _ in range(steps):
        env.step(rng.uniform(-1.0, 1.0, 7).tolist())


def openpi_loop(suite: str, index: int, episodes: int) -> list[Staged]:
    """Episodes 0.. of one task as openpi's examples/libero/main.py stages them: numpy seeded
    with 7, one env built for the task and seeded with 7, then per episode: reset, init state i,
    10 dummy steps (the first observation), and the episode goes on."""
    from libero.libero.envs import OffScreenRenderEnv

    bddl, init_states = libero_files(suite, index)
    np.random.seed(7)
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=CAMERA, camera_widths=CAMERA)
    env.seed(7)
    rng, staged = np.random.default_rng(0), []
    try:
        for episode in range(episodes):
            env.reset()
            raw = env.set_init_state(init_states[episode])
            for _ in range(10):
                raw, _, _, _ = env.step(SETTLE_ACTION)
            staged.append(staged_by_libero(raw, env))
            play_on(env, 2, rng)
    finally:
        env.close()
    return staged


def lerobot_loop(suite: str, index: int, episodes: int) -> list[Staged]:
    """Episodes 0.. of one task as lerobot-eval with `--eval.batch_size 1` stages them through
    LeRobot's LiberoEnv: the env is built and reset once unseeded; each episode seeds numpy
    (start seed + episode) right before its reset, sets init state `episode`, takes 10 dummy
    steps (the first observation), and goes on."""
    from libero.libero.envs import OffScreenRenderEnv

    bddl, init_states = libero_files(suite, index)
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=CAMERA, camera_widths=CAMERA)
    env.reset()
    rng, staged = np.random.default_rng(0), []
    try:
        for episode in range(episodes):
            env.seed(LEROBOT_START_SEED + episode)
            env.reset()
            raw = env.set_init_state(init_states[episode % len(init_states)])
            for _ in range(10):
                raw, _, _, _ = env.step(SETTLE_ACTION)
            staged.append(staged_by_libero(raw, env))
            play_on(env, 2, rng)
    finally:
        env.close()
    return staged


def small(suite: str, protocol: LiberoProtocol) -> Eval:
    return libero(suite, dataclasses.replace(protocol, camera_size=CAMERA))


def assert_replayed(reference: list[Staged], ours: dict[int, Staged], who: str) -> None:
    for episode, theirs in enumerate(reference):
        ours[episode].assert_equals(theirs, f"episode {episode} as {who} stages it")
    # The comparison can fail: a reset moves the fixtures, so episodes differ where it matters.
    assert not np.array_equal(reference[0].body_pos, reference[1].body_pos)


@pytest.mark.slow
@pytest.mark.parametrize(("suite", "index"), REPLAYED, ids=[f"{s}-task{i}" for s, i in REPLAYED])
def test_openpi_protocol_stages_what_openpis_example_stages(libero_ready, suite, index):
    reference = openpi_loop(suite, index, EPISODES)
    ours = staged_by_policybench(small(suite, OPENPI), task_id(index), ORDER)
    assert_replayed(reference, ours, "openpi's example")


@pytest.mark.slow
def test_lerobot_protocol_stages_what_lerobots_env_stages(libero_ready):
    # LeRobot seeds every episode and replays no reset: one task with a joint sampler (the
    # stove's knob, drawn once per build of the env) and three episodes suffice.
    suite, index = REPLAYED[1]
    reference = lerobot_loop(suite, index, 3)
    one_by_one = dataclasses.replace(LEROBOT, staging=LeRobotStaging(batch_size=1))
    ours = staged_by_policybench(small(suite, one_by_one), task_id(index), (2, 0, 1))
    assert_replayed(reference, ours, "LeRobot's env (batch size 1)")


def staged_by_lerobot(env: Any, seed: int) -> Staged:
    """The first observation of LeRobot's LiberoEnv after `reset(seed=seed)`."""
    from policybench.suites.libero.sim_env import quat_to_axis_angle

    obs, _ = env.reset(seed=seed)
    robot = obs["robot_state"]
    state = np.concatenate(
        (robot["eef"]["pos"], quat_to_axis_angle(robot["eef"]["quat"]), robot["gripper"]["qpos"])
    )
    libero_env = env._env
    model = libero_env.sim.model
    return Staged(
        obs["pixels"]["image"].copy(),
        obs["pixels"]["image2"].copy(),
        state,
        libero_env.get_sim_state().copy(),
        model.body_pos.copy(),
        model.body_quat.copy(),
    )


@pytest.mark.slow
def test_lerobot_protocol_stages_what_lerobot_044s_own_env_stages(libero_ready):
    lerobot_libero = pytest.importorskip("lerobot.envs.libero", reason="needs LeRobot and LIBERO")
    from libero.libero import benchmark  # imports torch, which LeRobot brings

    suites = benchmark.get_benchmark_dict()
    suite, index = REPLAYED[0]

    def lerobot_env(episode_index: int, n_envs: int):
        return lerobot_libero.LiberoEnv(
            task_suite=suites[suite](),
            task_id=index,
            task_suite_name=suite,
            obs_type="pixels_agent_pos",
            observation_width=CAMERA,
            observation_height=CAMERA,
            episode_index=episode_index,
            n_envs=n_envs,
        )

    # --eval.batch_size 1: one env runs episodes 0.. in turn.
    env = lerobot_env(0, 1)
    try:
        reference = [staged_by_lerobot(env, LEROBOT_START_SEED + e) for e in range(3)]
    finally:
        env.close()
    one_by_one = dataclasses.replace(LEROBOT, staging=LeRobotStaging(batch_size=1))
    ours = staged_by_policybench(small(suite, one_by_one), task_id(index), (2, 0, 1))
    assert_replayed(reference, ours, "LeRobot's own env (batch size 1)")
    # The default, --eval.batch_size 50: episode 3 is sub-env 3's first episode.
    env = lerobot_env(3, 50)
    try:
        theirs = staged_by_lerobot(env, LEROBOT_START_SEED + 3)
    finally:
        env.close()
    ours = staged_by_policybench(small(suite, LEROBOT), task_id(index), (3,))
    ours[3].assert_equals(theirs, "episode 3 as LeRobot's own env stages it (batch size 50)")


@pytest.mark.parametrize("suite", ["libero_spatial", "libero_10", "libero_90"])
def test_the_model_a_replay_compiles_places_every_body_where_the_full_model_does(
    libero_ready, suite
):
    """A replay compiles the task's model without textures or visual-only geoms (it only needs
    the body poses; the full model would add ~600 MB to the peak beside the live env's)."""
    import mujoco
    from libero.libero.envs import OffScreenRenderEnv

    from policybench.suites.libero.replay import bodies_only

    bddl, _ = libero_files(suite, 0)
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=CAMERA, camera_widths=CAMERA)
    try:
        xml, processor = env.env.model.get_xml(), env.env._xml_processor
    finally:
        env.close()
    xml = xml if processor is None else processor(xml)
    full, reduced = (mujoco.MjModel.from_xml_string(x) for x in (xml, bodies_only(xml)))
    assert reduced.ntex == 0 < full.ntex
    assert reduced.nmeshvert < full.nmeshvert / 10
    assert reduced.nbody == full.nbody
    np.testing.assert_array_equal(reduced.body_pos, full.body_pos)
    np.testing.assert_array_equal(reduced.body_quat, full.body_quat)


# LeRobot 0.6.1's LiberoEnv as lerobot-eval makes and rolls it: sub-env `episode_index` of a
# vector env of `n_envs`, reset with the seed start seed + episode and lerobot-eval's new-rollout
# option; the first observation of each of its episodes, and a few actions after it.
LEROBOT_06_LOOP = """
import sys
import numpy as np
from policybench.suites.libero.env import import_libero

import_libero()  # LIBERO pointed at the asset tree found here, as in the parent
from libero.libero import benchmark
from lerobot.envs.libero import LiberoEnv

suite, index, camera, episode_index, n_envs, out, *seeds = sys.argv[1:]
env = LiberoEnv(
    task_suite=benchmark.get_benchmark_dict()[suite](),
    task_id=int(index),
    task_suite_name=suite,
    obs_type="pixels_agent_pos",
    observation_width=int(camera),
    observation_height=int(camera),
    episode_index=int(episode_index),
    n_envs=int(n_envs),
)
rng, saved = np.random.default_rng(0), {}
for seed in seeds:
    obs, _ = env.reset(seed=int(seed), options={"lerobot_new_rollout": True})
    robot, libero_env = obs["robot_state"], env._env
    saved[seed + ".image"] = obs["pixels"]["image"]
    saved[seed + ".wrist_image"] = obs["pixels"]["image2"]
    saved[seed + ".eef_pos"] = robot["eef"]["pos"]
    saved[seed + ".eef_quat"] = robot["eef"]["quat"]
    saved[seed + ".gripper_qpos"] = robot["gripper"]["qpos"]
    saved[seed + ".sim_state"] = libero_env.get_sim_state()
    saved[seed + ".body_pos"] = libero_env.sim.model.body_pos
    saved[seed + ".body_quat"] = libero_env.sim.model.body_quat
    for _ in range(2):
        env.step(rng.uniform(-1.0, 1.0, 7))
env.close()
np.savez(out, **saved)
"""


def lerobot_06_loop(
    root: Path, suite: str, index: int, episode_index: int, n_envs: int, seeds: Sequence[int]
) -> list[Staged]:
    """Episodes of one sub-env of LeRobot 0.6.1's LiberoEnv, run in a child interpreter."""
    from policybench.suites.libero.sim_env import quat_to_axis_angle
    from tests.lerobot_06 import child_env

    script, out = root / "lerobot_06_loop.py", root / f"staged-{episode_index}-{n_envs}"
    script.write_text(LEROBOT_06_LOOP)
    command = [sys.executable, str(script), suite, str(index), str(CAMERA)]
    command += [str(episode_index), str(n_envs), str(out), *map(str, seeds)]
    subprocess.run(command, check=True, env=child_env(root), timeout=600)
    saved = np.load(f"{out}.npz")
    return [
        Staged(
            saved[f"{seed}.image"],
            saved[f"{seed}.wrist_image"],
            np.concatenate(
                (
                    saved[f"{seed}.eef_pos"],
                    quat_to_axis_angle(saved[f"{seed}.eef_quat"]),
                    saved[f"{seed}.gripper_qpos"],
                )
            ),
            saved[f"{seed}.sim_state"],
            saved[f"{seed}.body_pos"],
            saved[f"{seed}.body_quat"],
        )
        for seed in seeds
    ]


@pytest.mark.slow
def test_lerobot_protocol_stages_what_lerobot_06s_own_env_stages(libero_ready, tmp_path):
    """LeRobot 0.6.1's LiberoEnv (its module as the wheel ships it: tests/lerobot_06.py) no
    longer resets itself at a success, so the LeRobot protocol's episode i is init state i in
    any run: the one-by-one batch and the default 50 stage what its own env stages."""
    pytest.importorskip("torch", reason="LeRobot 0.6.1's LiberoEnv loads init states with torch")
    from tests.lerobot_06 import importable

    root = importable(tmp_path, "lerobot/envs/libero.py")
    suite, index = REPLAYED[0]
    seeds = [LEROBOT_START_SEED + e for e in range(EPISODES)]
    reference = lerobot_06_loop(root, suite, index, 0, 1, seeds)  # --eval.batch_size 1
    one_by_one = dataclasses.replace(LEROBOT, staging=LeRobotStaging(batch_size=1))
    ours = staged_by_policybench(small(suite, one_by_one), task_id(index), ORDER)
    assert_replayed(reference, ours, "LeRobot 0.6.1's own env (batch size 1)")
    # --eval.batch_size 50: episode 3 is sub-env 3's first episode.
    (theirs,) = lerobot_06_loop(root, suite, index, 3, 50, [LEROBOT_START_SEED + 3])
    ours = staged_by_policybench(small(suite, LEROBOT), task_id(index), (3,))
    ours[3].assert_equals(theirs, "episode 3 as LeRobot 0.6.1's own env stages it (batch 50)")
