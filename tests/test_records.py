"""One rollout's record has one shape, however it was made: a rollout that ran and a rollout
whose worker was killed under it (recorded by the controller) hold the same fields, their arm
included in an A/B run."""

from __future__ import annotations

import json

from policybench import keys
from tests.test_crashes import BENCHMARK
from tests.test_plugin import ENVS

AB = ("--policy", "scripted", "--policy", "random")


def test_a_crash_record_and_a_record_that_ran_hold_the_same_fields_and_arm(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--rollouts", "1", "--retry-errors", "0", "--max-worker-restart=8", *AB
    )
    # scripted solves `reach`, random does not; both arms' `die` rollouts crash their workers
    assert result.parseoutcomes() == {"passed": 1, "unsolved": 1, "errors": 2}
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = {record[keys.NODEID]: record for record in map(json.loads, path.open())}
    crashed = [r for r in records.values() if r[keys.EVAL] == "dying"]
    ran = [r for r in records.values() if r[keys.EVAL] == "point"]
    assert len(crashed) == 2 and len(ran) == 2
    assert all("killed by SIGKILL" in r[keys.REASON] for r in crashed)
    assert {frozenset(r) for r in records.values()} == {frozenset(ran[0])}
    for record in records.values():
        assert record[keys.NODEID].endswith(f"/policy={record[keys.ARM]}]")
    for record in crashed:  # what only the crashed worker could have said is said to be unknown
        assert record[keys.POLICY] is None and record[keys.PEAK_RSS_MB] is None
        assert record[keys.SUCCESS_REPORTED] is None and record[keys.WORKER].startswith("gw")
