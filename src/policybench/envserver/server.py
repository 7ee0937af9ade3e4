"""The env server: runs one gymnasium-style env in an interpreter of its own and answers the
proxy's requests over its stdin and stdout. Needs only the standard library, numpy and msgpack.

Frames are a 4-byte big-endian length and a msgpack map. A request is {"op": name, **args}; an
answer is {"ok": value} or {"error": {"type", "message", "traceback"}}. Arrays cross as a
msgpack ext of dtype, shape and bytes (numpy 1.x and 2.x read each other's), tuples as another.
The proxy's first request is `hello` with its protocol version; the server answers with its own.
The env comes from `make`: `entry` ("module:callable") is imported and called with the task.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO

import msgpack
import numpy as np

PROTOCOL = 1  # raise it on any change to the ops or the encoding
PARENT_PID_VARIABLE = "POLICYBENCH_PARENT_PID"  # policybench.lifetime's, spelled here again:
PR_SET_PDEATHSIG = 1  # this module imports nothing of policybench
HEADER = struct.Struct(">I")
SHORT = struct.Struct(">H")
ARRAY, TUPLE = 1, 2  # msgpack ext type codes
OPS = ("hello", "make", "spaces", "reset", "step", "render", "close")  # Server's methods
METADATA = ("render_modes", "render_fps")  # what crosses of an env's metadata


def encode(value: Any) -> Any:
    """What msgpack carries for a value it does not know (its `default`): an array as ext
    ARRAY ({dtype, shape, bytes}), a tuple as ext TUPLE, a numpy scalar as a Python one."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("an array of Python objects cannot cross to the other interpreter")
        data = value if value.flags.c_contiguous else value.copy(order="C")
        header = " ".join([data.dtype.str, *map(str, data.shape)]).encode()
        return msgpack.ExtType(ARRAY, b"".join([SHORT.pack(len(header)), header, data.data]))
    if isinstance(value, tuple):
        return msgpack.ExtType(TUPLE, packb(list(value)))
    if isinstance(value, np.generic):
        return value.item()
    for plain in (dict, list, float, int, str, bytes):  # subclasses: OrderedDict, IntEnum ...
        if isinstance(value, plain):
            return plain(value)
    raise TypeError(f"an env server cannot send a {type(value).__name__}: {value!r:.80}")


def decode(code: int, payload: bytes) -> Any:
    """The inverse of `encode` (msgpack's ext_hook); arrays are writable copies."""
    if code == ARRAY:
        (length,) = SHORT.unpack_from(payload)
        dtype, *shape = payload[SHORT.size : SHORT.size + length].decode().split(" ")
        data = memoryview(payload)[SHORT.size + length :]
        return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(tuple(map(int, shape))).copy()
    if code == TUPLE:
        return tuple(unpackb(payload))
    return msgpack.ExtType(code, payload)


def packb(value: Any) -> bytes:
    return msgpack.packb(value, default=encode, use_bin_type=True, strict_types=True)


def unpackb(body: bytes) -> Any:
    return msgpack.unpackb(body, raw=False, ext_hook=decode, strict_map_key=False)


def pack(message: dict[str, Any]) -> bytes:
    """`message` as one frame."""
    body = packb(message)
    return HEADER.pack(len(body)) + body


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    """The next frame from `stream`, None at its end."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = stream.read(length)
    if len(body) < length:
        return None
    return unpackb(body)


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
    """One env and the ops on it."""

    def __init__(self) -> None:
        self.env: Any = None

    def hello(self, protocol: int) -> dict[str, Any]:
        if protocol != PROTOCOL:
            raise RuntimeError(
                f"the proxy speaks env server protocol {protocol}, this server {PROTOCOL}: "
                "both must come from the same policybench"
            )
        return {"protocol": PROTOCOL, "python": sys.version.split()[0], "numpy": np.__version__}

    def make(self, entry: str, task: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        module, _, name = entry.partition(":")
        if not name:
            raise ValueError(f"an env entry reads 'module:callable', got {entry!r}")
        factory = importlib.import_module(module)
        for part in name.split("."):
            factory = getattr(factory, part)
        self.env = factory(task, **kwargs)
        return self.spaces()

    def spaces(self) -> dict[str, Any]:
        env = self.env
        metadata = getattr(env, "metadata", None) or {}
        return {
            "action_space": describe_space(env.action_space),
            "observation_space": describe_space(getattr(env, "observation_space", None)),
            "metadata": {key: metadata[key] for key in METADATA if key in metadata},
            "render_mode": getattr(env, "render_mode", None),
        }

    # An answer of several values is a list (msgpack's own array): a tuple would cross packed
    # twice, as ext TUPLE.
    def reset(self, seed: int | None, options: dict[str, Any] | None) -> list[Any]:
        obs, info = self.env.reset(seed=seed, options=options)
        return [obs, info]

    def step(self, action: Any) -> list[Any]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return [obs, float(reward), bool(terminated), bool(truncated), info]

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answers requests until `close` or the end of `requests`."""
    server = Server()
    while (request := read_frame(requests)) is not None:
        op = request.pop("op")
        try:
            if op not in OPS:
                raise ValueError(f"an env server answers the ops {', '.join(OPS)}; got {op!r}")
            answer = {"ok": getattr(server, op)(**request)}
            frame = pack(answer)
        except Exception as error:
            tail = traceback.format_exception(type(error), error, error.__traceback__)[-6:]
            failure = {"type": type(error).__name__, "message": str(error), "traceback": tail}
            frame = pack({"error": failure})
        answers.write(frame)
        answers.flush()
        if op == "close":
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
    # The frames own the real stdout; whatever the env prints goes to stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
