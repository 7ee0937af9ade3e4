"""Benchmarks `policybench serve`: throughput and latency for 1, 4 and 8 concurrent clients with
batching off and on, against the model's own batch-8 throughput, with a small torch policy.

Run from the repository root:  python bench/serve.py  (needs `pip install -e ".[bench]"`;
about a minute); `python bench/serve.py --role kill` kills the server under 8 clients.
The server runs in a subprocess, the clients are threads of this process, as
simulator workers would be; every figure comes from this one run, since the machine is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from policybench.policy.base import Chunk, Observation, SessionContext
from policybench.serve.client import Endpoint, RemoteModel
from policybench.serve.server import PolicyServer, ServerConfig, fixed_model

IMAGE, STATE = "observation/image", "observation/state"
SIZE, PATCH, STATE_DIM, HORIZON, ACTION_DIM = 224, 32, 8, 10, 7
CONTEXT = SessionContext("pick up the cube", 10.0)
BATCHING_TARGET, DIRECT_TARGET = 2.5, 0.85


class PatchTransformer:
    """A 4-layer transformer over 32-px patches of a 224x224 image plus a state token, answering
    a `[10, 7]` chunk: the shape of a small VLA head. `predict_batch` runs one stacked forward."""

    name = "patch-transformer"

    def __init__(self, width: int = 128, layers: int = 4, seed: int = 0) -> None:
        import torch
        from torch import nn

        torch.manual_seed(seed)
        self.torch = torch
        self.patches = nn.Linear(3 * PATCH * PATCH, width)
        self.state = nn.Linear(STATE_DIM, width)
        self.position = nn.Parameter(torch.randn(1, (SIZE // PATCH) ** 2 + 1, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, 4, 4 * width, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
        self.head = nn.Linear(width, HORIZON * ACTION_DIM)

    def predict_batch(self, requests: Sequence[tuple[SessionContext, Observation]]) -> list[Chunk]:
        torch = self.torch
        with torch.inference_mode():
            images = torch.from_numpy(np.stack([obs[IMAGE] for _, obs in requests]))
            states = torch.from_numpy(np.stack([obs[STATE] for _, obs in requests]))
            n, grid = len(requests), SIZE // PATCH
            pixels = images.float().div_(255.0).reshape(n, grid, PATCH, grid, PATCH, 3)
            pixels = pixels.permute(0, 1, 3, 2, 4, 5).reshape(n, grid * grid, -1)
            tokens = torch.cat([self.patches(pixels), self.state(states)[:, None]], dim=1)
            encoded = self.encoder(tokens + self.position)
            actions = self.head(encoded.mean(dim=1)).reshape(n, HORIZON, ACTION_DIM).numpy()
        return [Chunk(actions[i], ctx.control_hz) for i, (ctx, _) in enumerate(requests)]

    def open(self, context: SessionContext):
        return lambda obs: self.predict_batch([(context, obs)])[0]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def observation(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        IMAGE: rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8),
        STATE: rng.normal(size=STATE_DIM).astype(np.float32),
    }


def direct_throughput(model: PatchTransformer, batch: int, seconds: float) -> float:
    requests = [(CONTEXT, observation(i)) for i in range(batch)]
    model.predict_batch(requests)  # warm up
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        model.predict_batch(requests)
        calls += 1
    return calls * batch / (time.perf_counter() - started)


def serve(args: argparse.Namespace) -> None:
    """The server role: measures the model directly, then serves it until stdin closes."""
    import torch

    torch.set_num_threads(args.threads)
    model = PatchTransformer(args.width)
    direct = {batch: direct_throughput(model, batch, args.seconds) for batch in (1, 8)}
    config = ServerConfig(port=args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms)
    server = PolicyServer(fixed_model(model, CONTEXT.control_hz), config, model.name)

    async def run() -> None:
        listening = await server.start()
        port = listening.sockets[0].getsockname()[1]
        print(f"ready ws://127.0.0.1:{port} direct1={direct[1]:.1f} direct8={direct[8]:.1f}")
        sys.stdout.flush()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        listening.close()
        await server.close()

    asyncio.run(run())


def measure(url: str, clients: int, seconds: float) -> tuple[float, float, float]:
    """`clients` threads asking as fast as they can: (inferences/s, p50 ms, p99 ms)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)
    stop = threading.Event()

    def client(index: int) -> None:
        source = RemoteModel(Endpoint(url)).open(CONTEXT)
        obs = observation(100 + index)
        source(obs)  # warm up
        barrier.wait()
        while not stop.is_set():
            started = time.perf_counter()
            source(obs)
            latencies[index].append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    every = sorted(x for per_client in latencies for x in per_client)
    p99 = every[min(len(every) - 1, round(0.99 * (len(every) - 1)))]
    return len(every) / elapsed, statistics.median(every) * 1e3, p99 * 1e3


def start_server(
    args: argparse.Namespace, max_batch: int, port: int = 0
) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, __file__, "--role", "server", "--max-batch", str(max_batch)]
    command += ["--port", str(port)]
    command += ["--max-wait-ms", str(args.max_wait_ms), "--threads", str(args.threads)]
    command += ["--seconds", str(args.seconds), "--width", str(args.width)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline()


def main(args: argparse.Namespace) -> int:
    rows: list[tuple[str, int, float, float, float]] = []
    direct: dict[str, float] = {}
    for label, max_batch in (("batching off", 1), ("batching on", 8)):
        process, ready = start_server(args, max_batch)
        match = re.search(r"(ws://\S+) direct1=(\S+) direct8=(\S+)", ready)
        if match is None:
            raise SystemExit(f"server did not start: {ready!r}")
        url = match.group(1)
        direct[label] = float(match.group(3))
        direct[f"{label} batch 1"] = float(match.group(2))
        for clients in (1, 4, 8):
            rows.append((label, clients, *measure(url, clients, args.seconds)))
        process.stdin.close()
        process.wait(30)
    direct8 = max(direct["batching off"], direct["batching on"])
    print(f"\n$ {shlex.join(['python', 'bench/serve.py', *sys.argv[1:]])}")
    print(
        f"model: {PatchTransformer.name}, width {args.width}, 4 layers over "
        f"{(SIZE // PATCH) ** 2} patches + state, [{HORIZON}, {ACTION_DIM}] chunk; "
        f"torch threads {args.threads}; "
        f"window {args.max_wait_ms:g} ms"
    )
    print(f"{'server':<14}{'clients':>8}{'infer/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for label, clients, rate, p50, p99 in rows:
        print(f"{label:<14}{clients:>8}{rate:>10.1f}{p50:>9.1f}{p99:>9.1f}")
    direct1 = max(direct["batching off batch 1"], direct["batching on batch 1"])
    print(f"{'direct b=1':<14}{'-':>8}{direct1:>10.1f}")
    print(f"{'direct b=8':<14}{'-':>8}{direct8:>10.1f}")
    off8 = next(r[2] for r in rows if r[0] == "batching off" and r[1] == 8)
    on8 = next(r[2] for r in rows if r[0] == "batching on" and r[1] == 8)
    print(
        f"\nat 8 clients: batching on / off = {on8 / off8:.2f}x (target >= {BATCHING_TARGET}x); "
        f"on / direct batch 8 = {on8 / direct8:.0%} (target >= {DIRECT_TARGET:.0%}); "
        f"the model's own batch-8 gain (direct b=8 / b=1) = {direct8 / direct1:.2f}x"
    )
    return 0


def kill(args: argparse.Namespace, clients: int = 8, timeout_s: float = 10.0) -> int:
    """8 clients in rollouts (a connection each) when the server is killed: how long each takes
    to fail and with what, then how long until each connects again once it restarts."""
    from policybench.serve.client import RemotePolicyError, RemoteTimeout, RemoteUnavailable

    process, ready = start_server(args, 8)
    url = re.search(r"ws://\S+", ready).group(0)
    port = int(url.rsplit(":", 1)[1])
    killed_at: list[float] = []
    failures: list[tuple[float, str]] = []
    reconnects: list[float] = []
    restarted = threading.Event()
    restarted_at: list[float] = []

    def client(index: int) -> None:
        remote = RemoteModel(Endpoint(url, infer_timeout_s=timeout_s))
        source = remote.open(CONTEXT)
        obs = observation(index)
        try:
            while True:
                source(obs)
        except (RemoteUnavailable, RemoteTimeout, RemotePolicyError) as error:
            failures.append((time.perf_counter() - killed_at[0], type(error).__name__))
        restarted.wait()
        while True:
            try:
                remote.open(CONTEXT)(obs)
                reconnects.append(time.perf_counter() - restarted_at[0])
                return
            except RemoteUnavailable:
                time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    killed_at.append(time.perf_counter())
    process.kill()
    process.wait()
    time.sleep(1.0)
    process, _ = start_server(args, 8, port)
    restarted_at.append(time.perf_counter())
    restarted.set()
    for thread in threads:
        thread.join(60)
    process.stdin.close()
    process.wait(30)
    kinds = sorted({kind for _, kind in failures})
    print(f"\n$ {shlex.join(['python', 'bench/serve.py', *sys.argv[1:]])}")
    print(
        f"{clients} clients, server SIGKILLed mid-run (receive timeout {timeout_s:g} s): "
        f"{len(failures)} failed with {kinds}, "
        f"{min(t for t, _ in failures) * 1e3:.0f}-{max(t for t, _ in failures) * 1e3:.0f} ms "
        "after the kill; "
        f"after the restart (ready line), all {len(reconnects)} reconnected within "
        f"{max(reconnects) * 1e3:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("bench", "server", "kill"), default="bench")
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement (default 4)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--width", type=int, default=128, help="transformer width (default 128)")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--port", type=int, default=0, help="server role: port (default any)")
    arguments = parser.parse_args()
    if arguments.role == "server":
        serve(arguments)
    elif arguments.role == "kill":
        sys.exit(kill(arguments))
    else:
        sys.exit(main(arguments))
