"""Rollout traces: which chunk waypoint each step played (derived from the model calls) agrees
with what a real ChunkPlayer played, the document round-trips, small state vectors are kept and
images are not, and a real pytest run writes one trace per rollout that its record names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import Chunk
from policybench.policy.chunk_player import ChunkAnchor, ChunkPolicy
from policybench.policy.latency import InferenceLatency
from policybench.record.rollout_trace import (
    NO_CHUNK,
    StateRecorder,
    decode_array,
    read_trace,
    rollout_trace,
    write_trace,
)
from policybench.world import World
from tests.envs import PointEnv, point_eval

MARK = 1000.0  # a played action 1000 + 100 k + w is waypoint w of call k; the hold plays 0


class MarkedChunks:
    """Answers chunks of `horizon` actions that say which call and waypoint they are."""

    name = "marked"

    def __init__(self, horizon: int) -> None:
        self.horizon = horizon

    def open(self, context):
        calls = []

        def predict(obs):
            k = len(calls)
            calls.append(k)
            return Chunk(MARK + 100.0 * k + np.arange(self.horizon)[:, None], context.control_hz)

        return predict

    def describe(self):
        return {keys.POLICY_NAME: self.name}


class FarPointEnv(PointEnv):
    """A PointEnv whose goal is out of reach: every rollout runs to its timeout."""

    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(np.zeros(1))
        return obs, reward, terminated, truncated, {"is_success": False}


@pytest.mark.parametrize("anchor", list(ChunkAnchor))
@pytest.mark.parametrize(
    ("latency", "execute_steps", "horizon"),
    [
        ("none", None, 1),
        ("none", None, 4),
        ("steps:2", 3, 6),
        ("0.15", None, 5),
        ("steps:1", 2, 3),
        ("steps:3", None, 2),
        ("steps:2", None, 1),
    ],
)
def test_chunk_sources_name_the_waypoint_each_step_played(latency, execute_steps, horizon, anchor):
    eval = point_eval("far", timeout_s=3.0)
    eval = type(eval)(**{**eval.__dict__, "make_env": lambda task: FarPointEnv()})
    policy = ChunkPolicy(
        MarkedChunks(horizon),
        latency=InferenceLatency.parse(latency),
        execute_steps=execute_steps,
        anchor=anchor,
    )
    episode = run_rollout(eval.rollouts(1, 0)[0], World(eval), policy)
    assert episode.steps == 30 and not episode.outcome.is_error, episode.outcome
    played = np.array([float(step.command[0]) for step in episode.trace])
    trace = decoded(rollout_trace(episode))
    chunk, waypoint = trace["chunk"], trace["waypoint"]
    expected_chunk = np.where(played == 0, NO_CHUNK, (played - MARK) // 100).astype(int)
    expected_waypoint = np.where(played == 0, NO_CHUNK, (played - MARK) % 100).astype(int)
    assert chunk.tolist() == expected_chunk.tolist()
    assert waypoint.tolist() == expected_waypoint.tolist()
    assert len(trace["call_asked_s"]) == len(episode.calls)


def decoded(document):
    """The decoded arrays of a trace document."""
    return {name: decode_array(entry) for name, entry in document["arrays"].items()}


def test_trace_round_trips_actions_rewards_times_and_bounds(tmp_path):
    eval = point_eval("point", timeout_s=1.0)
    states = StateRecorder()
    policy = ChunkPolicy(MarkedChunks(3), latency=InferenceLatency.parse("steps:1"))
    episode = run_rollout(eval.rollouts(1, 0)[0], World(eval), policy, states)
    size = write_trace(tmp_path / "t.json", rollout_trace(episode, states))
    trace = read_trace(tmp_path / "t.json")
    arrays = trace["arrays"]
    assert trace["action_low"] == [-1.0] and trace["action_high"] == [1.0]
    assert arrays["action"].shape == (1, episode.steps)
    assert arrays["action"][0].tolist() == [float(s.command[0]) for s in episode.trace]
    assert arrays["reward"].tolist() == pytest.approx([s.reward for s in episode.trace], rel=1e-6)
    assert arrays["time_s"].tolist() == [s.time_ns / 1e9 for s in episode.trace]
    assert arrays["success"].tolist() == [int(s.success) for s in episode.trace]
    assert arrays["call_latency_ms"].tolist() == pytest.approx([100.0] * len(episode.calls))
    # The state observed at each step (position, goal), in half precision.
    assert arrays["state/state"].shape == (2, episode.steps)
    assert arrays["state/state"][0, 0] == 0.0
    assert size == (tmp_path / "t.json").stat().st_size


def test_state_recorder_keeps_small_vectors_and_says_why_it_left_the_rest_out():
    states = StateRecorder(cap=8)
    for t in range(3):
        states(
            t,
            {
                "state": np.arange(4.0) + t,
                "image": np.zeros((4, 4, 3), np.uint8),
                "long": np.zeros(9),
                "prompt": np.array("pick"),
            },
        )
    assert list(states.states) == ["state"] and len(states.states["state"]) == 3
    assert states.left_out == {
        "image": "shape [4, 4, 3] is not a vector",
        "long": "9 numbers, over the cap of 8",
        "prompt": "not numbers (dtype <U4)",
    }
    states.restart()
    assert states.states == {} and states.seen == 0


def test_reading_a_file_that_is_not_a_trace_says_what_it_found(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match=r"not a rollout trace of format .*found 'something-else'"):
        read_trace(path)
    path.write_text("{torn")
    with pytest.raises(ValueError, match="is not a readable rollout trace"):
        read_trace(path)


ENVS = (Path(__file__).parent / "envs.py").read_text()
BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

POINT = point_eval("point", tasks={"reach": "reach"}, scripted=GreedyPointModel)


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""


def run_project(tmp_path: Path, *args: str) -> Path:
    (tmp_path / "envs.py").write_text(ENVS)
    (tmp_path / "test_point.py").write_text(BENCHMARK)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rollouts", "2", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return (tmp_path / "reports" / "latest").resolve()


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_a_run_writes_one_trace_per_rollout_named_in_its_record(tmp_path):
    run_dir = run_project(tmp_path, "-n", "2")
    found = records(run_dir)
    assert len(found) == 2
    for record in found:
        trace = read_trace(run_dir / record[keys.ROLLOUT_TRACE])
        assert trace["steps"] == record[keys.STEPS]
        assert trace["arrays"]["action"].shape == (1, record[keys.STEPS])
        assert len(trace["arrays"]["call_asked_s"]) == record[keys.MODEL_CALLS]
    assert len({record[keys.ROLLOUT_TRACE] for record in found}) == 2


def test_no_rollout_traces_writes_none(tmp_path):
    run_dir = run_project(tmp_path, "--no-rollout-traces")
    assert all(record[keys.ROLLOUT_TRACE] is None for record in records(run_dir))
    assert not (run_dir / "traces").exists()
    page = (run_dir / "rollouts" / "00000.html").read_text()
    assert "No plots: no trace recorded" in page


def test_merged_shards_keep_every_rollouts_trace_and_their_pages_embed_it(tmp_path):
    from policybench.cli import main

    parts = []
    for shard in ("1/2", "2/2"):
        project = tmp_path / shard.replace("/", "-")
        project.mkdir()
        parts.append(run_project(project, "--shard", shard))
    out = tmp_path / "merged"
    assert main(["report", "merge", *map(str, parts), "--out", str(out)]) == 0
    merged = records(out)
    assert len(merged) == 2
    for index, record in enumerate(merged):
        assert read_trace(out / record[keys.ROLLOUT_TRACE])["steps"] == record[keys.STEPS]
        page = (out / "rollouts" / f"{index:05d}.html").read_text()
        assert 'id="rollout-trace"' in page and "No plots" not in page
    assert (out / "rollouts" / "rollout_plots.js").is_file()


def test_a_rollout_ended_by_an_env_fault_keeps_its_action_bounds():
    eval = point_eval("broken", raise_at_step=4)
    episode = run_rollout(eval.rollouts(1, 0)[0], World(eval), ChunkPolicy(MarkedChunks(2)))
    assert episode.outcome.is_error and episode.steps == 3
    trace = rollout_trace(episode)
    assert trace["action_low"] == [-1.0] and trace["action_high"] == [1.0]


def test_a_resumed_run_keeps_the_traces_of_the_rollouts_it_carried_over(tmp_path):
    import signal

    from tests.test_resume import bench_in, interrupted, run

    bench = bench_in(tmp_path / "interrupted")
    interrupted(bench, signal.SIGINT, 2, "--rollouts", "2")
    run_dir = (bench / "reports" / "latest").resolve()
    carried = {r[keys.NODEID]: r[keys.ROLLOUT_TRACE] for r in records(run_dir)}
    assert len(carried) >= 2
    resumed = run(bench, "--rollouts", "2", "--resume", "latest")
    assert resumed.returncode == 0, resumed.stdout[-2000:]
    after = records(run_dir)
    assert len(after) == 6
    for index, record in enumerate(after):
        assert read_trace(run_dir / record[keys.ROLLOUT_TRACE])["steps"] == record[keys.STEPS]
        assert (
            carried.get(record[keys.NODEID], record[keys.ROLLOUT_TRACE])
            == record[keys.ROLLOUT_TRACE]
        )
        assert 'id="rollout-trace"' in (run_dir / "rollouts" / f"{index:05d}.html").read_text()
