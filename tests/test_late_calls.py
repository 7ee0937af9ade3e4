"""A call whose drawn delay d exceeds the execution horizon s (a latency profile's draw; a fixed
delay must fit and is refused otherwise) is waited for: the current chunk plays on, then the
Eval's hold, the next call is asked when the late chunk arrives, and the record counts such calls.
A preflight that knows the model's horizon refuses an execution horizon the chunks cannot fill."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import Chunk
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency import InferenceLatency
from policybench.preflight import Verdict, preflight
from policybench.record.realtime import rollout_realtime
from policybench.spec import Rollout, Scene
from policybench.world import World
from tests.envs import point_eval
from tests.test_plugin import ENVS
from tests.test_rtc_protocol import CONTROL_HZ, STEPS, H, LabelledChunks, counter_eval

PERIOD_NS = round(1e9 / CONTROL_HZ)
HEAD = {"format": "policybench-latency-profile", "version": 1}
# At 10 Hz: a delay of 1 control step, or of 5.
ONE_OR_FIVE = {**HEAD, "sample_s": [0.1, 0.5]}


def played(tmp_path, execute_steps: int):
    profile = tmp_path / "one-or-five.json"
    profile.write_text(json.dumps(ONE_OR_FIVE))
    eval = counter_eval()
    rollout = Rollout(eval.name, 0, 1, "count", STEPS / CONTROL_HZ, scene=Scene("count", 0))
    latency = InferenceLatency.parse(f"profile:{profile}")
    policy = ChunkPolicy(LabelledChunks(), execute_steps=execute_steps, latency=latency)
    return run_rollout(rollout, World(eval), policy), policy


def test_a_call_later_than_the_horizon_is_waited_for_while_the_chunk_plays_on_then_holds(
    tmp_path,
):
    s = 3
    episode, _ = played(tmp_path, s)
    calls = episode.calls
    delays = [(call.arrives_ns - call.asked_ns) // PERIOD_NS for call in calls]
    assert set(delays) == {1, 5}, "the profile draws both delays in 40 steps"
    # The next call is asked s steps after the previous one, or when it arrives if it is late.
    for before, after in itertools.pairwise(calls):
        assert after.asked_ns == max(before.asked_ns + s * PERIOD_NS, before.arrives_ns)
    # Each step plays the newest arrived chunk's waypoint (anchored at its observation), or the
    # hold (zeros) once that chunk is played out while the next is still late.
    held = 0
    for step, trace in enumerate(episode.trace):
        arrived = [n for n, call in enumerate(calls) if call.arrives_ns <= step * PERIOD_NS]
        if not arrived:
            assert not trace.command.any()
            continue
        newest = arrived[-1]
        k = step - calls[newest].asked_ns // PERIOD_NS
        if k < H:
            assert tuple(trace.command[:2]) == (newest, k), step
        else:
            held += 1
            assert not trace.command.any(), step
    assert held > 0, "a late call outlasts the chunk before it at least once"
    figures = rollout_realtime(episode.statics, calls, episode.steps)
    assert figures[keys.CALLS_PAST_HORIZON] == delays.count(5) > 0


def test_calls_past_the_horizon_are_not_counted_without_an_execution_horizon(tmp_path):
    profile = tmp_path / "one-or-five.json"
    profile.write_text(json.dumps(ONE_OR_FIVE))
    statics = {
        keys.CONTROL_HZ: CONTROL_HZ,
        keys.POLICY: {keys.INFERENCE_LATENCY: "profile:x", keys.EXECUTE_STEPS: None},
    }
    assert keys.CALLS_PAST_HORIZON not in rollout_realtime(statics, (), 0)


class Chunks:
    """A model answering chunks of `horizon` zeros (a point env's one action dimension)."""

    name = "chunks"

    def __init__(self, horizon: int) -> None:
        self.horizon = horizon

    def open(self, context):
        return lambda obs: Chunk(np.zeros((self.horizon, 1)), context.control_hz)

    def describe(self):
        return {"name": self.name}


@pytest.mark.parametrize(
    ("latency", "execute_steps", "horizon", "problem"),
    [
        ("steps:2", 4, 1, "valid s lie in [max(1, d), H - d] = none"),
        ("steps:2", 4, 5, "needs chunks of at least s + d = 6 actions, but the model answered 5"),
        # seconds are control steps only at the Eval's rate (the point Eval: 10 Hz)
        ("0.25", 2, 8, "--execute-steps 2 is shorter than the delay of 3 control steps"),
    ],
)
def test_the_preflight_fails_an_execution_horizon_its_chunks_cannot_fill(
    latency, execute_steps, horizon, problem
):
    eval = point_eval()
    policy = ChunkPolicy(
        Chunks(horizon), execute_steps=execute_steps, latency=InferenceLatency.parse(latency)
    )
    found = preflight(World(eval), eval.rollouts(1, 0)[0], policy)
    assert found.verdict is Verdict.FAILED and problem in found.problem


def test_the_preflight_passes_a_fitting_horizon_and_notes_a_profile_that_can_exceed_it(tmp_path):
    eval = point_eval()
    fits = ChunkPolicy(Chunks(6), execute_steps=4, latency=InferenceLatency.parse("steps:2"))
    found = preflight(World(eval), eval.rollouts(1, 0)[0], fits)
    assert found.verdict is Verdict.PASSED and found.notes == ()
    profile = tmp_path / "one-or-five.json"
    profile.write_text(json.dumps(ONE_OR_FIVE))
    latency = InferenceLatency.parse(f"profile:{profile}")
    for execute_steps, note in ((5, None), (3, "50.0% of the latency profile's draws exceed")):
        policy = ChunkPolicy(Chunks(8), execute_steps=execute_steps, latency=latency)
        found = preflight(World(eval), eval.rollouts(1, 0)[0], policy)
        assert found.verdict is Verdict.PASSED
        if note is None:
            assert found.notes == ()
        else:
            assert len(found.notes) == 1 and found.notes[0].startswith(note)
            assert "--execute-steps 3 (300 ms)" in found.notes[0]


BENCHMARK = """
import policybench
from envs import point_eval

POINT = point_eval("point", tasks={"a": "reach a", "b": "reach b"})


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""
ONE = """
import numpy as np
from policybench.policy.base import Chunk


class One:
    name = "one"

    def open(self, context):
        return lambda obs: Chunk(np.zeros((1, 1)), context.control_hz)

    def describe(self):
        return {"name": self.name}


MODEL = One()
"""


def test_a_run_whose_model_cannot_fill_the_horizon_fails_its_preflight_once_without_tracebacks(
    pytester: pytest.Pytester,
):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK, one=ONE)
    result = pytester.runpytest_subprocess(
        "--rollouts", "2", "--policy=one:MODEL", "--execute-steps", "4",
        "--inference-latency", "steps:2",
    )  # fmt: skip
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(["preflight point: failed: execute_steps s=4 *= none*"])
    assert "Traceback" not in result.stdout.str()
    lines = (pytester.path / "reports/latest/results.jsonl").read_text().splitlines()
    for record in map(json.loads, lines):
        assert record["reason"].startswith("preflight of 'point' failed")


EIGHT = "from envs import GreedyPointModel\nMODEL = GreedyPointModel(horizon=8)\n"
LATE = ("--policy=eight:MODEL", "--execute-steps", "3", "--rollouts", "1")


def test_a_run_notes_a_profile_past_the_horizon_and_counts_the_late_calls_per_rollout(
    pytester: pytest.Pytester,
):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK, eight=EIGHT)
    (pytester.path / "late.json").write_text(json.dumps(ONE_OR_FIVE))
    result = pytester.runpytest_subprocess(*LATE, "--inference-latency", "profile:late.json")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["preflight point: passed: *; 50.0% of the latency profile's draws exceed "
         "--execute-steps 3 (300 ms): the next call waits for such a call*"]
    )  # fmt: skip
    lines = (pytester.path / "reports/latest/results.jsonl").read_text().splitlines()
    for record in map(json.loads, lines):
        late = sum(ms > 300 for ms in record[keys.CALL_LATENCY_MS])
        assert record[keys.CALLS_PAST_HORIZON] == late


def test_a_blinded_sweep_keeps_the_late_calls_and_their_note_out_of_its_files(
    pytester: pytest.Pytester,
):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK, eight=EIGHT)
    (pytester.path / "late.json").write_text(json.dumps(ONE_OR_FIVE))
    sweep = ("--latency-sweep", "0,profile:late.json", "--blind", "k")
    result = pytester.runpytest_subprocess(*LATE, *sweep)
    assert result.ret == 0, result.stdout.str()
    assert "latency profile" not in result.stdout.str()
    run = pytester.path / "reports/latest"
    for path in [run / "results.jsonl", *(run / "preflight").glob("*.json")]:
        assert keys.CALLS_PAST_HORIZON not in path.read_text(), path
        assert "latency profile" not in path.read_text(), path
