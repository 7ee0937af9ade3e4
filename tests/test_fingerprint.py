"""run.json records the run's protocol (its fingerprint): the same command gives the same digest,
a change of what a rollout measures (latency, timeout) changes it, with the readable fields, and
what the protocol leaves out (the number of rollouts, the policy) does not."""

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
    slow = first["evals"]["slow"]
    assert slow["tasks"]["far"] == {"instruction": "reach slowly", "timeout_s": 0.2}
    assert slow["fields"]["scene_fields"] == ["seed", "task"]
    assert slow["fields"]["policy.name"] == "greedy"  # shown, though not in the digest
    assert first["run"]["inference_latency"] == "none" and first["run"]["base_seed"] == 0

    late = fingerprint(pytester, "--inference-latency", "0.1")
    assert late["digest"] != first["digest"]
    assert late["run"]["inference_latency"] == "0.1"

    # More rollouts extend the plan, another policy is what a comparison varies: neither is
    # the protocol.
    assert fingerprint(pytester, "--rollouts", "2")["digest"] == first["digest"]
    assert fingerprint(pytester, "--policy", "random")["digest"] == first["digest"]

    test = pytester.path / "test_point.py"
    test.write_text(test.read_text().replace("timeout_s=0.2", "timeout_s=0.3"))
    longer = fingerprint(pytester)
    assert longer["evals"]["slow"]["digest"] != slow["digest"]
    assert longer["evals"]["solvable"] == first["evals"]["solvable"]
