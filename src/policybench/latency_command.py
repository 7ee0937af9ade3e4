"""`policybench latency record`: a served policy's call latencies, measured over the openpi wire
with observations the size an Eval sends, written as a latency profile (`profile:FILE`)."""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from policybench import envserver, keys
from policybench.envserver import remote
from policybench.options import (
    INFER_TIMEOUT,
    POLICY_API_KEY,
    POLICY_URL,
    SEED,
    SERVER_WAIT,
    api_key,
    declare_env_url,
)
from policybench.policy.base import Observation, SessionContext, release
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency_profile import LatencyProfile, profile_content
from policybench.preflight import describe_value
from policybench.probe import _check_installed, _first_rollout
from policybench.registry import OPENPI, PolicySettings, build_policy
from policybench.serve.client import (
    Endpoint,
    RemotePolicyError,
    RemoteUnavailable,
    without_secrets,
)
from policybench.serve.wire import packb
from policybench.spec import Eval
from policybench.suites import eval_named
from policybench.world import World

# What a recorded profile says of where its latencies came from (its `recorded` object).
URL, AT, CALLS, WARMUP = "url", "at", "calls", "warmup_calls"
OBSERVATION, FRAME_BYTES, DRAWS_FROM = "observation", "frame_bytes", "draws_from"
ROUND_TRIP_S, SERVER_TIMING_S = "round_trip_s", "server_timing_s"
INFER_MS = "infer_ms"  # openpi's server_timing entry for the model call itself
MICROSECONDS = 6  # decimals of a second a latency is kept to


class Timing(StrEnum):
    """What a recorded profile draws from: the client's round trip (what a robot waits for:
    network, encoding, queueing and the model), or the server's own model time."""

    ROUND_TRIP = "round_trip"
    SERVER_TIMING = "server_timing"


@dataclass(frozen=True)
class Recording:
    """The latencies of one recording's calls, in seconds (server_timing: None where the server
    did not report it)."""

    round_trip_s: tuple[float, ...]
    server_timing_s: tuple[float | None, ...]
    wall_s: float


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    latency = subparsers.add_parser(
        "latency", help="latency profiles: record a served policy's call latencies"
    )
    actions = latency.add_subparsers(dest="latency_command", required=True)
    parser = actions.add_parser(
        "record",
        help="call a policy server for a while with an Eval's observations and write the "
        "latencies as a profile for --inference-latency profile:FILE",
    )
    parser.add_argument(
        "--eval",
        required=True,
        metavar="EVAL",
        help="the Eval whose observations (through its openpi codec) are sent: a registered name "
        "(see `policybench list`) or module:attribute",
    )
    POLICY_URL.declare(parser.add_argument)
    POLICY_API_KEY.declare(parser.add_argument)
    INFER_TIMEOUT.declare(parser.add_argument)
    SERVER_WAIT.declare(parser.add_argument, default=0.0)
    SEED.declare(parser.add_argument)
    declare_env_url(parser.add_argument)
    parser.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="how long to call the server, one call at a time (default 60)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        metavar="N",
        help="calls made first and left out of the profile (a first call may compile) (default 1)",
    )
    parser.add_argument(
        "--draw-from",
        type=Timing,
        choices=list(Timing),
        default=Timing.ROUND_TRIP,
        help="which latencies the profile draws from: round_trip (default; what the robot waits "
        "for) or server_timing (the server's reported model time, openpi's infer_ms)",
    )
    parser.add_argument(
        "-o", "--out", type=Path, required=True, metavar="FILE", help="the profile file to write"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.seconds > 0 or args.warmup < 0:
        raise SystemExit(
            f"policybench latency record: --seconds must be > 0 and --warmup >= 0; got "
            f"{args.seconds:g} and {args.warmup}"
        )
    try:
        eval = eval_named(args.eval)
        endpoint = Endpoint(
            args.policy_url,
            api_key(args.policy_api_key),
            args.infer_timeout,
            server_wait_s=args.server_wait,
        )
    except (LookupError, ValueError) as error:
        raise SystemExit(f"policybench latency record: {error}") from None
    _check_installed(eval)
    eval_ref = args.eval if ":" in args.eval else None
    envserver.say_builds_nothing("latency record", args.env_url, [eval])
    with remote.given(args.env_url, args.env_api_key):
        policy, observation, context = _observation(eval, endpoint, args.seed, eval_ref)
    print(
        f"recording {endpoint.shown} for {args.seconds:g} s with {eval.name}'s observations "
        f"({_sizes(observation)})"
    )
    try:
        recording = record(policy, context, observation, args.seconds, args.warmup)
    except (RemoteUnavailable, RemotePolicyError, TimeoutError, ConnectionError) as error:
        raise SystemExit(f"policybench latency record: {error}") from None
    content = profile_content(
        _drawn(recording, args.draw_from), _recorded(recording, endpoint, eval, observation, args)
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(content, indent=1) + "\n")
    profile = LatencyProfile.load(args.out)
    print(_summary(recording))
    print(
        f"wrote {args.out}: {len(profile.sample_s)} {args.draw_from.value} latencies, digest "
        f"{profile.digest}; run with --inference-latency profile:{args.out}"
    )
    return 0


def record(
    policy: ChunkPolicy,
    context: SessionContext,
    observation: Observation,
    seconds: float,
    warmup: int = 1,
) -> Recording:
    """Calls `policy`'s served model with `observation`, one call at a time, `warmup` times and
    then for `seconds` (at least once), on one connection: each call's round trip and the
    server's reported model time."""
    source = policy.model.open(context)
    round_trips: list[float] = []
    server_times: list[float | None] = []
    try:
        for _ in range(warmup):
            source(observation)
        started = time.perf_counter()
        while not round_trips or time.perf_counter() - started < seconds:
            sent = time.perf_counter()
            source(observation)
            round_trips.append(round(time.perf_counter() - sent, MICROSECONDS))
            server_times.append(_infer_s(getattr(source, "server_timing", None)))
        wall_s = time.perf_counter() - started
    finally:
        release(source)
    return Recording(tuple(round_trips), tuple(server_times), wall_s)


def _observation(
    eval: Eval, endpoint: Endpoint, seed: int, eval_ref: str | None
) -> tuple[ChunkPolicy, Observation, SessionContext]:
    """The served policy as a run plays it, the first planned scene's first observation as the
    Eval's openpi codec sends it, and the context a rollout of it connects with."""
    rollout = _first_rollout(eval, None, seed)
    world = World(eval)
    try:
        settings = PolicySettings(seed, endpoint=endpoint)
        action_space = lambda: world.env_for(rollout.scene.task).action_space  # noqa: E731
        policy = build_policy(OPENPI, eval, settings, action_space, eval_ref)
        obs = world.reset(rollout.scene)
    except (LookupError, ValueError) as error:
        raise SystemExit(f"policybench latency record: {error}") from None
    finally:
        world.close()
    assert isinstance(policy, ChunkPolicy)
    context = SessionContext(
        rollout.instruction,
        eval.control_hz,
        {name: rollout.scene.fields[name] for name in eval.policy_facing},
    )
    return policy, policy.codec.encode(obs, rollout.instruction), context


def _infer_s(timing: dict[str, Any] | None) -> float | None:
    value = None if timing is None else timing.get(INFER_MS)
    return round(float(value) / 1e3, MICROSECONDS) if isinstance(value, int | float) else None


def _drawn(recording: Recording, timing: Timing) -> tuple[float, ...]:
    if timing is Timing.ROUND_TRIP:
        return recording.round_trip_s
    reported = [value for value in recording.server_timing_s if value is not None]
    if len(reported) < len(recording.server_timing_s):
        raise SystemExit(
            f"policybench latency record: --draw-from server_timing, but the server reported "
            f"its model time ({Timing.SERVER_TIMING.value}.{INFER_MS}) for "
            f"{len(reported)} of {len(recording.server_timing_s)} calls; draw from round_trip"
        )
    return tuple(reported)


def _recorded(
    recording: Recording,
    endpoint: Endpoint,
    eval: Eval,
    observation: Observation,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Where the latencies came from: the URL (no password, query or key), when, how long, how
    many calls, what was sent, and both timings."""
    parts = urlsplit(without_secrets(endpoint.url))
    return {
        URL: urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
        AT: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        keys.EVAL: eval.name,
        keys.WALL_S: round(recording.wall_s, 3),
        CALLS: len(recording.round_trip_s),
        WARMUP: args.warmup,
        OBSERVATION: {name: describe_value(value) for name, value in observation.items()},
        FRAME_BYTES: len(packb(observation)),
        DRAWS_FROM: args.draw_from.value,
        ROUND_TRIP_S: list(recording.round_trip_s),
        SERVER_TIMING_S: (
            None
            if all(value is None for value in recording.server_timing_s)
            else list(recording.server_timing_s)
        ),
    }


def _sizes(observation: Observation) -> str:
    shown = ", ".join(f"{name} {describe_value(value)}" for name, value in observation.items())
    return f"{shown}; {len(packb(observation))} bytes a frame"


def _summary(recording: Recording) -> str:
    lines = [f"{len(recording.round_trip_s)} calls in {recording.wall_s:.1f} s"]
    rows: Sequence[tuple[str, Sequence[float | None]]] = (
        (Timing.ROUND_TRIP.value, recording.round_trip_s),
        (Timing.SERVER_TIMING.value, recording.server_timing_s),
    )
    for name, values in rows:
        known = [value for value in values if value is not None]
        if not known:
            lines.append(f"  {name}: not reported by the server")
            continue
        p50, p95, p99 = np.percentile(np.asarray(known) * 1e3, [50, 95, 99])
        lines.append(f"  {name}: p50 {p50:.2f} ms, p95 {p95:.2f} ms, p99 {p99:.2f} ms")
    return "\n".join(lines)
