"""A suite's benchmark run as a user checks a new suite runs at all: the random policy served by
the run's own server (`--policy-sharing=shared`) at -n 2, one rollout a task unless told."""

from __future__ import annotations

import json

import pytest


def served_random_run(
    pytester: pytest.Pytester, module: str, benchmark: str, *args: str
) -> tuple[list[dict], str]:
    """Runs `benchmark` (a test module's source, written as `module`.py) with `args` after the
    served random policy's; returns its records, each checked to have ended solved or unsolved
    (no error) under the shared server, and the tail of its output to explain a failed check."""
    pytester.makepyfile(**{module: benchmark})
    result = pytester.runpytest_subprocess(
        "--policy=random", "--policy-sharing=shared", "-n", "2", "--rollouts", "1", *args
    )
    said = result.stdout.str()[-3000:]
    lines = (pytester.path / "reports" / "latest" / "results.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines]
    assert {r["outcome"] for r in found} <= {"solved", "unsolved"}, said
    assert all(r["policy"].get("served") == "shared" for r in found), said
    return found, said
