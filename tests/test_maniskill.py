"""ManiSkill3's tasks, in their interpreter (ManiSkill 3.0.1, SAPIEN 3.0.3, CPU physics): each
Eval's first observation and a fixed action sequence's trajectory equal, bit for bit, a plain loop
written as ManiSkill's Diffusion Policy baseline evaluates on CPU (tests/maniskill_reference.py,
same interpreter, same stack). Skipped where the interpreter is not installed (`policybench env
install maniskill`); SAPIEN needs a Vulkan device (.ci/setup installs Mesa's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.rendering import SAPIEN, render_problem
from policybench.suites import maniskill, maniskill_primitives, maniskill_rdt
from policybench.world import World
from tests.interpreters import built_python

HERE = Path(__file__).resolve().parent
STEPS = 6
EVALS = [
    *maniskill.STATE_EVALS,
    maniskill.PICK_CUBE_RGB,
    maniskill.PUSH_T_RGB,
    maniskill_primitives.PLUG_CHARGER,
    maniskill_primitives.TWO_ROBOT_STACK_CUBE,  # both arms' actions, flattened
]


@pytest.fixture(scope="module")
def python() -> Path:
    python = built_python(maniskill.INTERPRETER)
    lacking = render_problem(SAPIEN, python=str(python))
    if lacking is not None:
        pytest.skip(lacking)
    return python


def reference(python: Path, task: str, obs_mode: str, seed: int, out: Path) -> dict:
    script = HERE / "maniskill_reference.py"
    command = [str(python), str(script), task, obs_mode, str(seed), str(STEPS), str(out)]
    subprocess.run(command, check=True, cwd=out.parent)
    with np.load(out) as saved:
        return dict(saved)


def seen(saved: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {
        key.removeprefix(f"{prefix}/"): value
        for key, value in saved.items()
        if key.startswith(f"{prefix}/") and key.rpartition("/")[2] not in ("reward", "success")
    }


def assert_same(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], at: str) -> None:
    """The baseline's observation entries, bit for bit (ours adds the state's named parts)."""
    for key, array in theirs.items():
        assert ours[key].dtype == array.dtype and ours[key].shape == array.shape, (at, key)
        assert np.array_equal(ours[key], array), (at, key)


@pytest.mark.parametrize("eval", EVALS, ids=[e.name for e in EVALS])
def test_first_observation_and_trajectory_are_the_baselines_bit_for_bit(eval, python, tmp_path):
    [rollout] = eval.rollouts(1, 0)
    task, seed = rollout.scene.task, rollout.scene.seed
    assert seed == maniskill.FIRST_SEED
    obs_mode = eval.metadata["obs_mode"]
    saved = reference(python, task, obs_mode, seed, tmp_path / "reference.npz")
    world = World(eval)
    try:
        first = world.reset(rollout.scene)
        assert_same(first, seen(saved, "first"), "first observation")
        succeeded = False
        for i, action in enumerate(saved["actions"]):
            step = world.step(action)
            assert_same(step.obs, seen(saved, f"step{i}"), f"step {i}")
            succeeded = succeeded or bool(saved[f"step{i}/success"])
            assert step.reward == saved[f"step{i}/reward"] and step.success == succeeded
    finally:
        world.close()


@pytest.mark.parametrize(("eval", "index"), [(maniskill_rdt.PICK_CUBE, 1)], ids=["pick-cube-1"])
def test_rdts_protocol_is_its_scripts_loop_bit_for_bit(eval, index, python, tmp_path):
    """What RDT's script gives its model (the render, the proprio) at reset and under fixed
    joint targets, and its count of success, for the episode of seed 20241201 + index; the
    script runs its episodes in one env, one after the other: a fresh env here gives the same."""
    rollout = eval.rollouts(index + 1, 0)[index]
    assert rollout.scene.seed == maniskill_rdt.FIRST_SEED + index
    out = tmp_path / "reference.npz"
    command = [str(python), str(HERE / "maniskill_rdt_reference.py")]
    env_id = eval.metadata["maniskill_env"]
    arguments = [env_id, str(index), str(STEPS), eval.metadata["reward_mode"], str(out)]
    subprocess.run([*command, *arguments], check=True, cwd=tmp_path)
    with np.load(out) as saved:
        saved = dict(saved)
    world = World(eval)
    try:
        first = world.reset(rollout.scene)
        assert np.array_equal(first[keys.IMAGE], saved["first/image"])
        assert np.array_equal(first[keys.STATE], saved["first/state"])
        for i, action in enumerate(saved["actions"]):
            step = world.step(action)
            assert np.array_equal(step.obs[keys.IMAGE], saved[f"step{i}/image"]), i
            assert np.array_equal(step.obs[keys.STATE], saved[f"step{i}/state"]), i
            assert step.reward == saved[f"step{i}/reward"], i
            assert step.success == saved[f"step{i}/success"], i
    finally:
        world.close()


def test_the_states_named_entries_are_its_flat_vector(python):
    """The state Evals add ManiSkill's state dict by name; flattened in order, it is `state`."""
    world = World(maniskill.STACK_CUBE)
    try:
        [rollout] = maniskill.STACK_CUBE.rollouts(1, 0)
        obs = world.reset(rollout.scene)
        parts = [np.atleast_1d(v).astype(np.float32) for k, v in obs.items() if "/" in k]
        assert np.array_equal(np.concatenate(parts), obs[keys.STATE])
    finally:
        world.close()


def test_a_task_maniskill_lacks_is_refused_with_its_tasks(python):
    from policybench.envserver.proxy import EnvServerError

    with pytest.raises(EnvServerError, match="no ManiSkill task 'lift'; its tasks: pick_cube"):
        maniskill.PICK_CUBE.make_env("lift")


def test_without_a_vulkan_device_the_evals_are_skipped_saying_what_to_install(python, tmp_path):
    """The Vulkan loader pointed at no driver stands for a machine without a device: each rollout
    is skipped with one line naming SAPIEN's error and the driver to install; nothing errors."""
    repo = HERE.parent
    env = {
        **os.environ,
        "VK_ICD_FILENAMES": str(tmp_path / "none.json"),  # the loader's old name and new one
        "VK_DRIVER_FILES": str(tmp_path / "none.json"),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks/test_maniskill.py",
        "-p",
        "no:cacheprovider",
        "-k",
        "pick_cube and not rgb and not golden",
        "--rollouts",
        "1",
        "-rs",
        "--report-dir",
        str(tmp_path / "reports"),
    ]
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 skipped" in done.stdout and "error" not in done.stdout.split("short test summary")[-1]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert "maniskill-pick-cube: SAPIEN finds no Vulkan device here" in line
    assert "failed to find a rendering device" in line and "mesa-vulkan-drivers" in line
