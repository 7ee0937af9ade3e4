"""A run with `--inference-latency profile:FILE` (real MetaWorld, its scripted experts, which ask
for a new action every control step) is the same run on any host: a rerun at -n 2 beside a process
burning a CPU gives the records of an idle run at -n 0; another profile changes them."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from policybench import keys
from policybench.policy.latency_profile import LatencyProfile

pytest.importorskip("metaworld")

# Two MT10 tasks, each rollout cut to 1.5 s (120 control steps) to keep the runs short.
BENCHMARK = """
import dataclasses

import policybench
from policybench.spec import seeded_per_task
from policybench.suites.metaworld import MT10, mt10

TASKS = {task: MT10[task] for task in ("reach-v3", "push-v3")}
MT = dataclasses.replace(mt10(tasks=TASKS), plan=seeded_per_task(TASKS, timeout_s=1.5))


@policybench.parametrize(MT)
def test_mt(rollout, harness):
    harness(rollout)
"""
HEAD = {"format": "policybench-latency-profile", "version": 1}
# Calls of a few control periods (80 Hz: 12.5 ms each), as a served VLA might take.
LOGNORMAL = {**HEAD, "family": "lognorm", "params": {"s": 0.5, "scale": 0.03}}
SLOWER = {**HEAD, "sample_s": [0.02, 0.06, 0.09, 0.15]}
# What must not change with the host: each rollout's outcome, length, reward, and the latency
# charged to each of its calls.
COMPARED = (keys.OUTCOME, keys.STEPS, keys.SUM_REWARD, keys.CALL_LATENCY_MS)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the benchmark module and the two profiles."""
    directory = tmp_path_factory.mktemp("profile-runs")
    (directory / "test_mt.py").write_text(BENCHMARK)
    (directory / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    for name, content in (("lognorm.json", LOGNORMAL), ("slower.json", SLOWER)):
        (directory / name).write_text(json.dumps(content))
    return directory


def run(directory: Path, profile: str, *options: str) -> dict[str, tuple]:
    """Each rollout's compared fields, by rollout id, from a run of pytest in a process of its
    own (as a user runs it) into a report folder of its own."""
    report = f"reports-{len(list(directory.glob('reports-*')))}"
    command = [sys.executable, "-m", "pytest", "--rollouts", "2", "--policy", "scripted"]
    command += ["--inference-latency", f"profile:{profile}", "--report-dir", report, *options]
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (directory / report / "latest" / "results.jsonl").read_text().splitlines()
    digest = LatencyProfile.load(directory / profile).digest
    found = {}
    for record in map(json.loads, lines):
        assert record[keys.POLICY][keys.LATENCY_PROFILE] == digest
        found[record[keys.NODEID]] = tuple(record[key] for key in COMPARED)
    assert len(found) == 4
    return found


@pytest.fixture(scope="module")
def idle(bench: Path) -> dict[str, tuple]:
    """The records of a run at -n 0 on an otherwise idle host."""
    return run(bench, "lognorm.json", "-n", "0")


@contextlib.contextmanager
def cpu_burner() -> Iterator[subprocess.Popen[bytes]]:
    """A real process spinning on a CPU beside what runs inside, killed after it."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield burner
    finally:
        burner.kill()
        burner.wait()


def test_a_rerun_at_n_2_beside_a_cpu_burner_gives_the_idle_n_0_runs_records(bench, idle):
    with cpu_burner() as burner:
        assert run(bench, "lognorm.json", "-n", "2") == idle
        assert burner.poll() is None  # it burned all along
    charged = [latency for *_, latencies in idle.values() for latency in latencies]
    assert len(set(charged)) > 10  # drawn per call, not one fixed delay


def test_another_profile_changes_the_records(bench, idle):
    other = run(bench, "slower.json", "-n", "0")
    assert idle.keys() == other.keys()
    for rollout, fields in idle.items():
        assert fields[-1] != other[rollout][-1], rollout  # the latencies charged
    assert any(idle[rollout][:-1] != other[rollout][:-1] for rollout in idle)
