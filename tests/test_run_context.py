"""This run: its directory is made when the run starts, atomically (two runs started together
get two, each with its own complete results), and a run that records nothing keeps none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_plugin import BENCHMARK, ENVS

REPO = Path(__file__).resolve().parents[1]


def start(path: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        command, cwd=path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_two_runs_started_together_get_two_directories_each_with_its_whole_results(tmp_path):
    (tmp_path / "envs.py").write_text(ENVS)
    (tmp_path / "test_point.py").write_text(BENCHMARK)
    selection = ("-k", "reach", "--rollouts", "3")
    runs = [start(tmp_path, *selection) for _ in range(2)]
    for run in runs:
        output = run.communicate(timeout=300)[0]
        assert run.returncode == 0, output[-3000:]
    run_dirs = sorted(p for p in (tmp_path / "reports").iterdir() if p.name != "latest")
    assert len(run_dirs) == 2, run_dirs
    for run_dir in run_dirs:
        lines = (run_dir / "results.jsonl").read_text().splitlines()
        nodeids = [json.loads(line)["nodeid"] for line in lines]
        assert sorted(nodeids) == [f"test_point.py::test_point[reach/seed={i}]" for i in range(3)]
        assert json.loads((run_dir / "run.json").read_text())["run_id"] == run_dir.name


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["-n 0", "-n 2"])
def test_a_run_that_selects_nothing_keeps_no_run_directory(pytester, workers):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    first = pytester.runpytest("-k", "reach", "--rollouts", "1")
    first.assert_outcomes(passed=1)
    reports = pytester.path / "reports"
    before = sorted(p.name for p in reports.iterdir())
    latest = (reports / "latest").resolve()

    nothing = pytester.runpytest("-k", "no-such-task", "--rollouts", "1", *workers)
    assert nothing.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    nothing.stdout.fnmatch_lines(["policybench: no rollout ran, so no run directory is kept (*"])
    assert sorted(p.name for p in reports.iterdir()) == before
    assert (reports / "latest").resolve() == latest


def test_a_session_without_rollouts_leaves_no_report_directory_and_says_nothing(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "reports").exists()
    assert "run directory" not in result.stdout.str()
