"""Steps per second of an env in this process against the same env behind an env server in
another interpreter (policybench.envserver), in one run: MetaWorld with state observations
(the cheapest step we have: the worst case), PushT with 96x96 pixels, and LIBERO-PRO in its own
interpreter against LIBERO in this one, both at openpi's camera size (where both are installed).

Run from the repository root:  python bench/isolation.py  (about a minute; --rounds N,
--python PATH for the other interpreter, default this one, --only TEXT for some rows, and
--same-cpu or --split-cpus to pin both sides to one CPU or to different ones). Blocks of
steps alternate between the two envs so that a busy machine slows both alike; the ratio is the
median block's. The last columns say where the isolated step's extra time goes: a request that
does nothing (two pipe hops and two process wake-ups) and encoding plus decoding the step's
frames.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

from policybench.envserver import Interpreter, Isolated
from policybench.envserver import server as protocol

LIBERO_ROW = "libero-pro spatial_lan vs libero spatial (2 cameras)"
TARGETS = {"metaworld reach-v3 (state)": 0.90, "pusht (pixels 96x96)": 0.98, LIBERO_ROW: 0.99}
LIBERO_STEPS = 10  # a LIBERO step renders two cameras in software: about 0.2 s here


def cases(python: Path):
    from policybench.suites import metaworld, pusht

    other = Interpreter("bench", python=str(python))
    return {
        "metaworld reach-v3 (state)": (
            lambda: metaworld.SeededPlacement("reach-v3"),
            lambda: Isolated("policybench.suites.metaworld:SeededPlacement", other)("reach-v3"),
            lambda rng: rng.uniform(-1, 1, 4).astype(np.float32),
        ),
        "pusht (pixels 96x96)": (
            lambda: pusht.make_env(pusht.TASK),
            lambda: Isolated("policybench.suites.pusht:make_env", other)(pusht.TASK),
            lambda rng: rng.uniform(100, 400, 2),
        ),
        **libero_case(),
    }


def libero_case() -> dict:
    """LIBERO-PRO's libero_spatial_lan (LIBERO's scenes, instructions reworded) in its own
    interpreter against LIBERO's libero_spatial here, task 0 of each: none where either is
    not installed (it says which)."""
    from policybench.envserver.command import status
    from policybench.suites import registered_evals
    from policybench.suites.libero import task_id
    from policybench.suites.libero_pro import INTERPRETER

    evals = registered_evals()
    line = status(INTERPRETER)
    if not line.startswith("installed"):
        print(f"{LIBERO_ROW}: left out, LIBERO-PRO's interpreter is {line}")
        return {}
    try:
        import libero  # noqa: F401 - hf-libero, in this interpreter
    except ImportError as error:
        print(f"{LIBERO_ROW}: left out, LIBERO does not import here ({error})")
        return {}
    task = task_id(0)
    return {
        LIBERO_ROW: (
            lambda: evals["libero_spatial"].make_env(task),
            lambda: evals["libero_spatial_lan"].make_env(task),
            lambda rng: rng.uniform(-1, 1, 7),
        )
    }


def reset_options(name: str, seed: int) -> dict | None:
    """LIBERO's envs are reset to one of their task's init states (sim_env's rule)."""
    return {"init_state": seed % 50} if name == LIBERO_ROW else None


def block(env, actions: list[np.ndarray], seed: int, options: dict | None) -> tuple[float, float]:
    """Wall and CPU seconds `env` takes to step `actions` after a reset (not timed); the CPU
    time of an isolated env's server counts."""
    env.reset(seed=seed, options=options)
    started = time.perf_counter(), cpu_seconds(env)
    for action in actions:
        env.step(action)
    return time.perf_counter() - started[0], cpu_seconds(env) - started[1]


def cpu_seconds(env) -> float:
    """CPU time of this process, and of `env`'s server if it has one (Linux's schedstat)."""
    pid = getattr(env, "server_pid", None)
    server_ns = 0 if pid is None else int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return time.process_time() + server_ns / 1e9


def frame_cost(env, action: np.ndarray, options: dict | None, repeats: int = 2000) -> float:
    """Microseconds to pack and unpack one step's request and answer."""
    env.reset(seed=0, options=options)
    answer = {"ok": list(env.step(action))}  # as the server sends it
    request = {"op": "step", "action": action}
    codec = protocol.Codec()
    started = time.perf_counter()
    for _ in range(repeats):
        for message in (request, answer):
            frame = codec.pack(message)
            body_size, _ = protocol.HEADER.unpack_from(frame)
            codec.unpack(memoryview(frame)[protocol.HEADER.size :], body_size)
    return (time.perf_counter() - started) / repeats * 1e6


def ping(env, repeats: int = 2000) -> float:
    """Microseconds of a request the server answers without touching its env."""
    server = env._server
    started = time.perf_counter()
    for _ in range(repeats):
        server.request("hello", protocol=protocol.PROTOCOL)
    return (time.perf_counter() - started) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="blocks per env (default 15)")
    parser.add_argument("--steps", type=int, default=100, help="steps a block (default 100)")
    parser.add_argument("--python", type=Path, default=Path(sys.executable))
    parser.add_argument(
        "--only", default="", help="the rows whose env name holds this text (default: all)"
    )
    parser.add_argument(
        "--same-cpu",
        action="store_true",
        help="pin this process, and so the env servers it starts, to one CPU (Linux)",
    )
    parser.add_argument(
        "--split-cpus",
        action="store_true",
        help="pin this process to one CPU and the env servers to the others (Linux)",
    )
    args = parser.parse_args()
    cpus = os.sched_getaffinity(0) if args.same_cpu or args.split_cpus else set()
    if cpus:
        os.sched_setaffinity(0, {min(cpus)})
    servers_cpus = cpus - {min(cpus)} if args.split_cpus else set()
    print(f"command: {shlex.join(['python', *sys.argv])}")
    measured = cases(args.python)
    print(f"other interpreter: {args.python}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print()
    print(
        "| env | in-process steps/s | isolated steps/s | isolated / in-process | target "
        "| | CPU ratio | null request µs | frames µs | step µs (in-process) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name, (local, isolated, draw) in measured.items():
        if args.only not in name:
            continue
        envs = {"local": local(), "isolated": isolated()}
        if servers_cpus:
            os.sched_setaffinity(envs["isolated"].server_pid, servers_cpus)
        steps = LIBERO_STEPS if name == LIBERO_ROW else args.steps
        actions = [draw(rng) for _ in range(steps)]
        times: dict[str, list[tuple[float, float]]] = {"local": [], "isolated": []}
        rounds = min(args.rounds, 5) if name == LIBERO_ROW else args.rounds
        for round in range(rounds + 1):  # round 0 warms both up
            for kind, env in envs.items() if round % 2 else reversed(envs.items()):
                seconds = block(env, actions, round, reset_options(name, round))
                if round:
                    times[kind].append(seconds)
        local, isolated = (np.array(times[kind]) for kind in ("local", "isolated"))
        ratio, cpu_ratio = np.median(local / isolated, axis=0)
        local_rate, isolated_rate = (
            steps / np.median(local[:, 0]),
            steps / np.median(isolated[:, 0]),
        )
        target = TARGETS[name]
        verdict = "pass" if ratio >= target else "FAIL"
        null_us = ping(envs["isolated"])
        frames_us = frame_cost(envs["local"], actions[0], reset_options(name, 0))
        print(
            f"| {name} | {local_rate:.0f} | {isolated_rate:.0f} | {ratio:.3f} | ≥ {target} "
            f"| {verdict} | {cpu_ratio:.3f} | {null_us:.0f} | {frames_us:.0f} "
            f"| {1e6 / local_rate:.0f} |"
        )
        for env in envs.values():
            env.close()


if __name__ == "__main__":
    main()
