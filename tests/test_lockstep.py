"""Batched-first rollouts: K rollouts of one Eval stepped side by side in one process, the model
asked once per step for all that need a chunk, give the Episodes each rollout gives alone, on
real MetaWorld and PushT envs, also when the rollouts end at different steps."""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time

import numpy as np
import pytest

from policybench.harness import run_rollout
from policybench.lockstep import Lockstep
from policybench.policy.chunk_player import ChunkPolicy
from policybench.pytest_plugin.lockstep import group_scopes
from policybench.world import World


class PerRolloutBatched:
    """A batching model over a per-rollout one: `predict_batch` answers each request with the
    source its rollout opened (a rollout is known by its context object, kept alive so that its
    id is not handed to a later rollout's), and counts batches."""

    def __init__(self, model) -> None:
        self.model = model
        self.name = model.name
        self.batch_sizes: list[int] = []
        self._sources: dict[int, tuple[object, object]] = {}  # id -> (context, source)

    def open(self, context):
        return self.model.open(context)

    def predict_batch(self, requests):
        self.batch_sizes.append(len(requests))
        chunks = []
        for context, obs in requests:
            if id(context) not in self._sources:
                self._sources[id(context)] = (context, self.model.open(context))
            chunks.append(self._sources[id(context)][1](obs))
        return chunks

    def describe(self):
        return self.model.describe()


def comparable(episode) -> tuple:
    """What must not change between running alone and side by side (wall time aside)."""
    return (
        episode.statics,
        episode.outcome,
        episode.success_step,
        [(s.time_ns, s.command.tolist(), s.reward, s.success) for s in episode.trace],
        [(c.asked_ns, c.arrives_ns, c.horizon) for c in episode.calls],
    )


def alone_and_side_by_side(eval, rollouts, make_model, slots):
    alone = [run_rollout(r, World(eval), ChunkPolicy(make_model())) for r in rollouts]
    model = PerRolloutBatched(make_model())
    lockstep = Lockstep(eval, slots)
    try:
        together = []
        for start in range(0, len(rollouts), slots):
            together += lockstep.run(rollouts[start : start + slots], ChunkPolicy(model))
    finally:
        lockstep.close()
    return alone, together, model.batch_sizes


def with_timeouts(rollouts, timeouts_s):
    return [dataclasses.replace(r, timeout_s=t) for r, t in zip(rollouts, timeouts_s, strict=True)]


def test_metaworld_rollouts_side_by_side_equal_their_runs_alone():
    pytest.importorskip("metaworld")
    from policybench.suites.metaworld import MT10, MetaWorldExpert, mt10

    eval = mt10(tasks={name: MT10[name] for name in ("reach-v3", "push-v3")})
    # Two tasks, two seeds each; the timeouts make them end at different steps (some solved
    # early, some cut short unsolved).
    rollouts = with_timeouts(eval.rollouts(2, 0), (4.0, 0.5, 1.5, 4.0))
    alone, together, batches = alone_and_side_by_side(
        eval, rollouts, lambda: MetaWorldExpert(MT10), slots=4
    )
    assert [comparable(e) for e in together] == [comparable(e) for e in alone]
    assert len({e.steps for e in alone}) >= 3, "the rollouts should end at different steps"
    assert max(batches) == 4 and sum(batches) == sum(len(e.calls) for e in alone)


def test_pusht_rollouts_side_by_side_equal_their_runs_alone():
    pytest.importorskip("gym_pusht")
    from policybench.suites.pusht import PUSHT, PushTHeuristic

    rollouts = with_timeouts(PUSHT.rollouts(3, 0), (2.0, 0.6, 1.2))
    alone, together, batches = alone_and_side_by_side(PUSHT, rollouts, PushTHeuristic, slots=2)
    assert [comparable(e) for e in together] == [comparable(e) for e in alone]
    assert len({e.steps for e in alone}) == 3
    assert max(batches) == 2 and sum(batches) == sum(len(e.calls) for e in alone)


class Failing:
    """A batching model that breaks from its third batch on (a batch that raises is asked again
    request by request, and those break too)."""

    name = "failing"

    def __init__(self) -> None:
        self.batches = 0

    def open(self, context):
        raise AssertionError("a batching model is asked through predict_batch")

    def predict_batch(self, requests):
        from policybench.policy.base import Chunk

        self.batches += 1
        if self.batches >= 3:
            raise RuntimeError("out of memory on the accelerator")
        return [Chunk(np.zeros((1, 1)), 10.0) for _ in requests]

    def describe(self):
        return {"name": self.name}


def test_a_failed_batch_is_an_error_of_each_rollout_in_it():
    from tests.envs import point_eval

    eval = point_eval(tasks={"a": "reach a", "b": "reach b"}, timeout_s=1.0)
    lockstep = Lockstep(eval, 2)
    try:
        episodes = lockstep.run(eval.rollouts(1, 0), ChunkPolicy(Failing()))
    finally:
        lockstep.close()
    for episode in episodes:
        assert (
            episode.outcome.is_error
            and "out of memory on the accelerator" in episode.outcome.reason
        )
        assert episode.steps == 2


def test_with_a_batching_model_one_slot_steps_at_a_time():
    """The slots take turns, as one thread stepping K envs would: no two env steps overlap, even
    where a step lets other threads run (a sleep here, C code or rendering in a simulator)."""
    from tests.envs import GreedyPointModel, PointEnv, point_eval

    steps: list[tuple[int, float, float]] = []  # (thread, start, end) of every env step

    class SlowPointEnv(PointEnv):
        def step(self, action):
            start = time.perf_counter()
            time.sleep(0.002)
            steps.append((threading.get_ident(), start, time.perf_counter()))
            return super().step(action)

    eval = dataclasses.replace(
        point_eval(tasks={"a": "reach a", "b": "reach b"}, timeout_s=1.0),
        make_env=lambda task: SlowPointEnv(),
    )
    rollouts = with_timeouts(eval.rollouts(2, 0), (1.0, 0.5, 0.8, 1.0))
    alone, together, batches = alone_and_side_by_side(
        eval, rollouts, lambda: GreedyPointModel(horizon=3), slots=4
    )
    assert [comparable(e) for e in together] == [comparable(e) for e in alone]
    assert max(batches) == 4
    side_by_side = sorted(steps[sum(e.steps for e in alone) :], key=lambda step: step[1])
    assert len({thread for thread, _, _ in side_by_side}) == 4
    overlaps = [(a, b) for a, b in itertools.pairwise(side_by_side) if b[1] < a[2]]
    assert not overlaps, f"{len(overlaps)} env steps ran while another slot's step was running"


BENCHMARK = """
import policybench
from policybench.suites.metaworld import MT10, mt10

TWO_TASKS = mt10(tasks={name: MT10[name] for name in ("reach-v3", "push-v3")})


@policybench.parametrize(TWO_TASKS)
def test_metaworld(rollout, harness):
    harness(rollout)
"""

BATCHED = """
import os

from policybench.suites.metaworld import MT10, MetaWorldExpert


class Batched:
    name = "batched-expert"

    def __init__(self):
        self.model = MetaWorldExpert(MT10)
        self.sources = {}

    def open(self, context):
        return self.model.open(context)

    def predict_batch(self, requests):
        with open(f"batches-{os.getpid()}.txt", "a") as log:
            log.write(f"{len(requests)}\\n")
        chunks = []
        for context, obs in requests:  # contexts kept alive: an id is never handed on
            if id(context) not in self.sources:
                self.sources[id(context)] = (context, self.model.open(context))
            chunks.append(self.sources[id(context)][1](obs))
        return chunks

    def describe(self):
        return {"name": self.name}


MODEL = Batched()
"""


def run_metaworld(pytester: pytest.Pytester, *args: str) -> dict[str, tuple]:
    for log in pytester.path.glob("batches-*.txt"):
        log.unlink()
    result = pytester.runpytest_subprocess("--rollouts", "3", "--policy=batched:MODEL", *args)
    result.assert_outcomes(passed=6)
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["nodeid"]: (r["outcome"], r["steps"], r["sum_reward"], r["reason"]) for r in records}


def batch_sizes(pytester: pytest.Pytester) -> list[int]:
    return [int(n) for log in pytester.path.glob("batches-*.txt") for n in log.read_text().split()]


def test_envs_per_worker_gives_the_outcomes_of_one_env_per_worker(pytester: pytest.Pytester):
    pytest.importorskip("metaworld")
    pytester.makepyfile(test_metaworld=BENCHMARK, batched=BATCHED)
    alone = run_metaworld(pytester)
    assert batch_sizes(pytester) == []  # one env per worker: each rollout asks its own source
    assert len({steps for _, steps, _, _ in alone.values()}) > 1, "rollouts end at different steps"
    side_by_side = run_metaworld(pytester, "--envs-per-worker", "3")
    assert side_by_side == alone
    assert max(batch_sizes(pytester)) == 3
    # Under xdist each task's rollouts go to one worker, which runs them side by side with its
    # own copy of the model (a shared server would batch the workers' calls as they come).
    distributed = run_metaworld(
        pytester, "--envs-per-worker", "3", "-n", "2", "--policy-sharing=per-worker"
    )
    assert distributed == alone
    assert max(batch_sizes(pytester)) == 3


def test_envs_per_worker_refuses_recorders_that_see_one_rollout_at_a_time(
    pytester: pytest.Pytester,
):
    pytester.makepyfile(test_metaworld=BENCHMARK)
    result = pytester.runpytest("--envs-per-worker", "2", "--record-video")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--envs-per-worker 2 steps rollouts side by side*--record-video*"]
    )


def test_measured_latency_charges_a_rollout_its_batch_forward_not_the_other_slots_turns():
    """With `--inference-latency measured`, each call is charged the time its batch's forward
    took; the other slots' turns, which a slot also waits through, are not charged to it."""
    from policybench.policy.latency import InferenceLatency, LatencyMode
    from tests.envs import GreedyPointModel, PointEnv, point_eval

    step_s, forward_s = 0.010, 0.020

    class SlowPointEnv(PointEnv):
        def step(self, action):
            time.sleep(step_s)
            return super().step(action)

    class SlowForward(PerRolloutBatched):
        def predict_batch(self, requests):
            time.sleep(forward_s)
            return super().predict_batch(requests)

    eval = dataclasses.replace(
        point_eval(tasks={"a": "reach a", "b": "reach b"}, timeout_s=1.0),
        make_env=lambda task: SlowPointEnv(),
    )
    model = SlowForward(GreedyPointModel(horizon=3))
    policy = ChunkPolicy(model, latency=InferenceLatency(LatencyMode.MEASURED))
    lockstep = Lockstep(eval, 4)
    try:
        episodes = lockstep.run(eval.rollouts(2, 0), policy)
    finally:
        lockstep.close()
    assert max(model.batch_sizes) == 4
    charged_s = [call.wall_ns / 1e9 for episode in episodes for call in episode.calls]
    assert len(charged_s) >= 4 * 3
    # Each slot steps its env 3 times between calls, so a slot waiting on a batch of 4 also waits
    # about 3 * 3 * step_s (90 ms) for the others' turns; a forward is 20 ms.
    assert min(charged_s) >= forward_s
    assert max(charged_s) < forward_s + step_s, f"charged {max(charged_s) * 1e3:.1f} ms"
    for episode in episodes:
        assert all(c.arrives_ns - c.asked_ns == c.wall_ns for c in episode.calls)


def test_envs_per_worker_runs_with_measured_latency(pytester: pytest.Pytester):
    from tests.test_plugin import ENVS

    pytester.makepyfile(envs=ENVS, test_point=POINTS)
    args = ("--rollouts", "2", "--inference-latency", "measured", "--envs-per-worker", "2")
    pytester.runpytest(*args).assert_outcomes(passed=4)


POINTS = """
import policybench
from envs import GreedyPointModel, point_eval

POINT = point_eval("point", tasks={"a": "reach a", "b": "reach b"}, scripted=GreedyPointModel)


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_each_arm_of_an_ab_run_runs_its_rollouts_side_by_side(pytester: pytest.Pytester):
    from tests.test_plugin import ENVS

    pytester.makepyfile(envs=ENVS, test_point=POINTS)

    def outcomes(*args: str) -> dict[str, tuple]:
        pytester.runpytest("--rollouts", "3", "--policy", "scripted,random", *args)
        path = pytester.path / "reports" / "latest" / "results.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        return {r["nodeid"]: (r["arm"], r["outcome"], r["steps"]) for r in records}

    alone = outcomes()
    assert len(alone) == 12 and {arm for arm, _, _ in alone.values()} == {"scripted", "random"}
    assert outcomes("--envs-per-worker", "3") == alone


def test_under_xdist_a_group_is_k_rollouts_of_a_task_so_one_task_fills_every_worker():
    ids = [f"t.py::test_x[a/seed={i}]" for i in range(5)] + ["t.py::test_x[b/seed=0]"]
    scopes = group_scopes([*ids, "t.py::test_other"], slots=2)
    assert [scopes[nodeid] for nodeid in ids] == [
        "t.py::test_x[a#0",
        "t.py::test_x[a#0",
        "t.py::test_x[a#1",
        "t.py::test_x[a#1",
        "t.py::test_x[a#2",
        "t.py::test_x[b#0",
    ]
    assert scopes["t.py::test_other"] == "t.py::test_other#0"


ONE_TASK = BENCHMARK.replace('("reach-v3", "push-v3")', '("reach-v3",)')


def test_an_eval_of_one_task_runs_side_by_side_on_every_worker(pytester: pytest.Pytester):
    pytest.importorskip("metaworld")
    pytester.makepyfile(test_metaworld=ONE_TASK, batched=BATCHED)
    args = ("--rollouts", "4", "--policy=batched:MODEL", "--policy-sharing=per-worker")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=4)
    alone = (pytester.path / "reports" / "latest" / "results.jsonl").read_text()
    result = pytester.runpytest_subprocess(*args, "--envs-per-worker", "2", "-n", "2")
    result.assert_outcomes(passed=4)
    # Two groups of two, one on each worker (a scope per task put all four on one).
    per_worker = [log.read_text().split() for log in pytester.path.glob("batches-*.txt")]
    assert len(per_worker) == 2 and all(max(map(int, sizes)) == 2 for sizes in per_worker)
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    outcomes = [
        {r["nodeid"]: (r["outcome"], r["steps"], r["sum_reward"]) for r in map(json.loads, text)}
        for text in (alone.splitlines(), path.read_text().splitlines())
    ]
    assert outcomes[1] == outcomes[0]
