"""The processes a run owns: with a local model under `-n 2`, the controller starts one
`policybench serve` that its workers share. SIGTERM or SIGKILL to the controller leaves no process
of the run behind (SIGTERM stops the run as Ctrl-C does: finished rollouts kept, summary
written; after SIGKILL the run's witness records it aborted, with its report); a server that
dies is restarted on the same URL and the run finishes; a server that cannot start, or keeps
dying, ends the run in seconds with every rollout an error record. Every test runs real pytest
processes and sends real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from policybench import keys
from policybench.serve.command import READY

REPO = Path(__file__).resolve().parents[1]
ROLLOUTS = 8  # 4 tasks x 2

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="finds the run's processes in /proc (Linux)"
)

BENCHMARK = """
import policybench
from envs import point_eval

POINT = point_eval("point", tasks={f"t{i}": "reach the goal" for i in range(4)}, timeout_s=3.0)


@policybench.parametrize(POINT)
def test_point(rollout, harness):
    harness(rollout)
"""

MODELS = """
import os, signal, sys, time

import numpy as np

from policybench.policy.base import Chunk


class Slow:
    # Steps at the goal it sees, 0.3 s per call: a rollout takes a few seconds.
    name = "slow-greedy"

    def open(self, context):
        def predict(obs):
            time.sleep(0.3)
            pos, goal = obs["state"]
            return Chunk(np.clip([[goal - pos]], -0.5, 0.5), context.control_hz)

        return predict

    def describe(self):
        return {"name": self.name}


def killed_while_loading(eval, action_space, settings):
    # The server is killed each time it builds the model, as the out-of-memory killer would.
    os.kill(os.getpid(), signal.SIGKILL)


SLOW = Slow()
"""

TOO_LARGE = """
import sys

from models import Slow


class TooLarge(Slow):
    # Built where the run checks the policy name, but not in the server, as a model too large
    # for the memory left there would not be.
    def __init__(self):
        if "serve" in sys.argv:
            raise RuntimeError("not enough memory to load the model (simulated)")


MODEL = TooLarge()
"""


class Run:
    """`pytest -n 2` over the benchmark in its own process group, with `policy`."""

    def __init__(self, path: Path, policy: str, *args: str) -> None:
        (path / "envs.py").write_text((REPO / "tests" / "envs.py").read_text())
        (path / "test_bench.py").write_text(BENCHMARK)
        (path / "models.py").write_text(MODELS)
        (path / "too_large.py").write_text(TOO_LARGE)
        self.path = path
        self.output = path / "output.txt"
        command = [sys.executable, "-m", "pytest", "test_bench.py", "-n", "2", "-p"]
        command += ["no:cacheprovider", "--rollouts", "2", f"--policy={policy}", *args]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(REPO)])}
        with self.output.open("w") as output:
            self.process = subprocess.Popen(
                command,
                cwd=path,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: every process it starts
                # Ctrl-C as in a terminal, also where this test runs as a background job (which
                # starts with SIGINT ignored).
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )

    def records(self) -> list[dict]:
        found = sorted((self.path / "reports").glob("*/results.jsonl"))
        lines = found[0].read_text().splitlines() if found else []
        return [json.loads(line) for line in lines if line.endswith("}")]

    def wait_for(self, ready, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert self.process.poll() is None, f"the run ended early:\n{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"timed out:\n{self.text()[-3000:]}"
            time.sleep(0.2)

    def alive(self) -> list[str]:
        """The run's processes still alive (zombies are not): its process group."""
        group = self.process.pid
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, IndexError):
                continue
            state, pgrp = fields[0], int(fields[2])
            if pgrp == group and state != "Z":
                found.append(f"{stat.parent.name} {cmdline[:120]}")
        return found

    def server_pid(self) -> int:
        servers = [line for line in self.alive() if "policybench.cli serve" in line]
        assert len(servers) == 1, self.alive()
        return int(servers[0].split()[0])

    def finish(self, timeout_s: float = 240.0) -> int:
        try:
            return self.process.wait(timeout_s)
        finally:
            self.end()

    def end(self) -> None:
        """Ends whatever of the run is left (a failed test's run, or what it left behind)."""
        if self.process.poll() is None or self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def run_dir(self) -> Path:
        (found,) = (self.path / "reports").glob("2*")
        return found


@pytest.fixture
def start(tmp_path):
    """Starts a run in `tmp_path`; whatever is left of it is ended after the test."""
    runs: list[Run] = []

    def started(policy: str, *args: str) -> Run:
        runs.append(Run(tmp_path, policy, *args))
        return runs[-1]

    yield started
    for run in runs:
        run.end()


def none_alive_within(run: Run, seconds: float) -> float:
    started = time.monotonic()
    while run.alive():
        assert time.monotonic() - started < seconds, f"still alive: {run.alive()}"
        time.sleep(0.1)
    return time.monotonic() - started


def test_sigterm_to_the_controller_keeps_the_finished_rollouts_and_leaves_no_process(start):
    run = start("models:SLOW")
    run.wait_for(lambda: len(run.records()) >= 2)
    assert any("policybench.cli serve" in line for line in run.alive())
    os.kill(run.process.pid, signal.SIGTERM)
    took = none_alive_within(run, 30.0)
    assert run.finish() == pytest.ExitCode.INTERRUPTED, run.text()[-3000:]
    print(f"no process of the run left {took:.1f} s after SIGTERM")
    run_dir = run.run_dir()
    records = run.records()
    assert 2 <= len(records) < ROLLOUTS
    assert {r[keys.OUTCOME] for r in records} == {"solved"}
    assert json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "index.html").is_file()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_run_stops_it_and_its_server_without_a_restart(start, signum):
    run = start("models:SLOW")
    run.wait_for(lambda: len(run.records()) >= 2)
    # SIGINT: what Ctrl-C in a terminal does; SIGTERM: what `timeout` or a service manager does.
    os.killpg(run.process.pid, signum)
    none_alive_within(run, 30.0)
    assert run.finish() == pytest.ExitCode.INTERRUPTED, run.text()[-3000:]
    assert "restarting" not in run.text()
    assert (run.run_dir() / "summary.json").is_file()


def test_sigkill_to_the_controller_leaves_no_process(start):
    run = start("models:SLOW")
    run.wait_for(lambda: len(run.records()) >= 1)
    before = run.alive()
    # The controller, its server, two workers, and the run's witness (report.aborted).
    assert len(before) == 5, before
    os.kill(run.process.pid, signal.SIGKILL)
    run.process.wait()
    took = none_alive_within(run, 10.0)
    print(f"no process of the run left {took:.1f} s after SIGKILL")
    # The witness recorded the run as aborted, with the report of the rollouts it kept.
    status = json.loads((run.run_dir() / "status.json").read_text())
    assert status["state"] == "aborted", status
    verdict = json.loads((run.run_dir() / "summary.json").read_text())["verdict"]
    assert verdict["kind"] == "aborted" and (run.run_dir() / "index.html").is_file()


def test_a_server_killed_mid_run_is_restarted_and_every_rollout_finishes(start):
    run = start("models:SLOW")
    run.wait_for(lambda: len(run.records()) >= 1)
    os.kill(run.server_pid(), signal.SIGKILL)
    killed = time.monotonic()
    assert run.finish() == pytest.ExitCode.OK, run.text()[-3000:]
    print(f"the run finished {time.monotonic() - killed:.1f} s after its server was killed")
    records = run.records()
    assert len(records) == ROLLOUTS
    assert {r[keys.OUTCOME] for r in records} == {"solved"}
    retried = [r for r in records if r.get(keys.RETRIED)]
    assert 1 <= len(retried) <= 2, retried  # the rollouts in flight, one per worker
    assert "was killed by SIGKILL" in run.text() and "restarting it on ws://" in run.text()
    log = (run.run_dir() / "server.log").read_text()
    assert log.count(READY) == 2, log  # the first server, then its successor on the same URL


def test_a_server_that_cannot_start_errs_every_rollout_in_seconds(start):
    started = time.monotonic()
    run = start("too_large:MODEL")
    assert run.finish() == pytest.ExitCode.TESTS_FAILED, run.text()[-3000:]
    took = time.monotonic() - started
    records = run.records()
    assert len(records) == ROLLOUTS
    for record in records:
        assert record[keys.OUTCOME] == "error"
        assert "exited with status 1 before serving" in record[keys.REASON]
        assert "not enough memory to load the model (simulated)" in record[keys.REASON]
        assert not record.get(keys.RETRIED)
    text = run.text()
    assert "RuntimeError: not enough memory to load the model (simulated)" in text
    assert "restarting" not in text
    assert (run.run_dir() / "summary.json").is_file()
    print(f"the run ended {took:.1f} s after it started")


def test_a_server_that_keeps_dying_is_given_up_after_three_restarts(start):
    run = start("models:killed_while_loading", "--retry-errors", "5")
    assert run.finish() == pytest.ExitCode.TESTS_FAILED, run.text()[-3000:]
    records = run.records()
    assert len(records) == ROLLOUTS
    assert {r[keys.OUTCOME] for r in records} == {"error"}
    gone = [r for r in records if "is gone for good" in r[keys.REASON]]
    assert gone and all("4 deaths in this run" in r[keys.REASON] for r in gone)
    text = run.text()
    assert text.count("restarting it on ws://") == 3
    assert "so it is not restarted again" in text


CHILD = """
import sys, time
import policybench.lifetime as lifetime
if sys.argv[1] == "watching thread":  # as where the kernel offers no parent-death signal
    lifetime._kernel_kills_on_parent_death = lambda: False
lifetime.die_with_starter()
print("ready", flush=True)
time.sleep(60)
"""

STARTER = """
import subprocess, sys, os
from policybench.lifetime import owned_env
command = [sys.executable, "-c", sys.argv[1], sys.argv[2]]
child = subprocess.Popen(command, env=owned_env(os.environ), stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
child.wait()
"""


@pytest.mark.parametrize("how", ["kernel", "watching thread"])
def test_a_child_started_with_owned_env_ends_when_its_starter_is_killed(how):
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, CHILD, how], stdout=subprocess.PIPE, text=True
    )
    child = int(starter.stdout.readline())
    os.kill(starter.pid, signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 5.0
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child):
        assert time.monotonic() < deadline, f"the child {child} outlived its starter"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_both_arms_of_an_ab_run_play_through_servers_of_the_run_alike(start):
    """With --policy-sharing=shared under -n 2, every local arm is played through a server of
    the run's own (one per policy), not only the first; their records say so in the same
    terms, and each server keeps its own log."""
    run = start("models:SLOW", "--policy=random", "--policy-sharing=shared")
    assert run.finish() == 0, run.text()[-3000:]
    records = run.records()
    assert {r[keys.ARM] for r in records} == {"SLOW", "random"}
    for record in records:
        assert record[keys.POLICY]["served"] == "shared", record[keys.POLICY]
    logs = {path.name for path in run.run_dir().glob("server*.log")}
    assert logs == {"server.log", "server-2.log"}
    assert not run.alive()
