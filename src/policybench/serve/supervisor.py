"""A `policybench serve` process owned by the process that starts it: it ends with its owner,
writes its output to a log file, and is restarted on the same URL when it dies, up to a few
times; a server that dies before serving, or too often, is given up and its owner told why."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from policybench.lifetime import owned_env
from policybench.serve.command import MODEL_HUNG, READY

READY_TIMEOUT_S = 60.0  # from start to listening (the model itself is built at first use)
STOP_TIMEOUT_S = 10.0
MAX_RESTARTS = 3  # a server that dies more often in one run is given up
TAIL_LINES = 12  # of its log, shown when it dies
POLL_S = 0.05


class ServerFailed(Exception):
    """The server exited before serving, did not listen in time, or died too often: `reason`
    in one line (with its last line of output), `tail` its log's last lines."""

    def __init__(self, reason: str, tail: str) -> None:
        super().__init__(f"{reason}\n{tail}")
        self.reason = reason
        self.tail = tail


class Supervisor:
    """Starts `command` (a `policybench serve` without `--port`) on a free port, and, from a
    thread that lives as long as the server it waits on, restarts it on the same port when it
    exits unasked: `on_restart(line)` says so; `on_gone(failed)` when it is given up."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log: Path,
        on_restart: Callable[[str], None],
        on_gone: Callable[[ServerFailed], None],
    ) -> None:
        self.command = list(command)
        self.env = {**owned_env(env), "PYTHONUNBUFFERED": "1"}
        self.cwd = cwd
        self.log = log
        self.on_restart = on_restart
        self.on_gone = on_gone
        self.url = ""
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._offset = 0  # where the current server's output begins in the log
        self._lock = threading.Lock()  # orders a restart's spawn against stop()
        self._stopping = False
        self._watcher = threading.Thread(target=self._watch, name="policy-server", daemon=True)

    def start(self) -> str:
        """Starts the server and returns its URL once it listens; raises ServerFailed if it
        exits first or does not listen within READY_TIMEOUT_S."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.url = self._launch(port=0)
        self._watcher.start()
        return self.url

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            process = self._process
        if process is not None:
            _end(process)
        if self._watcher.is_alive():
            self._watcher.join(STOP_TIMEOUT_S)

    def _launch(self, port: int) -> str:
        with self._lock:
            if self._stopping:
                raise ServerFailed("the run is stopping", "")
            self._offset = self.log.stat().st_size if self.log.exists() else 0
            with self.log.open("ab") as log:  # the server keeps its own copy of the handle
                process = self._process = subprocess.Popen(
                    [*self.command, "--port", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.cwd,
                )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            url = _ready_url(self._output())
            if url is not None:
                return url
            code = process.poll()
            if code is not None:
                raise self._failed(f"the run's policy server {_ended(code)} before serving")
            time.sleep(POLL_S)
        _end(process)
        raise self._failed(
            f"the run's policy server did not listen within {READY_TIMEOUT_S:g} s, so it was "
            "stopped"
        )

    def _watch(self) -> None:
        port = int(self.url.rsplit(":", 1)[1])
        while True:
            process = self._process
            assert process is not None
            code = process.wait()
            with self._lock:
                if self._stopping:
                    return
            ended = f"the run's policy server (pid {process.pid}) {_ended(code)}"
            if code == MODEL_HUNG:
                # It exits so on purpose, once a hung model call has been answered with its
                # error: each such exit ends a hung call, so restarting it cannot loop alone.
                counted = f"a model call hung, which is not counted toward the {MAX_RESTARTS}"
            elif self.restarts >= MAX_RESTARTS:
                deaths = f"; {self.restarts + 1} deaths in this run, so it is not restarted again"
                self.on_gone(self._failed(ended, deaths))
                return
            else:
                self.restarts += 1
                counted = f"restart {self.restarts} of at most {MAX_RESTARTS}"
            self.on_restart(
                f"{ended}{self._last_words()}; restarting it on {self.url} ({counted} restarts "
                f"after a crash; log: {self.log})"
            )
            started = time.monotonic()
            try:
                self._launch(port)
            except ServerFailed as failed:
                if not self._stopping:
                    self.on_gone(failed)
                return
            self.on_restart(
                f"the run's policy server serves again on {self.url} "
                f"({time.monotonic() - started:.1f} s to restart)"
            )

    def _failed(self, how: str, then: str = "") -> ServerFailed:
        lines = self._said()[-TAIL_LINES:]
        tail = "\n".join(f"    {line}" for line in lines) or "    (nothing)"
        return ServerFailed(
            f"{how}{self._last_words()}{then} (log: {self.log})", f"what it wrote last:\n{tail}"
        )

    def _output(self) -> str:
        """What the current server wrote to the log (its predecessors' output comes before)."""
        with self.log.open("rb") as log:
            log.seek(self._offset)
            return log.read().decode(errors="replace")

    def _said(self) -> list[str]:
        """The current server's lines of output, less the one saying it serves."""
        lines = self._output().rstrip().splitlines()
        return [line for line in lines if not line.startswith(READY)]

    def _last_words(self) -> str:
        lines = [line for line in self._said() if line.strip()]
        return f", saying {lines[-1].strip()!r}" if lines else ", saying nothing"


def _ready_url(output: str) -> str | None:
    for line in output.splitlines():
        if line.startswith(READY):
            found = re.search(r"wss?://\S+", line)
            if found is not None:
                return found.group(0)
    return None


def _ended(code: int) -> str:
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def _end(process: subprocess.Popen[bytes]) -> None:
    process.kill()  # it ignores SIGINT and SIGTERM: its owner alone ends it (see lifetime.py)
    process.wait()
