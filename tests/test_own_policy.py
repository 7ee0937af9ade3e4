"""Your own policy: `--policy=module:attr` takes an importable Model, Policy or factory, installed
packages add names through the `policybench.policies` entry point, and both run in process,
per worker and on the shared server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_plugin import ENVS

BENCHMARK = """
import policybench
from envs import point_eval

POINT = point_eval("point")


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""

MY_POLICY = """
import numpy as np

from policybench.policy.base import Chunk


class Greedy:
    name = "my-greedy"

    def open(self, context):
        def predict(obs):
            pos, goal = obs["state"]
            return Chunk(np.clip([[goal - pos]], -0.5, 0.5), context.control_hz)

        return predict

    def describe(self):
        return {"name": self.name, "step": 0.5}


MODEL = Greedy()


def make(eval, action_space, settings):
    assert action_space.shape == (1,), action_space
    return Greedy()
"""


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK, my_policy=MY_POLICY)
    return pytester


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("target", ["my_policy:MODEL", "my_policy:make"])
def test_a_model_or_a_factory_named_module_attr_runs_in_process(bench, target):
    result = bench.runpytest("--rollouts", "2", f"--policy={target}")
    result.assert_outcomes(passed=2)
    found = records(bench)
    assert [r["outcome"] for r in found] == ["solved", "solved"]
    assert all(r["policy"]["name"] == "my-greedy" and r["policy"]["step"] == 0.5 for r in found)


def test_a_module_attr_that_does_not_import_is_a_usage_error_naming_it(bench):
    result = bench.runpytest("--policy=no_such_module:MODEL")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot import module 'no_such_module'*PYTHONPATH*"])
    missing = bench.runpytest("--policy=my_policy:NOPE")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*module 'my_policy' has no attribute 'NOPE'*"])


def test_an_object_that_is_no_policy_is_a_usage_error_saying_what_is_expected(bench):
    bench.makepyfile(not_a_policy="THING = 42")
    result = bench.runpytest("--policy=not_a_policy:THING")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is a int; expected a Model (name, open, describe), a Policy*"])


def test_a_factory_that_returns_no_policy_fails_its_rollout_saying_what_came(bench):
    bench.makepyfile(bad_factory="def make(eval, action_space, settings):\n    return 42\n")
    result = bench.runpytest("--rollouts", "1", "--policy=bad_factory:make")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*could not set up 'point'*is a int; expected a Model*"])


def test_a_module_attr_policy_is_served_to_xdist_workers_by_the_shared_server(bench):
    result = bench.runpytest_subprocess(
        "-n", "2", "--rollouts", "2", "--policy=my_policy:MODEL", "--policy-sharing=shared"
    )
    result.assert_outcomes(passed=2)
    found = records(bench)
    assert [r["outcome"] for r in found] == ["solved", "solved"]
    # The shared server answered with the module's model, and says so in each record.
    assert all(r["policy"]["served"] == "shared" for r in found)
    assert all(r["policy"]["model"]["name"] == "my-greedy" for r in found)


def installed_distribution(site: Path, entry_points: str) -> None:
    """A distribution as pip leaves it in site-packages: just its metadata, here with the
    entry points; importlib.metadata finds it on sys.path like any installed package."""
    info = site / "my_policies-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-policies\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_an_installed_entry_point_is_a_policy_name(bench):
    site = bench.path / "site"
    installed_distribution(site, "[policybench.policies]\ngreedy = my_policy:make\n")
    bench.syspathinsert(site)
    listed = bench.runpytest("--policy=unknown-name")
    listed.stderr.fnmatch_lines(["*unknown policy 'unknown-name'; known policies: *greedy*"])
    result = bench.runpytest("--rollouts", "2", "--policy=greedy")
    result.assert_outcomes(passed=2)
    assert [r["policy"]["name"] for r in records(bench)] == ["my-greedy", "my-greedy"]
