"""Preflight: before an Eval's rollouts run, one observation of its first scene goes through the
policy's codec to the model; a broken contract fails every rollout of that Eval with one clear
error, without building its env again, and a sound one is recorded with its latency."""

from __future__ import annotations

import json

import numpy as np
import pytest

from policybench.policy.base import Chunk
from policybench.policy.chunk_player import ChunkPolicy
from policybench.preflight import Verdict, preflight
from policybench.serve.client import Endpoint, RemoteModel
from policybench.world import World
from tests.envs import GreedyPointModel, point_eval
from tests.test_plugin import ENVS


class Answering:
    name = "answering"

    def __init__(self, actions):
        self.actions = np.asarray(actions)

    def open(self, context):
        return lambda obs: Chunk(self.actions, context.control_hz)

    def describe(self):
        return {"name": self.name}


def check(actions) -> object:
    eval = point_eval()
    return preflight(World(eval), eval.rollouts(1, 0)[0], ChunkPolicy(Answering(actions)))


def test_a_sound_answer_passes_with_its_shape_horizon_and_latency():
    found = check(np.full((4, 1), 0.5))
    assert found.verdict is Verdict.PASSED and found.problem is None
    assert (found.answered, found.horizon, found.sent) == (
        "[4, 1] float64",
        4,
        {"state": "[2] float64"},
    )
    assert found.latency_ms >= 0 and found.notes == ()
    assert found.action_space == "(1,) in [-1, 1]"


@pytest.mark.parametrize(
    ("actions", "problem"),
    [
        (np.zeros((3, 7)), "answered action of shape (7,), expected (1,)"),
        (np.array([[np.nan]]), "not all finite numbers"),
    ],
)
def test_a_broken_answer_fails_naming_the_problem(actions, problem):
    found = check(actions)
    assert found.verdict is Verdict.FAILED and problem in found.problem


def test_actions_outside_the_bounds_are_noted_not_failed():
    found = check(np.array([[0.5], [1.5]]))
    assert found.verdict is Verdict.PASSED
    [note] = found.notes
    assert note.startswith(
        "caveat: this policy's actions can leave the action space (dim 0, at the first "
        "observation of "
    )  # the scene it was seen at: the same line for the same scene, whatever the run
    assert "the scene this preflight staged; by how much depends on the scene)" in note


def test_an_unreachable_server_is_inconclusive_not_a_failure():
    eval = point_eval()
    policy = ChunkPolicy(RemoteModel(Endpoint("ws://127.0.0.1:9", connect_timeout_s=2.0)))
    found = preflight(World(eval), eval.rollouts(1, 0)[0], policy)
    assert found.verdict is Verdict.INCONCLUSIVE and "RemoteDown" in found.problem


BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

POINT = point_eval("point", tasks={"a": "reach a", "b": "reach b"})


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""

WIDE = """
import numpy as np
from policybench.policy.base import Chunk


class Wide:
    name = "wide"

    def open(self, context):
        return lambda obs: Chunk(np.zeros((1, 3)), context.control_hz)

    def describe(self):
        return {"name": self.name}


MODEL = Wide()
"""


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK, wide=WIDE)
    return pytester


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_failed_preflight_errors_every_rollout_without_building_more_envs(bench, workers):
    result = bench.runpytest_subprocess("--rollouts", "3", "--policy=wide:MODEL", *workers)
    result.assert_outcomes(errors=6)
    found = records(bench)
    assert len(found) == 6
    for record in found:
        assert record["outcome"] == "error"
        assert record["reason"].startswith("preflight of 'point' failed, so none of its rollouts")
        assert "answered action of shape (3,), expected (1,)" in record["reason"]
    # One env, for the preflight's first scene, in the one process that ran it; none elsewhere.
    assert (
        sum(
            max(r["envs_built"] for r in found if r["worker"] == w)
            for w in {r["worker"] for r in found}
        )
        == 1
    )
    result.stdout.fnmatch_lines(["preflight point: failed: *answered action of shape (3,)*"])
    stored = json.loads((bench.path / "reports/latest/preflight/point.json").read_text())
    assert stored["verdict"] == "failed"


def test_a_passed_preflight_is_recorded_and_printed_first_in_the_runs_summary(bench):
    bench.makepyfile(greedy="from envs import GreedyPointModel\nMODEL = GreedyPointModel()\n")
    result = bench.runpytest_subprocess("--rollouts", "1", "--policy=greedy:MODEL")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*= policybench: policy greedy:MODEL =*",
            "preflight point: passed: answered [[]1, 1] float64 (horizon 1)*",
            "eval *rollouts*",
            "point *",
            "results: *",
            "report: *",
        ],
        consecutive=True,
    )
    stored = json.loads((bench.path / "reports/latest/preflight/point.json").read_text())
    assert stored["verdict"] == "passed" and stored["policy"]["name"] == "greedy"


def test_the_point_model_passes_its_own_preflight():
    eval = point_eval()
    found = preflight(World(eval), eval.rollouts(1, 0)[0], ChunkPolicy(GreedyPointModel()))
    assert found.verdict is Verdict.PASSED


def test_the_preflight_uses_the_first_rollout_a_process_runs_and_builds_no_other_env(bench):
    bench.makepyfile(greedy="from envs import GreedyPointModel\nMODEL = GreedyPointModel()\n")
    result = bench.runpytest_subprocess("--rollouts", "2", "--policy=greedy:MODEL", "-k", "b/")
    result.assert_outcomes(passed=2)
    assert [r["envs_built"] for r in records(bench)] == [1, 1]  # task b's env only


def test_record_video_on_an_eval_without_an_image_says_so_in_its_preflight(bench):
    pytest.importorskip("av")
    bench.makepyfile(greedy="from envs import GreedyPointModel\nMODEL = GreedyPointModel()\n")
    result = bench.runpytest_subprocess(
        "--rollouts", "1", "--policy=greedy:MODEL", "-k", "b/", "--record-video"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "preflight point: passed: *; caveat: --record-video films the 'image' observation, "
            "which this Eval does not have (one observation, Box(*)): its rollouts get no video"
        ]
    )
