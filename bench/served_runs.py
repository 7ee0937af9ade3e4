"""What bench/full_run.py and bench/faults.py share: a `policybench serve` process that can be
stopped, killed and started again on its port, pytest runs against it, and reading a run dir."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.run.records import latest_per_rollout
from policybench.run.results import LATEST, RESULTS, read_results
from policybench.serve.command import READY

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def restore_ctrl_c() -> None:
    """Makes SIGINT reach this script's children as Ctrl-C. A script started in the background
    (`python bench/faults.py &`) has SIGINT ignored, and children keep an ignored signal across
    exec: a server or pytest run told to stop would go on."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child, software rendering by default, plus `extra`."""
    return {"MUJOCO_GL": "egl", **os.environ, **extra}


class PolicyServer:
    """`policybench serve` as a user starts it, on one port for its whole life: stopped with
    Ctrl-C, killed, or started again, the URL stays the same. Its output goes to `log`."""

    def __init__(self, policy: str, log: Path, *serve_args: str, env: Mapping[str, str]) -> None:
        self.policy = policy
        self.port = free_port()
        self.log = log
        self.serve_args = serve_args
        self.env = dict(env)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        return [
            *("policybench", "serve", f"--policy={self.policy}", *self.serve_args),
            *("--port", str(self.port)),
        ]

    def start(self) -> float:
        """Starts the server and returns once it says it is serving (time.monotonic() then)."""
        with self.log.open("ab") as log:
            offset = log.tell()
            argv = [sys.executable, "-m", "policybench.cli", *self.command[1:]]
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with self.log.open("rb") as log:
                log.seek(offset)
                if READY.encode() in log.read():
                    return time.monotonic()
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop(signal.SIGKILL)
        tail = self.log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"`{' '.join(self.command)}` did not start; its output:\n{tail}")

    def stop(self, how: signal.Signals = signal.SIGINT) -> None:
        """Stops it with `how` (SIGINT: as Ctrl-C does; SIGKILL: at once) and waits until gone."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(how)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def run_dir_in(report_dir: Path) -> Path:
    """The run dir a pytest run wrote under `report_dir` (its `latest`)."""
    return (report_dir / LATEST).resolve()


def results_path(report_dir: Path) -> Path:
    return report_dir / LATEST / RESULTS


def recorded_count(report_dir: Path) -> int:
    """How many records the run under `report_dir` has written so far (0 before its first)."""
    try:
        return results_path(report_dir).read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def final_records(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The last record of each rollout of a run dir, by node id (none before its first)."""
    if not (run_dir / RESULTS).is_file():
        return {}
    records = read_results(run_dir / RESULTS).records
    return {record[keys.NODEID]: record for record in latest_per_rollout(records)}


COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|unsolved|rerun|xfailed)")


def item_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (`18 passed, 2 errors in 15.24s`)."""
    lines = [line for line in output.splitlines() if re.search(r" in [\d.]+s", line)]
    if not lines:
        return {}
    found = {noun: int(n) for n, noun in COUNT.findall(lines[-1])}
    if "error" in found:
        found["errors"] = found.pop("error") + found.get("errors", 0)
    return found


def processes_in_group(pgid: int) -> list[int]:
    """The live processes of a process group (Linux /proc)."""
    return [pid for pid, fields in _live_processes() if int(fields[2]) == pgid]


def children_of(pid: int) -> list[int]:
    """The live child processes of `pid` (Linux /proc)."""
    return [child for child, fields in _live_processes() if int(fields[1]) == pid]


def _live_processes() -> Iterator[tuple[int, list[str]]]:
    """Each live process's id and the fields of its /proc stat after the command (state, parent,
    process group, ...)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            yield int(entry.name), fields


def end_group(pgid: int) -> None:
    """Kills what is left of a process group this script started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def shown(command: Sequence[str], replacements: Mapping[str, str]) -> str:
    """A command line for the reader: the interpreter as `python`, temporary paths named."""
    import shlex

    text = shlex.join(["python", *command[1:]] if command[0] == sys.executable else command)
    for path, name in replacements.items():
        text = text.replace(path, name)
    return text
