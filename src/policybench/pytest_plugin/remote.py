"""Served policies in a run: where `--policy=openpi` is served, and, under xdist, one
`policybench serve` that the controller starts for a local policy and all workers share."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from policybench.pytest_plugin.options import SHARED_KEY, SHARED_URL
from policybench.pytest_plugin.rundir import settings_of
from policybench.pytest_plugin.workers import hand_to_workers, is_worker
from policybench.registry import OPENPI, RANDOM, SCRIPTED
from policybench.serve.command import API_KEY_VARIABLE, READY

AUTO, SHARED, PER_WORKER = "auto", "shared", "per-worker"
# Built-in policies that load nothing: a copy per worker costs less than a round trip per step.
LIGHT_POLICIES = (SCRIPTED, RANDOM)
# The run's server gives up on a model call a little before its clients would (--infer-timeout):
# the rollout whose call hung is told so, and the server exits to be restarted for the others.
CALL_TIMEOUT_SHARE = 0.9

START_TIMEOUT_S = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("policybench")
    group.addoption(
        "--policy-sharing",
        choices=(AUTO, SHARED, PER_WORKER),
        default=AUTO,
        help="with -n N and a local policy: one server all workers share, or a copy of the "
        "policy in each worker; auto (default) shares models that load weights and gives each "
        "worker its own scripted/random policy",
    )


SERVER = pytest.StashKey["SharedServer"]()


def pytest_configure(config: pytest.Config) -> None:
    if is_worker(config) or not _wants_shared_server(config):
        return
    server = SharedServer.start(config)
    config.stash[SERVER] = server
    config.add_cleanup(server.stop)
    hand_to_workers(config, SHARED_URL, server.url)
    hand_to_workers(config, SHARED_KEY, server.api_key)


def _wants_shared_server(config: pytest.Config) -> bool:
    distributed = getattr(config.option, "dist", "no") != "no"
    policy, sharing = settings_of(config).policy, config.getoption("policy_sharing")
    return (
        distributed
        and not config.option.collectonly
        and policy != OPENPI
        and (sharing == SHARED or (sharing == AUTO and policy not in LIGHT_POLICIES))
    )


class SharedServer:
    """A `policybench serve` subprocess on a free loopback port, with a fresh API key."""

    def __init__(self, process: subprocess.Popen[str], url: str, api_key: str) -> None:
        self.process = process
        self.url = url
        self.api_key = api_key

    @classmethod
    def start(cls, config: pytest.Config) -> SharedServer:
        api_key = secrets.token_hex(16)
        command = [
            sys.executable,
            "-m",
            "policybench.cli",
            "serve",
            "--policy",
            settings_of(config).policy,
            "--seed",
            str(config.getoption("seed")),
            "--policy-device",
            config.getoption("policy_device"),
            "--port",
            "0",
            "--evals-from-clients",
            "--call-timeout",
            f"{CALL_TIMEOUT_SHARE * config.getoption('infer_timeout'):g}",
        ]
        env = {**os.environ, API_KEY_VARIABLE: api_key, "PYTHONPATH": _import_path(config)}
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=None, text=True, env=env, cwd=config.rootpath
        )
        url = _await_ready(process)
        # Keep draining its output so a chatty server never blocks on a full pipe.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        return cls(process, url, api_key)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _await_ready(process: subprocess.Popen[str]) -> str:
    lines: list[str] = []
    timer = threading.Timer(START_TIMEOUT_S, process.kill)
    timer.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith(READY):
                return re.search(r"ws://\S+", line).group(0)
    finally:
        timer.cancel()
    process.wait()
    raise pytest.UsageError(
        f"the shared policy server did not start (exit code {process.returncode}); its output:\n"
        f"{''.join(lines)}\nrun without it with --policy-sharing=per-worker"
    )


def _import_path(config: pytest.Config) -> str:
    """What the server imports Evals from: this process's path, the rootdir, the test dirs."""
    dirs = [str(config.rootpath), *sys.path]
    for arg in config.args:
        path = Path(arg.split("::")[0])
        if path.exists():
            dirs.append(str((path if path.is_dir() else path.parent).resolve()))
    existing = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*dirs, *([existing] if existing else [])])
