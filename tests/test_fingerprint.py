"""run.json records the protocol fingerprint: the same command gives the same digest, and a
change of what a rollout measures (latency, timeout) changes it, with the readable fields."""

from __future__ import annotations

import json

import pytest

from tests.test_plugin import BENCHMARK, ENVS


def fingerprint(pytester: pytest.Pytester, *args: str) -> dict:
    pytester.runpytest("--rollouts", "1", "-k", "reach or far", *args)
    return json.loads((pytester.path / "reports/latest/run.json").read_text())["fingerprint"]


def test_the_fingerprint_is_stable_and_changes_with_the_protocol(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    first, again = fingerprint(pytester), fingerprint(pytester)
    assert first == again and len(first["digest"]) == 16
    assert set(first["evals"]) == {"solvable", "slow"}
    fields = first["evals"]["slow"]["fields"]
    assert fields["timeout_s"] == 0.2 and fields["scene_fields"] == ["seed", "task"]
    assert fields["policy"]["inference_latency"] == "none"

    late = fingerprint(pytester, "--inference-latency", "0.1")
    assert late["digest"] != first["digest"]
    assert late["evals"]["slow"]["fields"]["policy"]["inference_latency"] == "0.1"

    test = pytester.path / "test_point.py"
    test.write_text(test.read_text().replace("timeout_s=0.2", "timeout_s=0.3"))
    longer = fingerprint(pytester)
    assert longer["evals"]["slow"]["digest"] != first["evals"]["slow"]["digest"]
    assert longer["evals"]["solvable"] == first["evals"]["solvable"]
