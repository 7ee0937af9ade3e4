"""An isolated env that clashes for real: tests/isolated_envs/numpy1_env.py runs behind an env
server in an interpreter with numpy < 2 (built here by `install`, once per test env) while the
tests run numpy 2; its arrays cross exactly, and a rollout through the harness is recorded with
the versions installed in that interpreter (read once, kept beside its marker)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from policybench.envserver.interpreters import MARKER, VERSIONS, install, installed_versions
from tests.isolated_envs.evals import NUMPY1, NUMPY1_INTERPRETER
from tests.isolated_envs.numpy1_env import STEPS_TO_SUCCESS, make

REPO = Path(__file__).resolve().parents[1]

BENCHMARK = """
import policybench
from tests.isolated_envs.evals import NUMPY1


@policybench.parametrize(NUMPY1)
def test_numpy1(rollout, harness):
    harness(rollout)
"""


@pytest.fixture(scope="session")
def numpy1_cache(tmp_path_factory) -> Path:
    """An interpreter cache holding numpy1's interpreter: in the test env's own directory when
    the tests run in a venv (built once, about 15 s, then a cache hit), else a temporary one."""
    in_venv = sys.prefix != sys.base_prefix
    cache = Path(sys.prefix) / "interpreter-cache" if in_venv else tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        install(NUMPY1_INTERPRETER)
    return cache


@pytest.fixture
def numpy1_env(numpy1_cache, monkeypatch):
    """numpy1's interpreter found in the cache, and this repository on its path (the env server
    imports tests.isolated_envs.numpy1_env)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(numpy1_cache))
    monkeypatch.delenv("POLICYBENCH_PYTHON_NUMPY1", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def assert_same_arrays(crossed: dict, here: dict) -> None:
    assert crossed.keys() == here.keys()
    for key, array in here.items():
        assert isinstance(crossed[key], np.ndarray), key
        assert (crossed[key].dtype.str, crossed[key].shape) == (array.dtype.str, array.shape), key
        assert crossed[key].tobytes() == array.tobytes(), key


def test_arrays_cross_exactly_between_numpy_1_and_numpy_2(numpy1_env):
    here = make("drift")
    there = NUMPY1.make_env("drift")
    try:
        obs_here, info_here = here.reset(seed=7)
        obs_there, info_there = there.reset(seed=7)
        assert info_here["numpy"] == np.__version__ and np.__version__.startswith("2.")
        assert info_there["numpy"].startswith("1."), info_there
        assert_same_arrays(obs_there, obs_here)
        assert there.action_space.dtype == np.float32 and there.action_space.shape == (2,)
        actions = [np.array([0.5, -0.25], np.float32), np.array([1e-7, np.pi], np.float32)]
        actions.append(np.array([-1.0, 1.0], np.float32))
        for action in actions:
            obs_here, reward_here, *_, info_here = here.step(action)
            obs_there, reward_there, terminated, truncated, info_there = there.step(action)
            assert_same_arrays(obs_there, obs_here)
            assert (reward_there, terminated, truncated) == (reward_here, False, False)
            assert info_there["is_success"] == info_here["is_success"]
        assert info_there["is_success"] and len(actions) == STEPS_TO_SUCCESS
    finally:
        there.close()
        here.close()


def test_a_rollout_through_the_harness_runs_in_the_numpy1_interpreter(numpy1_env, pytester):
    pytester.makepyfile(test_numpy1=BENCHMARK)
    result = pytester.runpytest("--policy=random", "--rollouts", "2")
    result.assert_outcomes(passed=2)
    lines = (pytester.path / "reports" / "latest" / "results.jsonl").read_text().splitlines()
    recorded = [json.loads(line) for line in lines]
    assert [(r["outcome"], r["steps"]) for r in recorded] == [("solved", STEPS_TO_SUCCESS)] * 2
    env_side = installed_versions(install(NUMPY1_INTERPRETER)[0])
    for record in recorded:
        packages = record["packages"]
        assert packages["numpy"].startswith("1.") and packages["numpy"] == env_side["numpy"]
        assert packages["msgpack"] == env_side["msgpack"] and "msgpack" in packages
        assert np.__version__.startswith("2.")  # what this process would have recorded


def test_installed_versions_are_read_once_and_kept_beside_the_marker_until_a_rebuild(
    numpy1_env,
):
    python = install(NUMPY1_INTERPRETER)[0]
    marker, kept = python.parents[1] / MARKER, python.parents[1] / VERSIONS
    # A fresh marker mtime (as a rebuild leaves), then a kept file written for it: it is read,
    # not the interpreter.
    built_at = marker.stat().st_mtime_ns + 1_000_000_007
    os.utime(marker, ns=(built_at, built_at))
    key = {"python": str(python), "marker_mtime_ns": built_at}
    kept.write_text(json.dumps({**key, "versions": {"numpy": "kept"}}))
    assert installed_versions(python) == {"numpy": "kept"}
    # A file kept for another build is read anew from the interpreter, and replaced.
    rebuilt_at = built_at + 1_000_000_007
    os.utime(marker, ns=(rebuilt_at, rebuilt_at))
    found = installed_versions(python)
    assert found["numpy"].startswith("1.") and found["msgpack"]
    assert json.loads(kept.read_text()) == {**key, "marker_mtime_ns": rebuilt_at, "versions": found}
    assert NUMPY1.make_env.versions() == found
