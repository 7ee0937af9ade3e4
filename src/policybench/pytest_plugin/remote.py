"""Served policies in a run: where `--policy=openpi` is served, and, under xdist, one
`policybench serve` that the controller starts for a local policy, all workers share, and the
controller keeps up (restarted when it dies, given up when it cannot be)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from policybench.pytest_plugin.options import SHARED_KEY, SHARED_URL
from policybench.pytest_plugin.rundir import run_dir_of, settings_of
from policybench.pytest_plugin.workers import from_controller, hand_to_workers, is_worker
from policybench.registry import OPENPI, RANDOM, SCRIPTED
from policybench.run.files import write_file
from policybench.serve.client import HOW_TO_SERVE, give_up_waiting_when, share_outages_in
from policybench.serve.command import API_KEY_VARIABLE
from policybench.serve.supervisor import ServerFailed, Supervisor

AUTO, SHARED, PER_WORKER = "auto", "shared", "per-worker"
# Built-in policies that load nothing: a copy per worker costs less than a round trip per step.
LIGHT_POLICIES = (SCRIPTED, RANDOM)
# The run's server gives up on a model call a little before its clients would (--infer-timeout):
# the rollout whose call hung is told so, and the server exits to be restarted for the others.
CALL_TIMEOUT_SHARE = 0.9


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


SERVERS = pytest.StashKey[list["SharedServer"]]()
SERVER_LOG = "server.log"  # in the run directory: everything the run's server wrote
SERVER_GONE = "server-gone.txt"  # in the run directory once the server is given up: why
NOWHERE = "ws://127.0.0.1:0"  # handed to workers when the server never started: nothing listens
# In the run directory while the run lasts: a policy URL one process waited out --server-wait for,
# so that the run's other processes fail at once instead of each waiting as long again.
UNREACHABLE = ".unreachable"


def pytest_configure(config: pytest.Config) -> None:
    absences = run_dir_of(config) / UNREACHABLE
    if not is_worker(config):  # a resumed run awaits its servers afresh
        shutil.rmtree(absences, ignore_errors=True)
        absences.mkdir(parents=True)
        config.add_cleanup(lambda: shutil.rmtree(absences, ignore_errors=True))
    share_outages_in(absences)
    if is_worker(config):
        urls = from_controller(config, SHARED_URL) or {}
        for index, url in enumerate(urls.values()):  # waiting ends once the controller gives up
            gone = run_dir_of(config) / numbered(SERVER_GONE, index)
            give_up_waiting_when(url, lambda gone=gone: gone.read_text() if gone.exists() else None)
        return
    servers = config.stash[SERVERS] = [
        SharedServer(config, policy, index) for index, policy in enumerate(_shared(config))
    ]
    for server in servers:
        config.add_cleanup(server.stop)
    if servers:  # every arm it serves plays through it, each arm alike
        hand_to_workers(config, SHARED_URL, {server.policy: server.start() for server in servers})
        hand_to_workers(config, SHARED_KEY, {server.policy: server.api_key for server in servers})


def numbered(name: str, index: int) -> str:
    """The run directory's file `name` of the run's `index`-th shared server: `server.log`,
    `server-2.log`, ..."""
    if not index:
        return name
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}-{index + 1}{dot}{suffix}"


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The controller knocks once at each served arm's policy server: one that does not answer
    is named in the run's header, with how long its rollouts will wait for it and what to do,
    not two silent minutes later."""
    if is_worker(config) or config.option.collectonly:
        return []
    lines = []
    for arm in settings_of(config).arms:
        endpoint = arm.endpoint
        if endpoint is None or arm.policy != OPENPI:
            continue
        why = _unanswered(endpoint.url)
        if why is not None:
            lines.append(
                f"policybench: no policy server answers at {endpoint.shown} ({why}); its "
                f"rollouts wait up to {endpoint.server_wait_s:g} s for one (--server-wait), "
                f"then error: {HOW_TO_SERVE}, or point --policy-url at a running one"
            )
    return lines


def _unanswered(url: str, timeout_s: float = 3.0) -> str | None:
    """Why nothing accepts a TCP connection at `url`'s host and port (None: something does)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s):
            return None
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror or error}"


def _shared(config: pytest.Config) -> list[str]:
    """The local policies the run serves from servers of its own under -n (one each, in arm
    order): every arm's that loads weights, or with --policy-sharing=shared every arm's but a
    served one (openpi, or POLICY@URL)."""
    distributed = getattr(config.option, "dist", "no") != "no"
    if not distributed or config.option.collectonly:
        return []
    sharing = config.getoption("policy_sharing")
    found: list[str] = []
    for arm in settings_of(config).arms:
        policy = arm.policy
        wanted = sharing == SHARED or (sharing == AUTO and policy not in LIGHT_POLICIES)
        if wanted and arm.url is None and policy != OPENPI and policy not in found:
            found.append(policy)
    return found


class SharedServer:
    """A `policybench serve` of the run's, serving `policy` on a free loopback port with a fresh
    API key, its output in the run directory's server.log (the `index`-th: server-2.log, ...).
    It ends with the run, is restarted when it dies, and when it is given up the terminal and
    the workers (through SERVER_GONE) are told why."""

    def __init__(self, config: pytest.Config, policy: str, index: int = 0) -> None:
        self.config = config
        self.policy = policy
        self.api_key = secrets.token_hex(16)
        run_dir = run_dir_of(config)
        self.gone = run_dir / numbered(SERVER_GONE, index)
        self.gone.unlink(missing_ok=True)  # a resumed run's server starts afresh
        command = [
            sys.executable,
            "-m",
            "policybench.cli",
            "serve",
            "--policy",
            policy,
            "--seed",
            str(config.getoption("seed")),
            "--policy-device",
            config.getoption("policy_device"),
            "--evals-from-clients",
            *(argument for folder in _eval_folders(config) for argument in ("--eval-path", folder)),
            "--call-timeout",
            f"{CALL_TIMEOUT_SHARE * config.getoption('infer_timeout'):g}",
        ]
        env = {**os.environ, API_KEY_VARIABLE: self.api_key, "PYTHONPATH": _import_path(config)}
        self.supervisor = Supervisor(
            command,
            env,
            config.rootpath,
            run_dir / numbered(SERVER_LOG, index),
            self._say,
            self._give_up,
        )

    def start(self) -> str:
        """The server's URL; NOWHERE when it could not start (every rollout then errors)."""
        try:
            return self.supervisor.start()
        except ServerFailed as failed:
            self._give_up(failed)
            return NOWHERE

    def stop(self) -> None:
        self.supervisor.stop()

    def _give_up(self, failed: ServerFailed) -> None:
        write_file(self.gone, failed.reason)
        self._say(f"{failed.reason}; every rollout left is an error\n{failed.tail}", red=True)

    def _say(self, line: str, red: bool = False) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            sys.stderr.write(f"policybench: {line}\n")
        else:
            reporter.write_line(f"policybench: {line}", red=red, yellow=not red, bold=True)


def _eval_folders(config: pytest.Config) -> list[str]:
    """The folders the run's Evals are declared in: the rootdir and the test paths' folders."""
    dirs = [str(config.rootpath)]
    for arg in config.args:
        path = Path(arg.split("::")[0])
        if path.exists():
            dirs.append(str((path if path.is_dir() else path.parent).resolve()))
    return list(dict.fromkeys(dirs))


def _import_path(config: pytest.Config) -> str:
    """What the server imports from: this process's path, the rootdir, the test dirs; not this
    interpreter's own library folders (the standard library, site-packages), which the server,
    the same interpreter, has anyway, and which would shadow another interpreter's own in the
    env servers it starts for isolated Evals (their $PYTHONPATH comes before their libraries)."""
    existing = os.environ.get("PYTHONPATH")
    root, *tests = _eval_folders(config)
    own = _own_libraries()
    dirs = [root, *(d for d in sys.path if d and _resolved(d) not in own), *tests]
    return os.pathsep.join([*dict.fromkeys(dirs), *([existing] if existing else [])])


def _own_libraries() -> set[str]:
    """This interpreter's standard library and site-packages folders, resolved."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    kinds = ("stdlib", "platstdlib", "purelib", "platlib")
    found = [paths[kind] for kind in kinds if kind in paths]
    found += [*site.getsitepackages(), site.getusersitepackages()]
    found += [d for d in sys.path if d.endswith((".zip", "lib-dynload"))]
    return {_resolved(d) for d in found}


def _resolved(folder: str) -> str:
    return str(Path(folder).resolve())
