"""Benchmarks `policybench serve` against an openpi-protocol reference server (one request at a
time, inference on its event loop), with the same small torch model and the same client processes.

Run from the repository root:  python bench/serve.py  (needs `pip install -e ".[bench]"`; about
two and a half minutes). At 1, 2, 4, 8 and 16 clients, each client a process of its own asking as
fast as it can, it measures both servers and, in turn with them, the model alone at each batch
size; it prints markdown tables and the command that made them. Ratios are taken within one run,
as the machine is noisy. `--width 0` serves a model that answers at once, leaving the cost of
serving itself. `--server-cpus 0` pins both servers to CPU 0 (the clients and the model alone
stay unpinned), as `taskset -c 0 policybench serve` would. `python bench/serve.py --role kill`
kills the server under 8 clients and times the recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from policybench.policy.base import Chunk, Observation, SessionContext
from policybench.serve import event_loop
from policybench.serve.server import PolicyServer, ServerConfig, fixed_model
from policybench.serve.wire import ACTIONS, SERVER_TIMING, packb, unpackb

IMAGE, STATE, PROMPT = "observation/image", "observation/state", "prompt"
SIZE, PATCH, STATE_DIM, HORIZON, ACTION_DIM = 224, 32, 8, 10, 7
CONTEXT = SessionContext("pick up the cube", 10.0)
ONE_CLIENT_TARGET, MANY_CLIENTS, MANY_TARGET, DIRECT_TARGET = 1.0, 8, 2.0, 0.85
WARM_UP_CALLS = 5


class PatchTransformer:
    """A 4-layer transformer over 32-px patches of a 224x224 image plus a state token, answering
    a `[10, 7]` chunk: the shape of a small VLA head. `predict_batch` runs one stacked forward."""

    name = "patch-transformer"

    def __init__(
        self, width: int = 128, layers: int = 4, seed: int = 0, device: str = "cpu"
    ) -> None:
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
        self.device = device
        for module in (self.patches, self.state, self.encoder, self.head):
            module.to(device)
        self.position = self.position.to(device)

    def predict_batch(self, requests: Sequence[tuple[SessionContext, Observation]]) -> list[Chunk]:
        torch = self.torch
        with torch.inference_mode():
            images = torch.from_numpy(np.stack([obs[IMAGE] for _, obs in requests])).to(self.device)
            states = torch.from_numpy(np.stack([obs[STATE] for _, obs in requests])).to(self.device)
            n, grid = len(requests), SIZE // PATCH
            pixels = images.float().div_(255.0).reshape(n, grid, PATCH, grid, PATCH, 3)
            pixels = pixels.permute(0, 1, 3, 2, 4, 5).reshape(n, grid * grid, -1)
            tokens = torch.cat([self.patches(pixels), self.state(states)[:, None]], dim=1)
            encoded = self.encoder(tokens + self.position)
            actions = self.head(encoded.mean(dim=1)).reshape(n, HORIZON, ACTION_DIM).cpu().numpy()
        return [Chunk(actions[i], ctx.control_hz) for i, (ctx, _) in enumerate(requests)]

    def open(self, context: SessionContext):
        return lambda obs: self.predict_batch([(context, obs)])[0]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def observation(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        IMAGE: rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8),
        STATE: rng.normal(size=STATE_DIM).astype(np.float32),
        PROMPT: CONTEXT.instruction,
    }


class ZeroModel:
    """Answers a zero chunk at once: what is left is the servers' and clients' own cost."""

    name = "zero"

    def predict_batch(self, requests: Sequence[tuple[SessionContext, Observation]]) -> list[Chunk]:
        return [
            Chunk(np.zeros((HORIZON, ACTION_DIM), np.float32), ctx.control_hz)
            for ctx, _ in requests
        ]

    def open(self, context: SessionContext):
        return lambda obs: self.predict_batch([(context, obs)])[0]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def model(args: argparse.Namespace) -> PatchTransformer | ZeroModel:
    if args.server_cpus and args.role in ("policybench", "reference"):
        # Before any thread starts, so that the server's threads (and torch's) inherit it.
        os.sched_setaffinity(0, args.server_cpus)
    if args.width == 0:
        return ZeroModel()
    import torch

    torch.set_num_threads(args.threads)
    return PatchTransformer(args.width, device=args.device)


@dataclass(frozen=True)
class Alone:
    rate: float  # inferences/s
    cpu_ms: float  # CPU time per inference


def measure_alone(served: PatchTransformer | ZeroModel, batch: int, seconds: float) -> Alone:
    """The model called in this process, `batch` observations at a time, for `seconds`."""
    requests = [(CONTEXT, observation(i)) for i in range(batch)]
    served.predict_batch(requests)  # warm up
    calls, started, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        served.predict_batch(requests)
        calls += 1
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return Alone(calls * batch / wall_s, cpu_s * 1e3 / (calls * batch))


def at_batch(alone: dict[int, Alone], batch: float) -> float:
    """The model's rate alone at a fractional mean batch size, interpolated between sizes."""
    low = max(1, min(int(batch), max(alone)))
    high = min(low + 1, max(alone))
    return alone[low].rate + (alone[high].rate - alone[low].rate) * (min(batch, high) - low)


# --- servers -----------------------------------------------------------------------------------


async def serve_until_stdin_closes(start, label: str) -> None:
    """Starts a websockets server with `start()`, prints its URL, serves until stdin closes."""
    listening = await start()
    port = listening.sockets[0].getsockname()[1]
    print(f"ready {label} ws://127.0.0.1:{port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    listening.close()


def policybench_server(args: argparse.Namespace) -> None:
    """`policybench serve`'s server (PolicyServer) over the model, with `--max-batch` and
    `--max-wait-ms` (by default, those of `policybench serve`)."""
    served = model(args)
    config = ServerConfig(port=args.port, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms)
    server = PolicyServer(fixed_model(served, CONTEXT.control_hz), config, served.name)

    async def run() -> None:
        await serve_until_stdin_closes(server.start, "policybench")
        await server.close()

    event_loop.run(run())  # as `policybench serve` runs it (uvloop's loop where installed)


def reference_server(args: argparse.Namespace) -> None:
    """openpi's protocol as its example server speaks it: the metadata frame on connect, then one
    observation at a time, inference run on the event loop, every request served alone."""
    from websockets.asyncio.server import serve

    served = model(args)

    async def answer_each(connection) -> None:
        await connection.send(packb({}))
        previous_total_ms = None
        async for frame in connection:
            started = time.perf_counter()
            obs = unpackb(frame, None)
            prompt = obs.pop(PROMPT)
            chunk = served.predict_batch([(SessionContext(prompt, CONTEXT.control_hz), obs)])[0]
            timing = {"infer_ms": (time.perf_counter() - started) * 1e3}
            if previous_total_ms is not None:
                timing["prev_total_ms"] = previous_total_ms
            await connection.send(packb({ACTIONS: chunk.actions, SERVER_TIMING: timing}))
            previous_total_ms = (time.perf_counter() - started) * 1e3

    def start():
        return serve(answer_each, "127.0.0.1", args.port, compression=None, max_size=None)

    asyncio.run(serve_until_stdin_closes(start, "reference"))


# --- clients -----------------------------------------------------------------------------------


def client(args: argparse.Namespace) -> None:
    """A client process, as openpi's client speaks: for each URL read on stdin it connects, warms
    up, says `ready`, waits for a line, asks as fast as it can for `--seconds`, prints a JSON line
    with its latencies and the batch size of each answer, and closes."""
    from websockets.sync.client import connect

    frame = packb(observation(args.seed))
    for url in sys.stdin:
        with connect(url.strip(), compression=None, max_size=None, proxy=None) as connection:
            connection.recv()  # the metadata frame
            for _ in range(WARM_UP_CALLS):
                connection.send(frame)
                connection.recv()
            print("ready", flush=True)
            sys.stdin.readline()
            latencies_ms, batch_sizes, infer_ms = [], [], []
            started = time.perf_counter()
            while (now := time.perf_counter()) - started < args.seconds:
                connection.send(frame)
                timing = unpackb(connection.recv())[SERVER_TIMING]
                latencies_ms.append(round((time.perf_counter() - now) * 1e3, 3))
                batch_sizes.append(timing.get("batch_size", 1))
                infer_ms.append(round(timing["infer_ms"], 3))
            elapsed = time.perf_counter() - started
        result = {
            "latencies_ms": latencies_ms,
            "batch_sizes": batch_sizes,
            "infer_ms": infer_ms,
            "elapsed_s": elapsed,
        }
        print(json.dumps(result), flush=True)


Process = subprocess.Popen[str]


def spawn(role: str, args: argparse.Namespace, *extra: str) -> Process:
    command = [sys.executable, __file__, "--role", role, "--seconds", str(args.seconds)]
    command += ["--threads", str(args.threads), "--width", str(args.width), *extra]
    command += ["--device", args.device]
    command += ["--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms)]
    command += server_cpus_flag(args)
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def read_line(stream: IO[str] | None, what: str) -> str:
    line = stream.readline() if stream is not None else ""
    if not line:
        raise SystemExit(f"{what} ended without answering; see its error above")
    return line


def start_server(role: str, args: argparse.Namespace, port: int = 0) -> tuple[Process, str]:
    process = spawn(role, args, "--port", str(port))
    ready = read_line(process.stdout, f"the {role} server")
    match = re.search(r"ws://\S+", ready)
    if match is None:
        raise SystemExit(f"the {role} server did not start: {ready!r}")
    return process, match.group(0)


@dataclass(frozen=True)
class Measured:
    rate: float  # inferences/s, all clients together
    p50_ms: float
    p99_ms: float
    mean_batch: float  # requests per model call, as the server's answers report their batch size
    cpu_ms: float  # the server process's CPU time per inference, all its threads
    busy: float  # the share of the run the model was in a call, as the server times its calls
    busy_rate: float  # inferences per second of those calls: the model's speed inside the server


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process `pid`, all its threads (Linux; counted in ticks)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(clients: list[Process], server: Process, url: str) -> Measured:
    """Points every client process at `url`, starts them together once all are warm, and takes
    the server's CPU time over the run."""
    for process in clients:
        process.stdin.write(url + "\n")
        process.stdin.flush()
    for process in clients:
        read_line(process.stdout, "a client")
    cpu_before = cpu_s(server.pid)
    for process in clients:
        process.stdin.write("go\n")
        process.stdin.flush()
    results = [json.loads(read_line(process.stdout, "a client")) for process in clients]
    cpu = cpu_s(server.pid) - cpu_before
    latencies = sorted(ms for result in results for ms in result["latencies_ms"])
    sizes = [size for result in results for size in result["batch_sizes"]]
    # A call answering b requests reports its time in each of its b answers.
    calls_s = sum(
        ms / size / 1e3
        for result in results
        for ms, size in zip(result["infer_ms"], result["batch_sizes"], strict=True)
    )
    elapsed_s = max(result["elapsed_s"] for result in results)
    return Measured(
        rate=sum(len(result["latencies_ms"]) / result["elapsed_s"] for result in results),
        p50_ms=statistics.median(latencies),
        p99_ms=latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
        mean_batch=len(sizes) / sum(1 / size for size in sizes),
        cpu_ms=cpu * 1e3 / len(latencies),
        busy=calls_s / elapsed_s,
        busy_rate=len(latencies) / calls_s,
    )


def main(args: argparse.Namespace) -> int:
    served = model(args)
    alone: dict[int, Alone] = {}
    servers = {role: start_server(role, args) for role in ("reference", "policybench")}
    rows: dict[int, dict[str, Measured]] = {}
    try:
        for turn, count in enumerate(args.clients):
            for batch in range(1, args.max_batch + 1):  # once per turn, the best kept
                measured = measure_alone(served, batch, args.direct_seconds)
                if batch not in alone or measured.rate > alone[batch].rate:
                    alone[batch] = measured
            clients = [spawn("client", args, "--seed", str(100 + i)) for i in range(count)]
            best: dict[str, Measured] = {}
            for repeat in range(args.repeats):
                # Alternate which server goes first, so a drift in machine load hits both alike.
                order = list(servers) if (turn + repeat) % 2 == 0 else list(servers)[::-1]
                for role in order:
                    measured = measure(clients, *servers[role])
                    if role not in best or measured.rate > best[role].rate:
                        best[role] = measured
            rows[count] = best
            for process in clients:
                process.stdin.close()
                process.wait(30)
    finally:
        for process, _ in servers.values():
            process.stdin.close()
            process.wait(30)
    print(report(args, alone, rows))
    return 0


def report(
    args: argparse.Namespace, alone: dict[int, Alone], rows: dict[int, dict[str, Measured]]
) -> str:
    served = (
        "a model answering zeros at once"
        if args.width == 0
        else f"{PatchTransformer.name}, width {args.width}, 4 layers over {(SIZE // PATCH) ** 2} "
        f"patches + state, [{HORIZON}, {ACTION_DIM}] chunk, torch threads {args.threads}"
    )
    lines = [
        f"$ {command(args)}",
        f"model: {served}; policybench serve: max batch {args.max_batch}, window "
        f"{args.max_wait_ms:g} ms; "
        + (f"servers pinned to CPUs {sorted(args.server_cpus)}; " if args.server_cpus else "")
        + f"{os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end; each cell the best of {args.repeats} runs of "
        f"{args.seconds:g} s (the model alone: of {len(rows)} runs of {args.direct_seconds:g} s), "
        "the servers and the model alone taking turns",
        "",
        "| batch | " + " | ".join(str(batch) for batch in alone) + " |",
        "|---|" + "---:|" * len(alone),
        "| model alone, inf/s | " + " | ".join(f"{a.rate:.0f}" for a in alone.values()) + " |",
        "| model alone, CPU ms/inf | "
        + " | ".join(f"{a.cpu_ms:.2f}" for a in alone.values())
        + " |",
        "",
        "| clients | reference inf/s | p50 / p99 ms | CPU ms/inf | policybench inf/s "
        "| p50 / p99 ms | CPU ms/inf | mean batch | vs reference | vs model alone at that batch |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    best = max(alone.values(), key=lambda a: a.rate)
    where = [
        "",
        "Where the model's time goes, in each server: its share of the run in a model call, as the "
        "server times its calls, and its speed in those calls against the model alone at the "
        "batch it ran (for policybench, their product is the last column above). A server "
        f"keeping the model busy at its best batch, at its speed alone, would serve "
        f"{best.rate:.0f} inf/s: the last column is that, against the reference.",
        "",
        "| clients | reference: model busy | speed vs alone | policybench: model busy "
        "| speed vs alone | ceiling vs reference |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for count, measured in rows.items():
        ref, ours = measured["reference"], measured["policybench"]
        direct = at_batch(alone, ours.mean_batch)
        lines.append(
            f"| {count} | {ref.rate:.0f} | {ref.p50_ms:.1f} / {ref.p99_ms:.1f} | {ref.cpu_ms:.2f} "
            f"| {ours.rate:.0f} | {ours.p50_ms:.1f} / {ours.p99_ms:.1f} | {ours.cpu_ms:.2f} "
            f"| {ours.mean_batch:.2f} | {ours.rate / ref.rate:.2f}x | {ours.rate / direct:.2f} |"
        )
        where.append(
            f"| {count} | {ref.busy:.2f} | {ref.busy_rate / alone[1].rate:.2f} | {ours.busy:.2f} "
            f"| {ours.busy_rate / direct:.2f} | {best.rate / ref.rate:.2f}x |"
        )
    lines += where
    lines.append("")
    if 1 in rows:
        ratio = rows[1]["policybench"].rate / rows[1]["reference"].rate
        lines.append(f"1 client: {ratio:.2f}x the reference (target >= {ONE_CLIENT_TARGET:g}x)")
    if MANY_CLIENTS in rows:
        ours, ref = rows[MANY_CLIENTS]["policybench"], rows[MANY_CLIENTS]["reference"]
        lines.append(
            f"{MANY_CLIENTS} clients: {ours.rate / ref.rate:.2f}x the reference (target >= "
            f"{MANY_TARGET:g}x), {ours.rate / at_batch(alone, ours.mean_batch):.2f} of the model "
            f"alone at batch {ours.mean_batch:.2f} (target >= {DIRECT_TARGET}); the model's own "
            f"gain from batching there: {at_batch(alone, ours.mean_batch) / alone[1].rate:.2f}x"
        )
    return "\n".join(lines)


def server_cpus_flag(args: argparse.Namespace) -> list[str]:
    """`--server-cpus=...` as given, or nothing when the servers are not pinned."""
    if not args.server_cpus:
        return []
    return [f"--server-cpus={','.join(map(str, sorted(args.server_cpus)))}"]


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run, every setting spelled out."""
    flags = [
        f"--clients={','.join(map(str, args.clients))}",
        f"--seconds={args.seconds:g}",
        f"--repeats={args.repeats}",
        f"--direct-seconds={args.direct_seconds:g}",
        f"--threads={args.threads}",
        f"--width={args.width}",
        f"--max-batch={args.max_batch}",
        f"--max-wait-ms={args.max_wait_ms:g}",
        *server_cpus_flag(args),
        *([f"--device={args.device}"] if args.device != "cpu" else []),
    ]
    return shlex.join(["python", "bench/serve.py", *flags])


# --- a server killed under load ----------------------------------------------------------------


def kill(args: argparse.Namespace, clients: int = 8, timeout_s: float = 10.0) -> int:
    """8 clients in rollouts (a connection each) when the server is killed: how long each takes
    to fail and with what, then how long until each connects again once it restarts."""
    from policybench.serve.client import (
        Endpoint,
        RemoteModel,
        RemotePolicyError,
        RemoteTimeout,
        RemoteUnavailable,
    )

    process, url = start_server("policybench", args)
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
        del obs[PROMPT]
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
    process, _ = start_server("policybench", args, port)
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
    defaults = ServerConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    roles = ("bench", "kill", "policybench", "reference", "client")
    parser.add_argument("--role", choices=roles, default="bench")
    parser.add_argument(
        "--clients",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 4, 8, 16],
        help="client counts, comma-separated (default 1,2,4,8,16)",
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="measurements per cell, best kept (default 3)"
    )
    parser.add_argument(
        "--direct-seconds",
        type=float,
        default=0.5,
        help="per batch size of the model alone, once per client count (default 0.5)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: with 2 on 2 busy cores, OpenMP's spin-waiting collapses)",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=128,
        help="transformer width (default 128; 0: a model that answers zeros at once, to measure "
        "what serving itself costs)",
    )
    parser.add_argument("--max-batch", type=int, default=defaults.max_batch)
    parser.add_argument("--max-wait-ms", type=float, default=defaults.max_wait_ms)
    parser.add_argument(
        "--server-cpus",
        type=lambda text: {int(n) for n in text.split(",")},
        default=set(),
        help="pin both servers' processes to these CPUs, comma-separated (Linux; default: none, "
        "the clients and the model alone are never pinned)",
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device of the model (default cpu; e.g. cuda)"
    )
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    roles = {
        "bench": main,
        "kill": kill,
        "policybench": policybench_server,
        "reference": reference_server,
        "client": client,
    }
    sys.exit(roles[arguments.role](arguments))
