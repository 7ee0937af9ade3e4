"""policybench's LeRobot MetaWorld staging against LeRobot 0.6.1's own MetaworldEnv (its module,
unchanged, in a child interpreter: see tests/lerobot_06.py): the scenes, instructions, images and
trajectories of `metaworld-mt10-lerobot`, and how they differ from the 0.4 staging's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from policybench import keys
from tests.lerobot_06 import child_env, importable

pytest.importorskip("metaworld", reason="needs the metaworld extra")

from policybench.suites.metaworld import (
    LEROBOT_START_SEED,
    MT10_LEROBOT,
    MT10_LEROBOT_04,
    LeRobotMetaWorld,
)

TASK = "push-v3"
STEPS = 12
ACTIONS = np.random.default_rng(3).uniform(-1, 1, (STEPS, 4)).astype(np.float32)
SEEDS = (LEROBOT_START_SEED, LEROBOT_START_SEED + 1)

# LeRobot 0.6.1's env as lerobot-eval makes and rolls it (its rollout: reset(seed=...) with
# the seeds start_seed + episode, then step until the episode ends), one episode a seed.
THEIRS = """
import sys
import numpy as np
from lerobot.envs.metaworld import MetaworldEnv

task, steps, out, *seeds = sys.argv[1:]
actions = np.load(out + ".actions.npy")
env = MetaworldEnv(task=task, obs_type="pixels_agent_pos")
saved = {"description": np.array(env.task_description)}
for seed in map(int, seeds):
    obs, _ = env.reset(seed=seed)
    saved[f"{seed}.first_image"] = obs["pixels"]
    saved[f"{seed}.first_state"] = env._env._get_obs()
    saved[f"{seed}.placement"] = env._env._last_rand_vec
    rewards, states = [], []
    for action in actions[: int(steps)]:
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        states.append(obs["agent_pos"])
    saved[f"{seed}.rewards"] = np.array(rewards)
    saved[f"{seed}.states"] = np.array(states)
    saved[f"{seed}.last_image"] = obs["pixels"]
env.close()
np.savez(out, **saved)
"""


@pytest.fixture(scope="module")
def theirs(tmp_path_factory) -> dict[str, np.ndarray]:
    root = importable(
        tmp_path_factory.mktemp("lerobot"),
        "lerobot/envs/metaworld.py",
        "lerobot/envs/metaworld_config.json",
    )
    out = str(root / "theirs")
    np.save(out + ".actions.npy", ACTIONS)
    script = root / "theirs.py"
    script.write_text(textwrap.dedent(THEIRS))
    command = [sys.executable, str(script), TASK, str(STEPS), out, *map(str, SEEDS)]
    subprocess.run(command, check=True, env=child_env(root), timeout=300)
    return dict(np.load(out + ".npz"))


def test_metaworld_lerobot_stages_lerobot_06s_scenes_images_and_trajectories(theirs):
    """Each seed's placement, first image and state, and the fixed actions' rewards, states and
    last image, bit for bit, the episodes run in lerobot-eval's order."""
    for seed, first_image in played(SEEDS, theirs).items():
        np.testing.assert_array_equal(first_image, theirs[f"{seed}.first_image"])
    placements = [theirs[f"{seed}.placement"] for seed in SEEDS]
    assert not np.array_equal(*placements)  # two seeds, two scenes


def test_a_scene_is_its_seeds_alone_but_its_first_frame_remembers_the_last_episode(theirs):
    """In the opposite order every placement, state, reward and later frame is the same: the
    seed alone decides the scene. The first frame is not quite: MetaWorld moves the goal's site
    at reset without recomputing where it is drawn, so the frame shows the site where the
    previous episode's kinematics left it (LeRobot's env does the same): here 3 and 8 of its
    230,400 pixels differ (by up to 34 levels)."""
    for seed, first_image in played(reversed(SEEDS), theirs).items():
        difference = np.abs(first_image.astype(int) - theirs[f"{seed}.first_image"])
        assert np.count_nonzero(difference.any(axis=-1)) <= 20


def played(seeds, theirs: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Each seed's episode under policybench's staging, in the given order, checked against
    LeRobot's bit for bit but for its first frame, which it returns."""
    env, first_images = LeRobotMetaWorld(TASK), {}
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            first_images[seed] = obs[keys.IMAGE]
            np.testing.assert_array_equal(env._env._last_rand_vec, theirs[f"{seed}.placement"])
            np.testing.assert_array_equal(obs[keys.STATE], theirs[f"{seed}.first_state"])
            rewards, states = [], []
            for action in ACTIONS:
                obs, reward, *_ = env.step(action)
                rewards.append(reward)
                states.append(obs[keys.STATE][:4])
            np.testing.assert_array_equal(rewards, theirs[f"{seed}.rewards"])
            np.testing.assert_array_equal(states, theirs[f"{seed}.states"])
            np.testing.assert_array_equal(obs[keys.IMAGE], theirs[f"{seed}.last_image"])
    finally:
        env.close()
    return first_images


def test_the_eval_seeds_and_instructs_as_lerobot_eval_06_does(theirs):
    """Rollout i of every task is lerobot-eval's episode i (--seed 1000 + i), told LeRobot's
    description of the task; the records name the version."""
    rollouts = [r for r in MT10_LEROBOT.rollouts(2, 0) if r.scene.task == TASK]
    assert [r.scene.seed for r in rollouts] == list(SEEDS)
    assert {r.instruction for r in rollouts} == {str(theirs["description"])}
    assert MT10_LEROBOT.metadata["lerobot_version"] == "0.6.1"
    assert MT10_LEROBOT_04.metadata["lerobot_version"] == "0.4.4"
    assert MT10_LEROBOT_04.name == "metaworld-mt10-lerobot-0.4"


def test_the_04_staging_shows_other_scenes_than_06s(theirs):
    """The same seed is another scene under LeRobot 0.4's staging (numpy's global stream): a
    LeRobot 0.4 number and a 0.6 one are not the same experiment."""
    rollout = next(r for r in MT10_LEROBOT_04.rollouts(1, 0) if r.scene.task == TASK)
    env = MT10_LEROBOT_04.make_env(TASK)
    try:
        env.reset(seed=SEEDS[0], options=dict(rollout.scene.fields))
        assert not np.array_equal(env._env._last_rand_vec, theirs[f"{SEEDS[0]}.placement"])
    finally:
        env.close()


# A task of each of LeRobot's MT50 difficulty groups (the Evals metaworld-mt50-lerobot-<group>).
MT50_TASKS = {
    "easy": "faucet-open-v3",
    "medium": "hammer-v3",
    "hard": "assembly-v3",
    "very_hard": "stick-pull-v3",
}


@pytest.mark.parametrize("difficulty", list(MT50_TASKS))
def test_mt50_groups_stage_lerobot_06s_first_observations(tmp_path, difficulty):
    """A task of each MT50 group, as its Eval stages rollout 0: the placement, first image and
    state and LeRobot's description equal LeRobot 0.6.1's env at lerobot-eval's first seed, and
    a few fixed actions' rewards and states after them."""
    from policybench.suites import metaworld

    eval = getattr(metaworld, f"MT50_LEROBOT_{difficulty.upper()}")
    task = MT50_TASKS[difficulty]
    assert eval.name == f"metaworld-mt50-lerobot-{difficulty.replace('_', '-')}"
    root = importable(tmp_path, "lerobot/envs/metaworld.py", "lerobot/envs/metaworld_config.json")
    out = str(root / "theirs")
    np.save(out + ".actions.npy", ACTIONS)
    (root / "theirs.py").write_text(textwrap.dedent(THEIRS))
    seed = LEROBOT_START_SEED
    command = [sys.executable, str(root / "theirs.py"), task, "4", out, str(seed)]
    subprocess.run(command, check=True, env=child_env(root), timeout=300)
    theirs = dict(np.load(out + ".npz"))
    rollout = next(r for r in eval.rollouts(1, 0) if r.scene.task == task)
    assert rollout.scene.seed == seed and rollout.instruction == str(theirs["description"])
    env = eval.make_env(task)
    try:
        obs, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(env._env._last_rand_vec, theirs[f"{seed}.placement"])
        np.testing.assert_array_equal(obs[keys.IMAGE], theirs[f"{seed}.first_image"])
        np.testing.assert_array_equal(obs[keys.STATE], theirs[f"{seed}.first_state"])
        played = [env.step(action) for action in ACTIONS[:4]]
    finally:
        env.close()
    np.testing.assert_array_equal([p[1] for p in played], theirs[f"{seed}.rewards"])
    np.testing.assert_array_equal([p[0][keys.STATE][:4] for p in played], theirs[f"{seed}.states"])
