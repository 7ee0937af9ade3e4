"""The goldens bite: an off-by-one in chunk playback, a changed latency, a changed codec and a
perturbed physics parameter each fail a golden with a readable diff; float noise does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("metaworld", reason="needs MetaWorld: pip install 'policybench[metaworld]'")

from benchmarks.golden_pipelines import pipeline_trace, sim_trace
from policybench.policy.chunk_player import ChunkPlayer
from policybench.policy.codec import Codec, action_dims
from policybench.record.golden import GoldenExtension, dumps
from policybench.record.trace import describe_differences, differences

GOLDENS = Path(__file__).resolve().parents[1] / "goldens" / "test_goldens"


def stored(name: str) -> dict:
    return json.loads((GOLDENS / f"{name}.json").read_text())


def diff_of(name: str, trace: dict) -> list[str]:
    return describe_differences(differences(stored(name), json.loads(dumps(trace))))


@pytest.fixture(scope="module")
def pipeline_diff_base():
    """The unperturbed pipeline matches its golden (else the bite tests prove nothing)."""
    assert diff_of("test_pipeline_golden", pipeline_trace()) == []


def test_off_by_one_in_chunk_playback_fails_the_pipeline_golden(pipeline_diff_base, monkeypatch):
    load = ChunkPlayer._load
    period_ns = 12_500_000  # one control period at 80 Hz

    def load_one_period_late(self, call, chunk):
        load(self, call, chunk)
        self._waypoints = type(self._waypoints)((t + period_ns, a) for t, a in self._waypoints)

    monkeypatch.setattr(ChunkPlayer, "_load", load_one_period_late)
    trace = json.loads(dumps(pipeline_trace()))
    found = differences(stored("test_pipeline_golden"), trace)
    assert describe_differences(found)[0].startswith("golden differs at")
    assert ("trace[3].waypoint[1]", 3, 2) in [(d.path, d.expected, d.actual) for d in found]


def test_changed_latency_fails_the_pipeline_golden(pipeline_diff_base):
    diff = diff_of("test_pipeline_golden", pipeline_trace(latency_s=0.04))
    assert any("calls[0].arrives_ns: expected 30000000, got 40000000" in line for line in diff)
    assert any("inference_latency" in line for line in diff)


def test_changed_codec_rotation_fails_the_pipeline_golden(pipeline_diff_base):
    diff = diff_of(
        "test_pipeline_golden", pipeline_trace(codec=Codec("golden-unrotated", (action_dims(4),)))
    )
    first_step = next(line for line in diff if line.startswith("golden differs"))
    assert "first differing step: 3" in first_step  # the first chunk plays from step 3
    assert any(".command" in line for line in diff)


def test_perturbed_physics_fails_the_sim_golden():
    def less_friction(env):
        env.unwrapped.model.geom_friction[:] *= 0.8

    assert (
        diff_of("test_sim_golden[metaworld-pick-place-v3]", sim_trace("metaworld-pick-place-v3"))
        == []
    )
    diff = diff_of(
        "test_sim_golden[metaworld-pick-place-v3]",
        sim_trace("metaworld-pick-place-v3", less_friction),
    )
    assert diff and diff[0].startswith("golden differs at")
    assert any(".obs.state" in line for line in diff)


def test_float_noise_of_1e_9_does_not_fail_a_golden():
    golden = stored("test_pipeline_golden")

    def nudge(value):
        if isinstance(value, float):
            return value + 1e-9
        if isinstance(value, list):
            return [nudge(v) for v in value]
        if isinstance(value, dict):
            return {k: nudge(v) for k, v in value.items()}
        return value

    nudged = nudge(golden)
    assert nudged != golden
    extension = GoldenExtension.__new__(GoldenExtension)
    assert extension.matches(serialized_data=dumps(nudged), snapshot_data=dumps(golden))


def test_a_mismatch_reports_step_field_expected_actual_and_count():
    golden = stored("test_sim_golden[pusht]")
    changed = json.loads(json.dumps(golden))
    for step in changed["trace"][5:8]:
        step["reward"] += 0.5
    lines = describe_differences(differences(golden, changed))
    assert lines[0] == "golden differs at 3 step(s); first differing step: 5"
    expected = golden["trace"][5]["reward"]
    assert lines[1] == f"  trace[5].reward: expected {expected!r}, got {expected + 0.5!r}"


def test_the_same_golden_run_twice_is_identical():
    assert dumps(sim_trace("pusht")) == dumps(sim_trace("pusht"))


GOLDEN_MODULE = """
import pytest

TRACES = {TRACES}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_trace(name, golden):
    assert TRACES[name] == golden
"""


def test_goldens_are_stored_under_goldens_and_unused_ones_are_reported(pytester, monkeypatch):
    # The inner runs are plain runs even when this suite runs under xdist: syrupy keeps its
    # report to itself inside an xdist worker.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    traces = {"a": {"trace": [{"time_ns": 0, "reward": 0.5}]}, "b": {"trace": []}}
    pytester.makepyfile(test_mine=GOLDEN_MODULE.replace("{TRACES}", repr(traces)))
    created = pytester.runpytest("--snapshot-update")
    created.assert_outcomes(passed=2)
    stored = sorted(p.name for p in (pytester.path / "goldens" / "test_mine").iterdir())
    assert stored == ["test_trace[a].json", "test_trace[b].json"]

    traces["a"]["trace"][0]["reward"] = 0.75
    del traces["b"]
    pytester.makepyfile(test_mine=GOLDEN_MODULE.replace("{TRACES}", repr(traces)))
    changed = pytester.runpytest()
    assert changed.ret == 1
    changed.stdout.fnmatch_lines(
        [
            "*golden differs at 1 step(s); first differing step: 0*",
            "*trace[[]0[]].reward: expected 0.5, got 0.75*",
            "*1 snapshot failed. 1 snapshot unused.*",
        ]
    )
