"""What a run leaves and says, as a new user meets it: a crashed worker's record says null for
what it never reported (and the report still builds), no empty hangs/, a blinded run's reasons
name no arm's URL, an unreachable policy server is one line per rollout, and the run that ran
nothing names the report directory as reachable from where pytest ran."""

from __future__ import annotations

import json

import pytest

from tests.test_crashes import BENCHMARK as CRASHING
from tests.test_plugin import BENCHMARK, ENVS
from tests.test_remote import REPO, free_port

SERVED = """
import policybench
from tests.served import POINT


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""


def records_of(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_a_crashed_rollout_says_null_for_what_it_never_reported_and_the_report_builds(pytester):
    pytester.makepyfile(envs=ENVS, test_point=CRASHING)
    result = pytester.runpytest_subprocess("-n", "2", "--rollouts", "1", "--retry-errors", "0")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    run_dir = pytester.path / "reports" / "latest"
    died = next(r for r in records_of(run_dir) if r["eval"] == "dying")
    assert "killed by SIGKILL" in died["reason"]
    for field in ("steps", "sim_s", "wall_s", "model_calls", "sum_reward"):
        assert died[field] is None, field
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary  # the statistics skipped the nulls
    assert "die" in (run_dir / "index.html").read_text()
    assert not (run_dir / "hangs").exists()  # no rollout hung: no hangs/ either


def test_an_unreachable_policy_server_is_one_line_per_rollout(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(envs=ENVS, test_point=SERVED)
    url = f"ws://127.0.0.1:{free_port()}"  # nothing serves there
    result = pytester.runpytest_subprocess(
        "--rollouts", "2", "--policy=openpi", f"--policy-url={url}", "--server-wait=0"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "cannot reach a policy server" in out
    assert "Traceback" not in out and 'File "' not in out, out


def test_a_blinded_run_names_no_arm_by_its_url(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(envs=ENVS, test_point=SERVED)
    first, second = f"ws://127.0.0.1:{free_port()}", f"ws://127.0.0.1:{free_port()}"
    result = pytester.runpytest_subprocess(
        "--rollouts", "2",
        "--policy", f"a=openpi@{first}",
        "--policy", f"b=openpi@{second}",
        "--blind", "key",
        "--server-wait=0",
        "--retry-errors=0",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    records = records_of(pytester.path / "reports" / "latest")
    assert records and all(r["outcome"] == "error" for r in records)
    for record in records:
        assert first not in record["reason"] and second not in record["reason"], record["reason"]
        assert f"<arm {record['arm']}'s server>" in record["reason"], record["reason"]


def test_a_run_that_ran_nothing_names_the_report_directory_as_given(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    given = ("--report-dir", "out/reports8", "--rollouts", "1")
    assert pytester.runpytest("-k", "reach", *given).ret == 0
    assert not (pytester.path / "out" / "reports8" / "latest" / "hangs").exists()  # none hung
    nothing = pytester.runpytest("-k", "no-such-task", *given)
    nothing.stdout.fnmatch_lines(["*(* removed; out/reports8/latest is unchanged)"])
