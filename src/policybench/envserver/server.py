"""The env server: runs one gymnasium-style env in an interpreter of its own and answers the
proxy's requests over its stdin and stdout. Needs only the standard library, numpy and msgpack.

A frame is a header of two big-endian lengths and a msgpack map, the arrays' bytes following
the map out of band (Codec). A request is {"op": name, **args}; an answer is {"ok": value} or
{"error": {"type", "message", "traceback"}}. Arrays cross by dtype, shape and bytes (numpy 1.x
and 2.x read each other's), tuples as a msgpack ext.
The proxy's first request is `hello` with its protocol version; the server answers with its own.
The env comes from `make`: `entry` ("module:callable") is imported and called with the task.
A server makes envs only of the entry it was started for (its command line's first argument),
and at most as many as its second says (default 1): whoever can send it requests cannot make it
import or call anything else, nor hold more envs than its starter allowed.

A server of several envs (a lockstep worker's K slots) names each by the number `make` answers
with; the env ops take it as `env` (default 0). `steps` steps several of them in one round trip:
[[env, action], ...] in, then one frame a step out, in order, {"ok": ...} or {"error": ...}, each
written as soon as its env has stepped (a client runs on while the rest step). Each env after
the first lives on a thread of its own, as each lockstep slot's env does in one process (a
renderer's context stays on the thread that made it), unless its make says `thread: false` (an
env that renders nothing); a round steps them one after another.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import queue
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any, BinaryIO

import msgpack
import numpy as np

PROTOCOL = 3  # raise it on any change to the ops or the encoding
PARENT_PID_VARIABLE = "POLICYBENCH_PARENT_PID"  # policybench.lifetime's, spelled here again:
PR_SET_PDEATHSIG = 1  # this module imports nothing of policybench
HEADER = struct.Struct(">II")  # a frame's msgpack bytes, then its raw bytes
FRAME_LIMIT = 1 << 31  # the most bytes a frame holds, unless its reader says fewer (2 GiB)
TRUSTED_ALLOCATION = 1 << 24  # a frame up to this is allocated at once, a larger one as it comes


class FrameTooLarge(ValueError):
    """A frame's header announces more bytes than its reader takes (refused before they come)."""


def frame_size(header: bytes | memoryview, limit: int = FRAME_LIMIT) -> tuple[int, int]:
    """From a frame's HEADER: its map's length and the bytes that follow the header; the one
    check of a frame's size, made before its body is read (FrameTooLarge over `limit` bytes,
    header included)."""
    body, raw = HEADER.unpack_from(header)
    size = _aligned(body) + raw
    if HEADER.size + size > limit:
        raise FrameTooLarge(
            f"a frame of {HEADER.size + size} bytes, where at most {limit} are taken"
        )
    return body, size


ALIGN = 16  # where each array's bytes start in a frame's raw bytes
ARRAY, TUPLE = 1, 2  # msgpack ext type codes
# What one frame may make the decoder build: tuples nested this deep (each is a decode of its
# own, on the C stack: hundreds crash the process), and this many maps, lists and tuples in all
# (an empty map is one byte on the wire and a Python dict in memory).
MAX_TUPLE_DEPTH = 32
MAX_CONTAINERS = 1 << 18


class FrameRefused(ValueError):
    """A frame that asks more of the decoder than a frame may: too deep, too many objects."""


OPS = ("hello", "make", "spaces", "reset", "step", "steps", "render", "close")  # Server's methods
METADATA = ("render_modes", "render_fps")  # what crosses of an env's metadata


class Codec:
    """Frames of one connection. A frame is HEADER (the msgpack map's length, then the length of
    the raw bytes after it), the map padded to ALIGN, and the raw bytes: the map's arrays are ext
    ARRAY ("dtype shape[/axes]") and their bytes follow in order, each padded to ALIGN. A frame
    is written with one writev from the arrays' own memory and read into one buffer that the
    arrays it carries share. Tuples are ext TUPLE."""

    def __init__(self) -> None:
        self._buffers: list[memoryview] = []
        self._packer = msgpack.Packer(default=self._encode, use_bin_type=True, strict_types=True)
        self._unpackb = functools.partial(msgpack.unpackb, **self._unpack_options)
        self._frame: memoryview | None = None
        self._at = 0
        self._depth = 0  # tuples being decoded inside one another
        self._containers = 0  # maps, lists and tuples decoded of this frame

    def _encode(self, value: Any) -> Any:
        """What msgpack carries for a value it does not know (its `default`): an array as ext
        ARRAY, its bytes kept for after the map; a numpy scalar as a Python one."""
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError("an array of Python objects cannot cross to the other interpreter")
            data, axes = in_memory_order(value)
            self._buffers.append(memoryview(data.reshape(-1).view(np.uint8)))
            return ext_array(data.dtype.str, data.shape, axes)
        if isinstance(value, tuple):
            return msgpack.ExtType(TUPLE, msgpack.packb(list(value), **self._options))
        if isinstance(value, np.generic):
            return value.item()
        for plain in (dict, list, float, int, str, bytes):  # subclasses: OrderedDict, IntEnum ...
            if isinstance(value, plain):
                return plain(value)
        raise TypeError(f"an env server cannot send a {type(value).__name__}: {value!r:.80}")

    @property
    def _options(self) -> dict[str, Any]:
        return {"default": self._encode, "use_bin_type": True, "strict_types": True}

    def _decode(self, code: int, payload: bytes) -> Any:
        """The inverse of `_encode` (msgpack's ext_hook): an array is writable and shares the
        frame's buffer (each frame has a buffer of its own)."""
        if code == ARRAY:
            dtype, shape, count, size, axes = layout_of(payload)
            at = self._at
            self._at = at + size
            array = np.frombuffer(self._frame, dtype, count, at).reshape(shape)
            return array if axes is None else array.transpose(axes)
        if code == TUPLE:
            if self._depth >= MAX_TUPLE_DEPTH:
                raise FrameRefused(f"tuples nested more than {MAX_TUPLE_DEPTH} deep")
            self._depth += 1
            try:
                return tuple(self._counted(msgpack.unpackb(payload, **self._unpack_options)))
            finally:
                self._depth -= 1
        return msgpack.ExtType(code, payload)

    def _counted(self, container: Any) -> Any:
        """A decoded map, list or tuple, counted against the frame's MAX_CONTAINERS."""
        self._containers += 1
        if self._containers > MAX_CONTAINERS:
            raise FrameRefused(f"a frame of more than {MAX_CONTAINERS} maps and lists")
        return container

    @property
    def _unpack_options(self) -> dict[str, Any]:
        return {
            "raw": False,
            "ext_hook": self._decode,
            "strict_map_key": False,
            "object_hook": self._counted,
            "list_hook": self._counted,
        }

    def frame(self, message: dict[str, Any]) -> list[Any]:
        """`message` as the parts of one frame, for writev."""
        self._buffers.clear()
        try:
            body = self._packer.pack(message)
        except BaseException:
            self._packer.reset()
            raise
        parts: list[Any] = [b"", body, bytes(_aligned(len(body)) - len(body))]
        size = 0
        for buffer in self._buffers:
            parts.append(buffer)
            padding = _aligned(buffer.nbytes) - buffer.nbytes
            if padding:
                parts.append(bytes(padding))
            size += buffer.nbytes + padding
        self._buffers.clear()
        parts[0] = HEADER.pack(len(body), size)
        return parts

    def pack(self, message: dict[str, Any]) -> bytes:
        """`message` as one frame, in one piece."""
        return b"".join(self.frame(message))

    def read(self, stream: BinaryIO, limit: int = FRAME_LIMIT) -> dict[str, Any] | None:
        """The next frame's message from `stream`, None at its end; FrameTooLarge, before its
        body is read, for a frame of over `limit` bytes."""
        header = stream.read(HEADER.size)
        while len(header) < HEADER.size:  # a raw stream (a socket's) may answer in parts
            more = stream.read(HEADER.size - len(header))
            if not more:
                return None
            header += more
        body_size, size = frame_size(header, limit)
        if size <= TRUSTED_ALLOCATION:
            view = memoryview(bytearray(size))
            got = stream.readinto(view)  # all of it, unless the stream ends
            if got < size and got + _read_into(stream, view[got:]) < size:
                return None
            return self.unpack(view, body_size)
        # A frame larger than that is allocated as its bytes arrive: a header alone, from a
        # peer that is not what it claims, makes the reader hold no more than it was sent.
        buffer = bytearray()
        while len(buffer) < size:
            part = stream.read(min(size - len(buffer), max(TRUSTED_ALLOCATION, len(buffer))))
            if not part:
                return None
            buffer += part
        return self.unpack(memoryview(buffer), body_size)

    def unpack(self, frame: memoryview, body_size: int) -> dict[str, Any]:
        """The message of a frame read whole (without its HEADER)."""
        self._frame, self._at, self._depth, self._containers = frame[_aligned(body_size) :], 0, 0, 0
        try:
            return self._unpackb(frame[:body_size])
        finally:
            self._frame = None


@functools.lru_cache(maxsize=256)
def ext_array(dtype: str, shape: tuple[int, ...], axes: tuple[int, ...] | None) -> msgpack.ExtType:
    """The ext ARRAY an array of this layout crosses as (`Codec._encode`): an env's frames repeat
    a few layouts, spelled once each."""
    header = " ".join([dtype, *map(str, shape)])
    if axes is not None:
        header += "/" + " ".join(map(str, axes))
    return msgpack.ExtType(ARRAY, header.encode())


@functools.lru_cache(maxsize=256)
def layout_of(header: bytes) -> tuple[np.dtype, tuple[int, ...], int, int, tuple[int, ...] | None]:
    """An ext ARRAY's dtype, shape, element count, aligned byte size and axes (`Codec._encode`);
    an env's frames repeat a few layouts, read once each."""
    layout, _, axes = header.decode().partition("/")
    dtype_name, *sizes = layout.split(" ")
    dtype = np.dtype(dtype_name)
    shape = tuple(map(int, sizes))
    count = 1
    for size in shape:
        count *= size
    order = tuple(map(int, axes.split(" "))) if axes else None
    return dtype, shape, count, _aligned(count * dtype.itemsize), order


def in_memory_order(array: np.ndarray) -> tuple[np.ndarray, tuple[int, ...] | None]:
    """`array` as a C-contiguous array and the axes that give `array` back from it (None: it is
    itself): a view when `array` is a transposed contiguous one (a channel-planar image), which
    then crosses without a copy and arrives with the same strides; a copy otherwise."""
    if array.flags.c_contiguous:
        return array, None
    order = sorted(range(array.ndim), key=lambda axis: -array.strides[axis])
    transposed = array.transpose(order)
    if transposed.flags.c_contiguous:
        return transposed, tuple(sorted(range(array.ndim), key=order.__getitem__))
    return np.ascontiguousarray(array), None


def _aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


def write_frame(fd: int, parts: list[Any]) -> None:
    """Writes a frame's parts (`Codec.frame`) to the file descriptor `fd`, with one writev
    where the pipe or socket takes them whole."""
    written = os.writev(fd, parts)
    total = sum(memoryview(part).nbytes for part in parts)
    if written < total:
        rest = memoryview(b"".join(parts))[written:]
        while rest:
            rest = rest[os.write(fd, rest) :]


def _read_into(stream: BinaryIO, view: memoryview) -> int:
    """Fills `view` from `stream`; fewer bytes only at the stream's end."""
    got = 0
    while got < len(view):
        count = stream.readinto(view[got:])
        if not count:
            break
        got += count
    return got


def describe_space(space: Any) -> dict[str, Any] | None:
    """A gymnasium space as plain data (None for a kind the proxy does not rebuild)."""
    kind = type(space).__name__
    if kind == "Box":
        return {"kind": kind, "low": space.low, "high": space.high, "dtype": space.dtype.str}
    if kind == "Discrete":
        return {"kind": kind, "n": int(space.n), "start": int(space.start)}
    if kind == "MultiDiscrete":
        return {"kind": kind, "nvec": space.nvec, "dtype": space.dtype.str}
    if kind == "MultiBinary":
        return {"kind": kind, "n": space.n}
    if kind == "Dict":
        return {"kind": kind, "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}
    if kind == "Tuple":
        return {"kind": kind, "spaces": [describe_space(s) for s in space.spaces]}
    return None


class Server:
    """The envs of the entry `allowed` (the one it may make), at most `most` of them, and the
    ops on them."""

    def __init__(self, allowed: str | None, most: int = 1) -> None:
        self.allowed = allowed
        self.most = most
        self.envs: list[Any] = []  # by number; None once closed
        self._homes: list[_Home | None] = []  # each env's thread (None: this one)

    def hello(self, protocol: int) -> dict[str, Any]:
        if protocol != PROTOCOL:
            raise RuntimeError(
                f"the proxy speaks env server protocol {protocol}, this server {PROTOCOL}: "
                "both must come from the same policybench"
            )
        return {"protocol": PROTOCOL, "python": sys.version.split()[0], "numpy": np.__version__}

    def make(
        self, entry: str, task: str, kwargs: dict[str, Any], thread: bool = True
    ) -> dict[str, Any]:
        if len(self.envs) >= self.most:
            made = "its env: it makes one env" if self.most == 1 else f"{self.most} envs"
            raise PermissionError(f"this env server has made {made}, as its starter allowed")
        if entry != self.allowed:
            raise PermissionError(
                f"this env server was started for the env {self.allowed!r}: it makes no other "
                f"(asked for {entry!r})"
            )
        module, _, name = entry.partition(":")
        if not name:
            raise ValueError(f"an env entry reads 'module:callable', got {entry!r}")
        factory = importlib.import_module(module)
        for part in name.split("."):
            factory = getattr(factory, part)
        number = len(self.envs)
        home = _Home(f"env-{number}") if number and thread else None
        try:
            self.envs.append(_on(home, lambda: factory(task, **kwargs)))
        except BaseException:
            if home is not None:
                home.stop()
            raise
        self._homes.append(home)
        return {**self.spaces(number), "env": number}

    def spaces(self, env: int = 0) -> dict[str, Any]:
        made = self._env(env)
        metadata = getattr(made, "metadata", None) or {}
        return {
            "action_space": describe_space(made.action_space),
            "observation_space": describe_space(getattr(made, "observation_space", None)),
            "metadata": {key: metadata[key] for key in METADATA if key in metadata},
            "render_mode": getattr(made, "render_mode", None),
        }

    # An answer of several values is a list (msgpack's own array): a tuple would cross packed
    # twice, as ext TUPLE.
    def reset(self, seed: int | None, options: dict[str, Any] | None, env: int = 0) -> list[Any]:
        made = self._env(env)
        obs, info = _on(self._homes[env], lambda: made.reset(seed=seed, options=options))
        return [obs, info]

    def step(self, action: Any, env: int = 0) -> list[Any]:
        made = self._env(env)
        obs, reward, terminated, truncated, info = _on(self._homes[env], lambda: made.step(action))
        return [obs, float(reward), bool(terminated), bool(truncated), info]

    def steps(self, steps: list[Any]) -> Iterator[dict[str, Any]]:
        """Each [env, action] of `steps` stepped in turn: its answer, or its env's error (the
        other envs' steps are not lost with it), each given as soon as it is stepped."""
        for step in steps:
            try:
                env, action = step
                yield {"ok": self.step(action, env)}
            except Exception as error:
                yield {"error": failure(error)}

    def render(self, env: int = 0) -> Any:
        made = self._env(env)
        return _on(self._homes[env], made.render)

    def close(self, env: int | None = None) -> None:
        """Closes env `env`, or every env (the server then ends)."""
        if env is not None:
            self._env(env)  # a live one
        for number in range(len(self.envs)) if env is None else [env]:
            made, home = self.envs[number], self._homes[number]
            self.envs[number] = None
            if made is not None:
                try:
                    _on(home, made.close)
                finally:
                    if home is not None:
                        home.stop()

    def _env(self, env: Any) -> Any:
        """The live env numbered `env`."""
        if type(env) is not int or not 0 <= env < len(self.envs) or self.envs[env] is None:
            live = [number for number, made in enumerate(self.envs) if made is not None]
            raise ValueError(f"no live env {env!r:.20} in this env server; its live envs: {live}")
        return self.envs[env]


class _Home:
    """The thread an env lives on: what is asked of the env runs there, one call at a time."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def call(self, work: Any) -> Any:
        self._calls.put(work)
        done, value = self._answers.get()
        if not done:
            raise value
        return value

    def stop(self) -> None:
        self._calls.put(None)

    def _serve(self) -> None:
        while (work := self._calls.get()) is not None:
            try:
                self._answers.put((True, work()))
            except BaseException as error:  # raised again in the thread that asked
                self._answers.put((False, error))


def _on(home: _Home | None, work: Any) -> Any:
    """`work()` on `home`'s thread (None: this thread)."""
    return work() if home is None else home.call(work)


def failure(error: BaseException) -> dict[str, Any]:
    """An error as an answer carries it."""
    tail = traceback.format_exception(type(error), error, error.__traceback__)[-6:]
    return {"type": type(error).__name__, "message": str(error), "traceback": tail}


def serve(requests: BinaryIO, answers: int, allowed: str | None, most: int = 1) -> None:
    """Answers requests from `requests` on the file descriptor `answers` until a `close` of every
    env or the end of `requests`; `allowed` is the one entry it may make (None: none), `most`
    the most envs it makes."""
    server = Server(allowed, most)
    codec = Codec()
    while True:
        try:
            request = codec.read(requests)
        except (ValueError, TypeError, KeyError, IndexError, msgpack.UnpackException) as error:
            # A frame it cannot decode (a malformed array, too deep): read whole, so the next
            # frame starts where it should; the sender hears why, and this server goes on.
            write_frame(answers, codec.frame({"error": failure(error)}))
            continue
        if request is None:
            return
        op = request.pop("op", None) if isinstance(request, dict) else None
        try:
            if op not in OPS:
                raise ValueError(f"an env server answers the ops {', '.join(OPS)}; got {op!r}")
            if op == "steps":  # a frame a step, each written once stepped
                for answer in server.steps(**request):
                    write_frame(answers, codec.frame(answer))
                continue
            frame = codec.frame({"ok": getattr(server, op)(**request)})
        except Exception as error:
            frame = codec.frame({"error": failure(error)})
        write_frame(answers, frame)
        if op == "close" and request.get("env") is None:
            return


def die_with_starter() -> None:
    """Ends this process when the process that started it ends (policybench.lifetime's rule):
    the kernel's SIGKILL on Linux, a watching thread elsewhere. Ctrl-C or SIGTERM to the whole
    process group is left to the starter, which closes this server."""
    parent = os.environ.pop(PARENT_PID_VARIABLE, None)
    if parent is None:
        return
    parent_pid = int(parent)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        by_kernel = sys.platform.startswith("linux") and (
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        )
    except (OSError, AttributeError):
        by_kernel = False
    if not by_kernel:
        threading.Thread(target=_watch, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def main() -> None:
    die_with_starter()
    allowed = sys.argv[1] if len(sys.argv) > 1 else None
    most = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    # The frames own the real stdout; whatever the env prints goes to stderr.
    answers = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, answers, allowed, most)


if __name__ == "__main__":
    main()
