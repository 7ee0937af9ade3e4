"""One verdict, wherever it is read: a run whose rollouts all error, one whose trajectory specs
fail, one a success gate fails and one whose env aborts the process (SIGABRT, at -n 0) each show
the same verdict in the exit status, the run's last line, summary.json, the report and
`policybench history`; a run that passes says so last too."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from policybench.cli import main

ENVS = (Path(__file__).parent / "envs.py").read_text()
BENCHMARK = """
import os

import policybench
from envs import GreedyPointModel, PointEnv, point_eval
from policybench.spec import Eval


class AbortingEnv(PointEnv):
    def step(self, action):
        if self._seed == 1 and self._steps >= 2:
            os.abort()  # as a simulator's C code does: SIGABRT, no Python handler runs
        return super().step(action)


REACH = point_eval("reach", tasks={"a": "reach a"}, scripted=GreedyPointModel)
BROKEN = point_eval("broken", tasks={"b": "reach b"}, raise_at_step=2, scripted=GreedyPointModel)
ABORTS = Eval(**{**REACH.__dict__, "name": "aborts", "make_env": lambda task: AbortingEnv()})


@policybench.parametrize(REACH)
def test_reach(rollout, harness):
    harness(rollout)


@policybench.parametrize(BROKEN)
def test_broken(rollout, harness):
    harness(rollout)


@policybench.parametrize(ABORTS)
def test_aborts(rollout, harness):
    harness(rollout)
"""
SPECS = """
from policybench.trajectory import action_rate_limit


def pytest_policybench_specs(config, eval):
    return [action_rate_limit(0.001)]
"""


def run(folder: Path, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = str(folder)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "test_verdicts.py", "-p", "no:cacheprovider",
         "--rollouts", "2", "--report-dir", "reports", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return done.returncode, (done.stdout + done.stderr).rstrip()


def verdict_everywhere(folder: Path) -> dict:
    run_dir = (folder / "reports" / "latest").resolve()
    verdict = json.loads((run_dir / "summary.json").read_text())["verdict"]
    page = (run_dir / "index.html").read_text()
    assert f"Verdict: {verdict['kind']}" in page
    assert main(["history", str(folder / "reports")]) in (0, 1)
    with __import__("sqlite3").connect(folder / "reports" / "history.sqlite") as store:
        [(row,)] = store.execute("SELECT verdict FROM runs WHERE run_id = ?", (run_dir.name,))
    assert row.split(":")[0] == verdict["kind"]
    return verdict


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "envs.py").write_text(ENVS)
    (tmp_path / "test_verdicts.py").write_text(BENCHMARK)
    (tmp_path / "my_specs.py").write_text(SPECS)
    return tmp_path


def test_a_run_that_passes_ends_on_pass(folder):
    status, output = run(folder, "-k", "reach")
    assert status == 0
    assert output.splitlines()[-1] == "policybench: PASS"
    assert verdict_everywhere(folder) == {
        "kind": "passed", "passed": True, "breaches": [], "exit_status": 0
    }  # fmt: skip


def test_a_run_whose_rollouts_all_error_is_no_result_never_a_0_percent_success(folder):
    status, output = run(folder, "-k", "broken")
    assert status == 1
    assert output.splitlines()[-1] == "policybench: NO RESULT — 2 rollouts errored"
    verdict = verdict_everywhere(folder)
    assert verdict["kind"] == "no result" and verdict["exit_status"] == 1
    assert "no result" in output and "0.0%" not in output.split("eval ")[-1].splitlines()[1]


def test_a_run_whose_specs_fail_is_failed(folder):
    status, output = run(folder, "-k", "reach", "-p", "my_specs")
    assert status == 1
    last = output.splitlines()[-1]
    assert re.fullmatch(r"policybench: FAIL — (1 item|2 items) failed", last), last
    assert verdict_everywhere(folder)["breaches"] == [last.split(" — ")[1]]


def test_a_run_a_gate_fails_is_failed_naming_the_gate(folder):
    status, output = run(folder, "-k", "reach", "--policy=random", "--success-fail-under", "0.9")
    assert status == 1
    last = output.splitlines()[-1]
    assert last.startswith("policybench: FAIL — overall: success 0.0%"), last
    assert "below floor 90.0% (--success-fail-under)" in last
    assert verdict_everywhere(folder)["kind"] == "failed"


def test_a_process_its_env_aborts_is_recorded_aborted_with_its_report(folder):
    status, output = run(folder, "-k", "aborts", "-n", "0")
    assert status in (-signal.SIGABRT, 128 + signal.SIGABRT), output[-2000:]
    last = output.splitlines()[-1]
    assert last.startswith("policybench: ABORTED — the run's process (pid "), last
    assert "1 rollout recorded before it died; continue it with: " in last
    verdict = verdict_everywhere(folder)
    assert verdict["kind"] == "aborted" and not verdict["passed"]
    status_json = json.loads((folder / "reports" / "latest" / "status.json").read_text())
    assert status_json["state"] == "aborted"
