"""Memory bounded by design: a process keeps at most `--max-envs-per-worker` live envs, closing
the least recently used, with the same outcomes as without a bound; `-n N` schedules rollouts
task-affine (work stealing) unless the user picks a `--dist`."""

from __future__ import annotations

import json

import pytest

from policybench.harness import run_rollout
from policybench.policy.chunk_player import ChunkPolicy
from policybench.spec import Rollout, Scene, numbered
from policybench.world import EnvCache, World
from tests.envs import GreedyPointModel, PointEnv, point_eval
from tests.test_plugin import ENVS


class Closing(PointEnv):
    def __init__(self, log: list[str], name: str) -> None:
        super().__init__()
        self.log, self.name = log, name

    def close(self) -> None:
        self.log.append(f"close {self.name}")


def test_the_cache_closes_the_least_recently_used_env_when_it_builds_one_more():
    log: list[str] = []
    cache = EnvCache(capacity=2)

    def build(name: str):
        return lambda: log.append(f"build {name}") or Closing(log, name)

    a = cache.get(("e", "a"), build("a"))
    cache.get(("e", "b"), build("b"))
    assert cache.get(("e", "a"), build("a")) is a  # a is now the most recently used
    cache.get(("e", "c"), build("c"))  # closes b first
    cache.get(("e", "b"), build("b"))  # closes a first
    assert log == ["build a", "build b", "close b", "build c", "close a", "build b"]
    assert (cache.built, cache.closed, len(cache)) == (4, 2, 2)
    cache.close()
    assert sorted(log[-2:]) == ["close b", "close c"] and len(cache) == 0
    with pytest.raises(ValueError, match="at least 1 env"):
        EnvCache(capacity=0)


class Alternating:
    """A plan whose rollouts alternate between two tasks, the worst case for a small cache."""

    def __call__(self, eval_name: str, rollouts_per_task: int, base_seed: int):
        planned = [
            (f"reach {task}", Scene(task=task, seed=base_seed + i))
            for i in range(rollouts_per_task)
            for task in ("left", "right")
        ]
        return numbered(eval_name, 2.0, planned)


def alternating_eval():
    import dataclasses

    return dataclasses.replace(point_eval("alternating"), plan=Alternating())


def outcomes(world: World, rollouts: tuple[Rollout, ...]) -> list[tuple]:
    policy = ChunkPolicy(GreedyPointModel())
    episodes = [run_rollout(rollout, world, policy) for rollout in rollouts]
    return [(e.outcome.kind, e.steps, [float(s.reward) for s in e.trace]) for e in episodes]


def test_worlds_sharing_a_cache_of_one_rebuild_their_envs_with_the_same_outcomes():
    eval = alternating_eval()
    rollouts = eval.rollouts(3, 0)
    unbounded = World(eval)
    expected = outcomes(unbounded, rollouts)
    assert unbounded.envs.built == 2
    bounded = World(eval, EnvCache(capacity=1))
    assert outcomes(bounded, rollouts) == expected
    assert bounded.envs.built == 6 and bounded.envs.closed == 5


BENCHMARK = """
import dataclasses
import policybench
from envs import GreedyPointModel, point_eval
from policybench.spec import Scene, numbered


def alternating(eval_name, rollouts_per_task, base_seed):
    planned = [
        (f"reach {task}", Scene(task=task, seed=base_seed + i))
        for i in range(rollouts_per_task)
        for task in ("left", "right")
    ]
    return numbered(eval_name, 2.0, planned)


ALTERNATING = dataclasses.replace(
    point_eval("alternating", scripted=GreedyPointModel), plan=alternating
)


@policybench.parametrize(ALTERNATING)
def test_point(rollout, harness):
    harness(rollout)
"""

CONFTEST = """
def pytest_sessionstart(session):
    print("DIST", getattr(session.config.option, "dist", None))
"""


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    pytester.makeconftest(CONFTEST)
    return pytester


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_bound_of_one_env_rebuilds_per_rollout_and_records_the_outcomes_of_two(bench):
    bench.runpytest("--rollouts", "2", "--max-envs-per-worker", "2").assert_outcomes(passed=4)
    unbounded = records(bench)
    assert [r["envs_built"] for r in unbounded] == [1, 2, 2, 2]
    bench.runpytest("--rollouts", "2", "--max-envs-per-worker", "1").assert_outcomes(passed=4)
    bounded = records(bench)
    assert [r["envs_built"] for r in bounded] == [1, 2, 3, 4]
    fields = ("nodeid", "outcome", "steps", "sum_reward")
    assert [[r[f] for f in fields] for r in bounded] == [[r[f] for f in fields] for r in unbounded]
    assert all(r["worker"] == "main" and r["peak_rss_mb"] > 10 for r in bounded)


def test_workers_steal_work_by_default_and_a_given_dist_wins(bench):
    default = bench.runpytest_subprocess("-n", "2", "--rollouts", "2", "-s")
    default.stdout.fnmatch_lines(["DIST worksteal"])
    assert {r["worker"] for r in records(bench)} <= {"gw0", "gw1"}
    given = bench.runpytest_subprocess("-n", "2", "--rollouts", "1", "--dist", "load", "-s")
    given.stdout.fnmatch_lines(["DIST load"])
