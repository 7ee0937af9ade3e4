"""`policybench serve` under attack: a real server process and hand-made websocket clients that
send what an honest client never does — a scalar whose data names a GiB, a map of a million
entries, frames near the size limit, thousands of prompts — while an honest client keeps asking.
The server's peak memory stays within ATTACK_MIB of its own before the attacks, the honest client
gets every answer right with its median latency under HONEST_P50_MS, and the attackers get a
one-line error each. The start-up refusals (an empty key, a bind beyond loopback without one,
--evals-from-clients without one or naming a module outside the suites and --eval-path) too."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgpack
import numpy as np
import pytest
from websockets.sync.client import connect

from policybench import keys
from policybench.options import API_KEY_VARIABLE
from policybench.serve.server import EVAL_REF_HEADER
from policybench.serve.wire import packb, unpackb
from tests.test_remote import free_port

REPO = Path(__file__).resolve().parents[1]
KEY = "serve-k3y-5e1f"
ATTACK_MIB = 400  # the most the attacks may add to the server's peak memory
HONEST_P50_MS = 100.0  # an honest client's median round trip while the attacks run
HEADERS = {"Authorization": f"Api-Key {KEY}"}
HONEST = {"observation/state": np.array([0.0, 3.0]), "prompt": "reach the goal"}


def start(*args: str, key: str | None = KEY, cwd: Path = REPO) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env.pop(API_KEY_VARIABLE, None)
    if key is not None:
        env[API_KEY_VARIABLE] = key
    command = [sys.executable, "-m", "policybench.cli", "serve", f"--port={port}", *args]
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
    )
    return server, port


def peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def served():
    server, port = start("--policy=scripted", "--eval=tests.served:POINT")
    try:
        assert "serving" in server.stdout.readline()
        yield server, f"ws://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def attack(url: str, frame: bytes) -> str:
    """What the server says to a client sending `frame`: its error text, or its answer's keys."""
    with connect(url, additional_headers=HEADERS, max_size=None, open_timeout=30) as ws:
        ws.recv(30)  # the metadata
        ws.send(frame)
        answer = ws.recv(60)
    return answer if isinstance(answer, str) else repr(sorted(unpackb(answer)))


def push_without_reading(url: str, frame: bytes, count: int) -> int:
    """Sends `frame` `count` times without reading an answer, giving up on a send the server
    does not take within 10 s; how many were sent."""
    sent = 0
    with connect(url, additional_headers=HEADERS, max_size=None, open_timeout=30) as ws:
        ws.recv(30)
        for _ in range(count):
            done = threading.Thread(target=ws.send, args=(frame,), daemon=True)
            done.start()
            done.join(10)
            if done.is_alive():
                break
            sent += 1
    return sent


HOSTILE = {
    # 66 bytes that once made the server allocate 3.3 GiB: np.bytes_(2**30).
    "scalar-of-a-gib": msgpack.packb(
        {"observation/state": {b"__npgeneric__": True, b"data": 2**30, b"dtype": "|S"}}
    ),
    "million-entry-map": b"\xdf" + (1_000_000).to_bytes(4, "big") + b"\x00" * 16,
    "array-shape-beyond-its-bytes": packb(
        {
            "observation/state": {
                b"__ndarray__": True,
                b"data": b"\0" * 16,
                b"dtype": "<f8",
                b"shape": (1 << 20, 1 << 20),
            }
        }
    ),
    "near-limit-frame": packb({**HONEST, "junk": np.zeros(60 << 20, np.uint8)}),
    # 28 MiB of empty maps, one byte each: it once took the server from 114 MiB to over 4 GiB
    # and held every client for 22 s. Now refused once 65,536 maps and lists are built.
    "empty-maps": msgpack.packb({"observation/state": [[{}] * 60_000] * 470}),
    # 60 MiB of 2-character strings (3 bytes each on the wire, about 60 in memory): three at once
    # once took the server from 116 to 3,014 MiB. Now refused once 262,144 items are built.
    "short-strings": msgpack.packb({"observation/state": [["ab"] * 65_536] * 320}),
}


def test_hostile_frames_are_refused_within_a_memory_bound_while_an_honest_client_is_answered(
    served,
):
    server, url = served
    latencies: list[float] = []
    wrong: list[object] = []
    stop = threading.Event()

    def honest() -> None:
        with connect(url, additional_headers=HEADERS, open_timeout=30) as ws:
            ws.recv(30)
            while not stop.is_set():
                started = time.perf_counter()
                ws.send(packb(HONEST))
                answer = unpackb(ws.recv(30))
                latencies.append((time.perf_counter() - started) * 1e3)
                if not np.allclose(answer["actions"], [[0.5]]):  # greedy: halfway to the goal
                    wrong.append(answer["actions"])
                time.sleep(0.005)

    asking = threading.Thread(target=honest)
    asking.start()
    try:
        time.sleep(1.0)
        before = peak_mib(server.pid)
        said = {}
        for name, frame in HOSTILE.items():
            for _ in range(3):
                said[name] = attack(url, frame)
        with ThreadPoolExecutor(2) as pool:  # two flood frames at once
            together = list(pool.map(attack, [url, url], [HOSTILE["empty-maps"]] * 2))
        with ThreadPoolExecutor(3) as pool:  # three frames of short strings at once
            strings = list(pool.map(attack, [url] * 3, [HOSTILE["short-strings"]] * 3))
        # Near-limit frames sent back to back without reading an answer: the server holds at
        # most one waiting beyond the one it answers (max_queue), decoding them off its loop.
        pushed = push_without_reading(url, HOSTILE["near-limit-frame"], 8)
        # Thousands of prompts on one connection: only the last few rollouts are kept.
        with connect(url, additional_headers=HEADERS, open_timeout=30) as ws:
            ws.recv(30)
            for i in range(2000):
                ws.send(packb({**HONEST, "prompt": f"{i:04d}" * 1000}))
                ws.recv(30)
        after = peak_mib(server.pid)
    finally:
        stop.set()
        asking.join(60)
    assert after - before < ATTACK_MIB, (before, after)
    assert all("more than 65536 maps and lists" in answer for answer in together), together
    assert all("more than 262144 items" in answer for answer in strings), strings
    assert pushed == 8, pushed
    for name in (
        "scalar-of-a-gib",
        "million-entry-map",
        "array-shape-beyond-its-bytes",
        "empty-maps",
        "short-strings",
    ):
        assert said[name].startswith("bad observation frame:"), (name, said[name])
        assert "\n" not in said[name].strip() and "Traceback" not in said[name]
    assert wrong == [] and len(latencies) > 20
    assert statistics.median(latencies) < HONEST_P50_MS, statistics.median(latencies)
    assert server.poll() is None


@pytest.mark.parametrize(
    ("args", "key", "said"),
    [
        (
            ["--policy=scripted"],
            "",
            "the API key given (--api-key or $POLICYBENCH_API_KEY) is empty",
        ),
        (["--policy=scripted", "--host=0.0.0.0"], None, "refusing to serve 0.0.0.0 without a key"),
        (["--policy=scripted", "--evals-from-clients"], None, "--evals-from-clients imports"),
    ],
    ids=["empty-key", "beyond-loopback", "evals-from-clients"],
)
def test_a_server_anyone_could_use_is_refused_at_start(args, key, said):
    server, _ = start(*args, key=key)
    out, _ = server.communicate(timeout=60)
    assert server.returncode != 0
    assert said in out, out


def test_evals_from_clients_imports_only_suites_and_eval_path_folders(tmp_path):
    planted = tmp_path / "planted.py"
    ran = tmp_path / "ran"
    planted.write_text(f"import pathlib\npathlib.Path({str(ran)!r}).write_text('ran')\n")
    # Run from the folder the module is planted in: the working directory is not looked in.
    server, port = start(
        "--policy=random", "--evals-from-clients", f"--eval-path={REPO}", key=KEY, cwd=tmp_path
    )
    try:
        assert "serving" in server.stdout.readline()
        url = f"ws://127.0.0.1:{port}"
        for ref in ("planted:POINT", "os:system", "tests.served:POINT"):
            headers = {**HEADERS, EVAL_REF_HEADER: ref}
            with connect(url, additional_headers=headers, open_timeout=30) as ws:
                first = ws.recv(30)
                if ref == "tests.served:POINT":  # under --eval-path: served
                    assert keys.POLICY in unpackb(first)
                else:
                    assert "imports Evals for clients from registered suites" in first, first
    finally:
        server.kill()
        server.wait()
    assert not ran.exists()


def test_eval_path_loads_its_own_folders_module_by_location_and_nothing_of_the_same_name(
    tmp_path, monkeypatch
):
    """Started as the README shows, a server has its working directory on sys.path: a module
    planted there under the name of the folder's once ran instead of it, and a namespace
    package in the folder (`venv/`) let `venv.__main__` run the stdlib's venv CLI. Now the
    folder's own file is imported by location, and a name with no file in it is refused."""
    from policybench.serve.command import client_eval

    folder, planted_dir = tmp_path / "evals", tmp_path / "cwd"
    folder.mkdir()
    planted_dir.mkdir()
    name = f"myevals_{tmp_path.name}"  # fresh in sys.modules
    (folder / f"{name}.py").write_text("from tests.served import POINT\nEVAL = POINT\n")
    ran = tmp_path / "ran"
    (planted_dir / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(ran)!r}).write_text('ran')\n"
    )
    (folder / "venv").mkdir()  # a namespace package by the stdlib's name
    monkeypatch.syspath_prepend(str(planted_dir))
    try:
        found = client_eval(f"{name}:EVAL", [folder])
        assert found.name == "point-served" and not ran.exists()
        for ref in ("venv.__main__:X", "os:system", "planted_elsewhere:X"):
            with pytest.raises(LookupError, match="in none of them"):
                client_eval(ref, [folder])
    finally:
        sys.modules.pop(name, None)
