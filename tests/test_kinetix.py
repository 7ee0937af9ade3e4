"""Kinetix, in its interpreter (kinetix-env 3.0.2, JAX on CPU): each Eval's (the paper's level
files, the wheel's) first observation and a fixed action sequence's trajectory equal, bit for
bit, a plain loop written as the real-time chunking paper's eval_flow.py runs one env
(tests/kinetix_reference.py, same interpreter, same stack). Skipped where the interpreter is not
installed (`policybench env install kinetix`)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.suites import kinetix
from policybench.suites.kinetix import kinetix_env
from policybench.world import World
from tests.interpreters import built_python

HERE = Path(__file__).resolve().parent
STEPS = 6


@pytest.fixture(scope="module")
def python() -> Path:
    return built_python(kinetix.INTERPRETER)


def compiled_kept() -> dict[str, str]:
    """The reference's environment, with the JAX compilation cache the env uses (the reference's
    step is the same program: it compiles once a machine, not once a test)."""
    return {**os.environ, "JAX_COMPILATION_CACHE_DIR": kinetix_env.compilation_cache()}


def level_file(eval_name: str, level: str, python: Path, folder: Path) -> Path:
    """The level's file as eval_flow.py reads it: the paper's (from the shipped data, which
    holds each file's text as the paper's repository does) or the wheel's."""
    if eval_name == "kinetix-wheel":
        where = "import kinetix; print(kinetix.__path__[0])"
        package = subprocess.run([str(python), "-c", where], capture_output=True, text=True)
        return Path(package.stdout.strip(), "levels", "l", f"{level}.json")
    data = resources.files("policybench.suites").joinpath("data", kinetix_env.RTC_LEVELS_FILE)
    with gzip.open(data.open("rb"), "rt") as file:
        text = json.load(file)[level]
    assert hashlib.sha256(text.encode()).hexdigest() == kinetix_env.RTC_LEVEL_SHA256[level]
    path = folder / f"{level}.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("evaluation", "level"),
    [
        (kinetix.KINETIX, "catapult"),  # one of the paper's the wheel lacks
        (kinetix.KINETIX_WHEEL, "car_launch"),
    ],
    ids=["catapult", "wheel-car_launch"],
)
def test_first_observation_and_trajectory_are_eval_flows_bit_for_bit(
    evaluation, level, python, tmp_path
):
    [rollout] = [r for r in evaluation.rollouts(1, 0) if r.scene.task == level]
    out = tmp_path / "reference.npz"
    path = level_file(evaluation.name, level, python, tmp_path)
    command = [str(python), str(HERE / "kinetix_reference.py"), str(path)]
    subprocess.run(
        [*command, str(rollout.scene.seed), str(STEPS), str(out)], check=True, env=compiled_kept()
    )
    with np.load(out) as saved:
        saved = dict(saved)
    world = World(evaluation)
    try:
        first = world.reset(rollout.scene)
        assert np.array_equal(first[keys.STATE], saved["first/state"])
        assert first[keys.STATE].dtype == saved["first/state"].dtype
        for i, action in enumerate(saved["actions"]):
            step = world.step(action)
            assert np.array_equal(step.obs[keys.STATE], saved[f"step{i}/state"]), i
            assert step.reward == saved[f"step{i}/reward"]
            assert step.terminated == saved[f"step{i}/done"]
            assert step.success == (saved[f"step{i}/done"] and saved[f"step{i}/goal"])
            if step.terminated:
                break
    finally:
        world.close()


def test_a_level_the_wheel_lacks_is_refused_with_the_levels_it_has(python):
    from policybench.envserver.proxy import EnvServerError

    with pytest.raises(
        EnvServerError,
        match=r"no Kinetix level 'catapult' \(kinetix-env 3.0.2 lacks catapult\); its levels: "
        "grasp_easy, hard_lunar_lander",
    ):
        kinetix.KINETIX_WHEEL.make_env("catapult")


def test_the_papers_levels_differ_from_the_wheels_of_the_same_name(python):
    """Why the paper's files are the default: the first observation of the same key differs on
    the levels whose geometry the wheel changed (docs/suites.md)."""
    paper, wheel = (
        kinetix.KINETIX.make_env("chain_lander"),
        kinetix.KINETIX_WHEEL.make_env("chain_lander"),
    )
    try:
        first_paper, _ = paper.reset(seed=0)
        first_wheel, _ = wheel.reset(seed=0)
        assert not np.array_equal(first_paper[keys.STATE], first_wheel[keys.STATE])
    finally:
        paper.close()
        wheel.close()
