"""Our side of an env server: `EnvServer` starts envserver/server.py in another interpreter (a
child that dies with this process) and makes requests of it; `EnvProxy` is the gymnasium env
the World holds, one server per env, or, for a lockstep worker's K slots, K envs to a server
(`ServerPool`) whose steps cross K to a frame (`gathered`, `step_together`)."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib.resources
import importlib.util
import os
import queue
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import gymnasium as gym
import numpy as np

from policybench import cache
from policybench.envserver import server as protocol
from policybench.lifetime import owned_env

SERVER_SOURCE = Path(protocol.__file__)
STDERR_TAIL_LINES = 8
CLOSE_WAIT_S = 5.0
PIPE_BYTES = 1 << 20


class EnvServerError(RuntimeError):
    """An env server failed: its env raised, or it could not start."""


class EnvServerGone(EnvServerError):
    """An env server ended (it crashed, was killed, or failed to start) before it answered."""


class Answering:
    """Whether a connection to an env server (`who`, as messages name it) still pairs each
    answer with its request: not once a wait for an answer was interrupted (a watchdog raises
    in the waiting thread), as that answer would come first to the next request. Such a
    connection refuses every request, and its server is to be ended without one."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.interrupted = False

    @contextlib.contextmanager
    def request(self, op: str) -> Iterator[None]:
        """The block that sends request `op` and reads its answer; refused once interrupted."""
        if self.interrupted:
            raise EnvServerError(
                f"{self.who} was interrupted in a request (its answer would come before "
                f"{op}'s): discard the env and build another"
            )
        self.interrupted = True  # until the block ends: an exception out of it leaves it so
        yield
        self.interrupted = False


def server_script(modules: tuple[str, ...] = (), data: tuple[str, ...] = ()) -> Path:
    """A copy of server.py in a directory of its own (its name tells its content), with a copy
    of each of `modules` (dotted names of modules importable here) under its last name, so that
    the other interpreter's path gains those modules and nothing else of policybench, and of
    each of `data` ("package:file", a file of a package of ours) under its file name, where a
    module beside it finds it (`Path(__file__).with_name(...)`)."""
    files = {"policybench_envserver.py": SERVER_SOURCE.read_bytes()}
    for resource in data:
        name = _data_name(resource)  # refused before anything is read
        files[name] = _data_of(resource)
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            raise EnvServerError(
                f"an isolated env's module {name!r} is not a module file importable here; "
                "name modules of policybench's suites (dotted, as they are imported)"
            )
        files[f"{name.rpartition('.')[2]}.py"] = Path(spec.origin).read_bytes()
    digest = hashlib.sha256()
    for file_name, source in files.items():
        digest.update(file_name.encode() + b"\0" + source + b"\0")
    folder = private_folder() / digest.hexdigest()[:12]
    script = folder / "policybench_envserver.py"
    if not all(_holds(folder / name, source) for name, source in files.items()):
        folder.mkdir(mode=0o700, exist_ok=True)
        for file_name, source in files.items():  # the server last: it marks the folder complete
            partial = folder / f".{os.getpid()}.{threading.get_ident()}.tmp"
            partial.write_bytes(source)
            partial.replace(folder / file_name)
    return script


def _data_name(resource: str) -> str:
    """The file name a data file of an isolated env is copied under: its own, refused where it
    would replace the server's script or a module."""
    name = PurePosixPath(resource.partition(":")[2]).name
    if name.endswith(".py") or name == "":
        raise EnvServerError(
            f"an isolated env's data file {resource!r} is named like a module or not at all; "
            "data files are not code (give modules as modules)"
        )
    return name


def _data_of(resource: str) -> bytes:
    """The bytes of a data file `package:file` of a package importable here, confined to that
    package's folder (an absolute path, a `..` or a link out of it is refused)."""
    package, _, file = resource.partition(":")
    relative = PurePosixPath(file)
    refused = EnvServerError(
        f"an isolated env's data file {resource!r} is not a file of a package importable here; "
        "name it as package:file (policybench.suites:data/NAME), inside that package"
    )
    if not file or relative.is_absolute() or ".." in relative.parts or "\\" in file:
        raise refused
    try:
        root = importlib.resources.files(package)
        found = root.joinpath(*relative.parts)
        if isinstance(found, Path) and not found.resolve().is_relative_to(
            Path(str(root)).resolve()
        ):
            raise refused
        return found.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise refused from None


def private_folder() -> Path:
    """This user's folder for the env server's scripts, where no co-user can make it first:
    under `$XDG_RUNTIME_DIR` (the user's own, 0700) where it is set, else under the user's
    cache (`$XDG_CACHE_HOME`, or ~/.cache), never in the shared temp directory. Made 0700, and
    refused unless it is a directory this user owns that no one else may write (another user
    could otherwise plant a script there that this user's env runs)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        base = Path(runtime) / "policybench-envserver"
    else:
        base = cache.cache_home() / "envserver"
    found = cache.private_folder(base)
    if not cache.is_private(found):
        raise EnvServerError(
            f"{base} is not a folder of this user's that only it may write (owner uid "
            f"{found.st_uid}, mode {stat.filemode(found.st_mode)}); the env server's script will "
            "not run from it: remove it, or set XDG_RUNTIME_DIR to a folder of your own"
        )
    return base


def _holds(path: Path, source: bytes) -> bool:
    """Whether `path` is a file holding exactly `source` (a copy made earlier, untouched)."""
    try:
        return path.read_bytes() == source
    except OSError:
        return False


class EnvServer:
    """One env server process and its pipes. Requests are answered in order, one at a time."""

    def __init__(self, python: Path, entry: str, script: Path | None = None, most: int = 1) -> None:
        self.python = python
        self.most = most  # the envs it may make
        self.made = 0
        self._live: set[int] = set()
        self._one_at_a_time = threading.Lock()  # the threads of the envs it holds
        self._codec = protocol.Codec()
        command = [str(python), str(script or server_script()), entry, str(most)]
        self._process = _spawn(
            lambda: subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=owned_env(os.environ),
            )
        )
        for pipe in (self._process.stdin, self._process.stdout):
            widen(pipe.fileno())
        self._stderr = StderrTail(self._process)
        self._answering = Answering(f"env server in {python} (pid {self._process.pid})")
        try:
            answer = self.request("hello", protocol=protocol.PROTOCOL)
            if answer.get("protocol") != protocol.PROTOCOL:
                raise EnvServerError(
                    f"env server in {python} speaks protocol {answer.get('protocol')}, we speak "
                    f"{protocol.PROTOCOL}: both sides must come from the same policybench"
                )
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def has_room(self) -> bool:
        """Whether it may make another env, and is still there to."""
        with self._one_at_a_time:  # a request in flight shows as interrupted until it ends
            broken = self._answering.interrupted
        return self._process.poll() is None and not broken and self.made < self.most

    def made_env(self, number: int) -> None:
        """Counts env `number`, made by a proxy, as live."""
        self._live.add(number)

    def release(self, number: int | None) -> None:
        """A proxy's env `number` is done with (None: its make failed): closed alone while
        other envs live here, else with the server."""
        self._live.discard(number)
        if not self._live:
            self.close()
            return
        if number is not None and self._process.poll() is None:
            with contextlib.suppress(EnvServerError):  # gone or broken: closed with the rest
                self.request("close", env=number)

    def request(self, op: str, **args: Any) -> Any:
        [answer] = self.stream(op, 1, **args)
        if "error" in answer:
            raise self.failed(answer, op)
        return answer["ok"]

    def stream(self, op: str, count: int, **args: Any) -> Iterator[Any]:
        """The `count` frames the server answers request `op` with (`steps`; one for any other),
        each as it comes: its {"ok": ...} or {"error": ...}. The server is this caller's until
        the last; EnvServerGone, with the end of its stderr, when it ends before."""
        process = self._process
        gone = False
        with self._one_at_a_time, self._answering.request(op):
            try:
                protocol.write_frame(process.stdin.fileno(), self._codec.frame({"op": op, **args}))
            except (BrokenPipeError, ValueError):  # ValueError: the pipe was closed already
                gone = True
            for _ in range(0 if gone else count):
                try:
                    answer = self._codec.read(process.stdout)
                except ValueError:
                    answer = None
                if answer is None:
                    gone = True
                    break
                yield answer
        if gone:
            raise EnvServerGone(self._stderr.ended(self.python, op))

    def failed(self, answer: dict[str, Any], op: str = "step") -> EnvServerError:
        """The error an {"error": ...} answer to `op` says."""
        error = answer["error"]
        where = " | ".join(line.strip() for line in error["traceback"][-3:-1])
        return EnvServerError(
            f"{error['type']} in the env server ({self.python}) at {op}: {error['message']}"
            f" [{where}]"
        )

    def close(self) -> None:
        """Ends the server: asks it to close its env, and kills it if it does not end (or is
        still busy with an interrupted request)."""
        process = self._process
        try:
            if process.poll() is None and not self._answering.interrupted:
                with contextlib.suppress(EnvServerGone):  # it ended meanwhile: nothing to close
                    self.request("close")
        finally:
            if self._answering.interrupted:  # it is still busy with a request nobody waits for
                process.kill()
            try:
                process.wait(CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout):
                pipe.close()


class StderrTail:
    """The last lines an env server `process` writes to stderr, read on a thread of their own
    (each also echoed on our stderr with the server's pid, when `echo`)."""

    def __init__(self, process: subprocess.Popen, echo: bool = False) -> None:
        self.process, self.echo = process, echo
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._reader = threading.Thread(target=self._keep, name="env-server-stderr", daemon=True)
        self._reader.start()

    def ended(self, python: Path, op: str) -> str:
        """Why the server in `python` ended at request `op`: how it ended and its stderr's last
        lines (killed if it has not ended within CLOSE_WAIT_S)."""
        process = self.process
        try:
            code = process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        self._reader.join(CLOSE_WAIT_S)  # its last lines say why
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        stderr = " | ".join(self.lines) or "nothing"
        return (
            f"env server in {python} (pid {process.pid}) ended at {op} ({how}); "
            f"the tail of its stderr: {stderr}"
        )

    def _keep(self) -> None:
        for line in self.process.stderr:
            text = line.decode(errors="replace").rstrip()
            if text:
                self.lines.append(text)
                if self.echo:
                    print(f"env server {self.process.pid}: {text}", file=sys.stderr, flush=True)


def widen(fd: int) -> None:
    """Lets the pipe `fd` hold PIPE_BYTES (Linux; up to the system's limit), so that a frame of
    camera images crosses in one write and one wake-up rather than one per 64 KiB."""
    with contextlib.suppress(ImportError, AttributeError, OSError):
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


class EnvProxy(gym.Env):
    """The env `entry(task, **kwargs)` built by an env server in `python`, as a gymnasium env:
    reset, step, render, close and the spaces are the server's env's. A `server` given (one
    connected elsewhere, envserver.remote's, or one of a ServerPool's) is used instead of
    starting one in `python`. Its steps go to the gathering of the thread that steps it, if any.
    `thread`: in a server of several envs, the env lives on a thread of its own (server.py)."""

    def __init__(
        self,
        python: Path | None,
        entry: str,
        task: str,
        kwargs: Mapping[str, Any] | None = None,
        script: Path | None = None,
        server: EnvServer | None = None,
        thread: bool = True,
    ) -> None:
        self._server = server or EnvServer(python, entry, script)
        try:
            made = self._server.request(
                "make", entry=entry, task=task, kwargs=dict(kwargs or {}), thread=thread
            )
        except BaseException:
            self._server.release(None)
            raise
        self.number = made.get("env", 0)  # the env's number in its server
        self._server.made_env(self.number)
        self.action_space = space_of(made["action_space"])
        self.observation_space = space_of(made["observation_space"])
        self.metadata = made["metadata"]
        self.render_mode = made["render_mode"]

    @property
    def server_pid(self) -> int:
        return self._server.pid

    @property
    def server(self) -> EnvServer:
        return self._server

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self._server.request("reset", seed=seed, options=options, env=self.number)
        return obs, info

    def step(self, action: Any):
        gathering = getattr(_gathering, "step", None)
        if gathering is not None:
            return gathering(self, np.asarray(action))
        obs, reward, terminated, truncated, info = self._server.request(
            "step", action=np.asarray(action), env=self.number
        )
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        return self._server.request("render", env=self.number)

    def close(self) -> None:
        self._server.release(self.number)


Stepped = tuple[Any, float, bool, bool, dict[str, Any]]  # what EnvProxy.step returns


def step_together(
    steps: list[tuple[EnvProxy, np.ndarray]], publish: Callable[[int, Stepped | Exception], None]
) -> None:
    """Steps each (proxy, action) of `steps` with one request per server (`steps` of every env
    it holds), and publishes each answer by its index in `steps` as soon as it comes: the step's
    answer, or the error to raise in its place (a server that failed is every one of its
    unanswered steps' error)."""
    by_server: dict[int, list[int]] = {}
    for at, (proxy, _) in enumerate(steps):
        by_server.setdefault(id(proxy.server), []).append(at)
    for ats in by_server.values():
        server, left = steps[ats[0]][0].server, list(ats)
        try:
            if len(ats) == 1:
                proxy, action = steps[ats[0]]
                answer = server.request("step", action=action, env=proxy.number)
                publish(left.pop(0), tuple(answer))
                continue
            asked = [[steps[at][0].number, steps[at][1]] for at in ats]
            for answer in server.stream("steps", len(ats), steps=asked):
                at = left.pop(0)
                publish(at, tuple(answer["ok"]) if "ok" in answer else server.failed(answer))
        except EnvServerError as error:
            for at in left:
                publish(at, error)


_gathering = threading.local()  # a lockstep slot's thread: where its proxies' steps go


@contextlib.contextmanager
def gathered(step: Callable[[EnvProxy, np.ndarray], Stepped], pool: ServerPool) -> Iterator[None]:
    """Within the block, this thread's isolated envs come from `pool` and their steps are
    `step(proxy, action)`'s, which gathers them with other threads' (lockstep's barrier)."""
    _gathering.step, _gathering.pool = step, pool
    try:
        yield
    finally:
        _gathering.step = _gathering.pool = None


def pool_in_use() -> ServerPool | None:
    """The ServerPool of this thread's `gathered` block, if any."""
    return getattr(_gathering, "pool", None)


class ServerPool:
    """Env servers that hold up to `most` envs each (a lockstep worker's K slots): an env is
    made in the latest server of its interpreter and entry while that has room, else in a new
    one. A server ends when its last env closes."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._latest: dict[tuple[Path, str, Path | None], EnvServer] = {}
        self._lock = threading.Lock()

    def server_for(self, python: Path, entry: str, script: Path | None) -> EnvServer:
        with self._lock:
            key = (python, entry, script)
            server = self._latest.get(key)
            if server is None or not server.has_room:
                server = self._latest[key] = EnvServer(python, entry, script, self.most)
            server.made += 1  # promised to the proxy that asked
            return server


def space_of(described: Mapping[str, Any] | None) -> gym.Space | None:
    """The gymnasium space a server described (server.describe_space)."""
    if described is None:
        return None
    kind = described["kind"]
    if kind == "Box":
        dtype = np.dtype(described["dtype"])
        return gym.spaces.Box(described["low"], described["high"], dtype=dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(described["n"], start=described["start"])
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(described["nvec"], dtype=np.dtype(described["dtype"]))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(described["n"])
    if kind == "Dict":
        return gym.spaces.Dict({key: space_of(s) for key, s in described["spaces"].items()})
    if kind == "Tuple":
        return gym.spaces.Tuple([space_of(s) for s in described["spaces"]])
    raise EnvServerError(f"an env server described a space of unknown kind {kind!r}")


_spawns: queue.Queue[tuple[Callable[[], subprocess.Popen], queue.Queue]] = queue.Queue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawn(start: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """`start()`, from a thread that lives as long as this process: the kernel ends a child
    that dies with its starter when the starting *thread* ends (a lockstep slot's may end
    before the env it built is closed)."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return start()
    with _spawner_lock:
        if _spawner is None:
            _spawner = threading.Thread(
                target=_serve_spawns, name="env-server-spawner", daemon=True
            )
            _spawner.start()
    answer: queue.Queue = queue.Queue(maxsize=1)
    _spawns.put((start, answer))
    result = answer.get()
    if isinstance(result, BaseException):
        raise result
    return result


def _serve_spawns() -> None:
    while True:
        start, answer = _spawns.get()
        try:
            answer.put(start())
        except Exception as error:  # handed to the thread that asked
            answer.put(error)
