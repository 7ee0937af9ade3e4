"""Real-time figures of a run with latency: per rollout in results.jsonl, per Eval in
summary.json, the terminal table and the HTML report; a run without latency shows none. Latency
draws are seeded per scene: the same scene gets the same draws in any order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency import InferenceLatency, LatencyMode
from policybench.record.realtime import rollout_realtime
from policybench.spec import Rollout, Scene
from policybench.world import World
from tests.test_rtc_protocol import STEPS, LabelledChunks, counter_eval

ENVS = (Path(__file__).parent / "envs.py").read_text()
BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

POINT = point_eval("point", tasks={"reach": "reach"}, scripted=GreedyPointModel)


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""


def counter_rollout(seed: int = 0) -> Rollout:
    eval = counter_eval()
    return Rollout(
        eval.name, 0, 1, "count", timeout_s=STEPS / eval.control_hz, scene=Scene("c", seed)
    )


def record_of(policy: ChunkPolicy, seed: int = 0) -> dict:
    episode = run_rollout(counter_rollout(seed), World(counter_eval()), policy)
    return {
        **episode.statics,
        **rollout_realtime(episode.statics, episode.calls, episode.steps),
    }


def test_a_delay_of_two_steps_every_four_is_half_stale_at_five_fresh_actions_a_second():
    # 10 Hz, a call every 4 steps, 2 of them delay: the first chunk lands at step 2, then each
    # cycle plays 2 steps of the previous chunk and 2 of the new one.
    policy = ChunkPolicy(
        LabelledChunks(), execute_steps=4, latency=InferenceLatency.parse("steps:2")
    )
    record = record_of(policy)
    assert record[keys.CALL_LATENCY_MS] == [200.0] * 10
    assert record[keys.DELAY_STEPS_MEAN] == 2.0
    assert (record[keys.LATENCY_MS_P50], record[keys.LATENCY_MS_P99]) == (200.0, 200.0)
    assert record[keys.STALE_ACTION_SHARE] == pytest.approx(18 / 40)
    assert record[keys.FRESH_ACTION_HZ] == pytest.approx(20 / 4.0)


def test_a_run_without_latency_has_no_real_time_fields():
    assert rollout_realtime(record_of(ChunkPolicy(LabelledChunks())), [], STEPS) == {}


class UniformProfile:
    """Stands in for a latency profile file (policy.latency_profile): 0 to 0.5 s, uniform."""

    path = "uniform.json"
    digest = "0123456789ab"

    def draw_seconds(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(0.0, 0.5))


def test_profile_draws_follow_the_scene_not_the_run_order():
    latency = InferenceLatency(
        LatencyMode.PROFILE, profile=UniformProfile(), profile_digest=UniformProfile.digest
    )
    policy = ChunkPolicy(LabelledChunks(), latency=latency, seed=5)
    forward = [record_of(policy, seed)[keys.CALL_LATENCY_MS] for seed in (0, 1, 2)]
    backward = [record_of(policy, seed)[keys.CALL_LATENCY_MS] for seed in (2, 1, 0)][::-1]
    assert forward == backward
    assert forward[0] != forward[1], "two scenes drew the same latencies"
    other_run = ChunkPolicy(LabelledChunks(), latency=latency, seed=6)
    assert record_of(other_run, 0)[keys.CALL_LATENCY_MS] != forward[0]


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


def run_files(pytester: pytest.Pytester) -> tuple[list[dict], dict, str]:
    latest = (pytester.path / "reports" / "latest").resolve()
    lines = (latest / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    summary = json.loads((latest / "summary.json").read_text())
    return records, summary, (latest / "index.html").read_text()


def test_a_run_with_latency_reports_real_time_figures_everywhere(bench):
    result = bench.runpytest("--rollouts", "2", "--inference-latency", "steps:2")
    records, summary, html = run_files(bench)
    assert [len(r[keys.CALL_LATENCY_MS]) for r in records] == [r[keys.MODEL_CALLS] for r in records]
    assert all(r[keys.DELAY_STEPS_MEAN] == 2.0 for r in records)
    realtime = summary["evals"][0]["realtime"]
    assert realtime[keys.MODEL_CALLS] == sum(r[keys.MODEL_CALLS] for r in records)
    assert realtime[keys.LATENCY_MS_P95] == 200.0
    assert 0 < realtime[keys.STALE_ACTION_SHARE] < 1
    assert any("fresh Hz" in line for line in result.outlines)
    assert 'id="realtime-table"' in html


def test_a_run_without_latency_shows_no_real_time_figures(bench):
    result = bench.runpytest("--rollouts", "1")
    records, summary, html = run_files(bench)
    assert not any(keys.CALL_LATENCY_MS in r for r in records)
    assert "realtime" not in summary["evals"][0]
    assert not any("fresh Hz" in line for line in result.outlines)
    assert 'id="realtime-table"' not in html


def test_warm_start_is_a_run_setting_recorded_with_the_protocol(bench):
    bench.runpytest("--rollouts", "1", "--inference-latency", "steps:2", "--warm-start")
    records, _, _ = run_files(bench)
    latest = (bench.path / "reports" / "latest").resolve()
    fingerprint = json.loads((latest / "run.json").read_text())["fingerprint"]
    assert records[0][keys.POLICY][keys.WARM_START] is True
    assert fingerprint["run"][keys.WARM_START] is True
    # The first chunk is in hand at step 0, free: it is no call of the latency figures, which
    # are the charged calls' 2 steps each.
    record = records[0]
    latencies = record[keys.CALL_LATENCY_MS]
    assert latencies and set(latencies) == {2 * 1e3 / record[keys.CONTROL_HZ]}, latencies
    assert record[keys.DELAY_STEPS_MEAN] == 2.0
    assert record[keys.LATENCY_MS_P50] == latencies[0]


# Stands in for latency profile files in the run's processes (controller and workers): what is
# tested is how draws are seeded, not a profile's file format.
STAND_IN_PROFILES = """
import sys
import types


class UniformProfile:
    digest = "0123456789ab"

    def __init__(self, path):
        self.path = path

    @classmethod
    def load(cls, path):
        return cls(path)

    def draw_seconds(self, rng):
        return float(rng.uniform(0.0, 0.5))


module = types.ModuleType("policybench.policy.latency_profile")
module.LatencyProfile = UniformProfile
sys.modules[module.__name__] = module
"""


def profiled_records(pytester: pytest.Pytester, *workers: str) -> dict[str, tuple]:
    result = pytester.runpytest_subprocess(
        "--rollouts", "4", "--inference-latency", "profile:uniform.json", "-p", "no:cacheprovider",
        *workers,
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    records, _, _ = run_files(pytester)
    return {
        r[keys.NODEID]: (r[keys.OUTCOME], r[keys.STEPS], tuple(r[keys.CALL_LATENCY_MS]))
        for r in records
    }


def test_a_profile_run_gives_the_same_records_in_one_process_and_in_two(bench):
    bench.makeconftest(STAND_IN_PROFILES)
    alone = profiled_records(bench)
    assert len(alone) == 4 and len({draws for *_, draws in alone.values()}) == 4
    assert profiled_records(bench, "-n", "2") == alone
    latest = (bench.path / "reports" / "latest").resolve()
    fingerprint = json.loads((latest / "run.json").read_text())["fingerprint"]
    assert fingerprint["run"][keys.LATENCY_PROFILE] == "0123456789ab"
