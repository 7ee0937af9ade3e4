"""A rollout's compact trace, what its report page plots: actions, rewards, success and sim time
per step, its model calls and which chunk waypoint each step played, and small state vectors.

One JSON document per rollout; its arrays (a row per dimension; float32, sim times float64, state
vectors float16, or float64 where a run compares them exactly) are little-endian, zlib'd and
base64'd, so the page embeds the file as it is and the browser inflates it (DecompressionStream).
Budget: TRACE_BUDGET_PER_1000_STEPS.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import ModelCall, Observation, control_period_ns
from policybench.record.episode import Episode
from policybench.record.trace import is_image
from policybench.run.files import (
    DECODED_LIMIT,
    TRACE_LIMIT,
    loads,
    make_folders,
    read_text,
    write_file,
)

FORMAT = "policybench-rollout-trace/1"
STATE_CAP = 64  # an observation entry of more numbers than this (an image, say) is not kept
# What a trace may cost, per 1,000 steps, with its state vectors (bench/trace_cost.py measures).
TRACE_BUDGET_PER_1000_STEPS = 64 * 1024
NO_CHUNK = -1  # a step not played from a chunk's waypoint: the hold, or a policy without calls
EXPERT_ACTION = "expert_action"  # a row per action dimension: the Eval's expert's, step by step
# The file of the observations kept for the Eval's expert to replay (record/shadow.py), its name
# in the run's folder; a diagnosis that replays them adds EXPERT_ACTION to the trace.
KEPT_OBSERVATIONS = "kept_observations"
MOTION = "motion"  # motion/<image>: the image's mean absolute change from the step before
MOTION_RUN, MOTION_EVERY = 64, 4  # motion reads one run of 64 bytes of an image's in every 4


@dataclass
class StateRecorder:
    """A harness observer that keeps a float32 copy (float64 where `precise`) of each small
    numeric observation entry; what it leaves out (images, long vectors) it names with the
    reason."""

    cap: int = STATE_CAP
    precise: bool = False
    states: dict[str, list[np.ndarray]] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    seen: int = 0
    # Per image entry, each step's mean absolute change from the step before (0 at the first):
    # all zeros is a camera that never shows anything happen.
    motion: dict[str, list[float]] = field(default_factory=dict)
    _last_image: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _layout: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def __call__(self, time_ns: int, obs: Observation) -> None:
        for name, value in obs.items():
            if is_image(value):
                self._moved(name, np.asarray(value))
            if name in self.left_out:
                continue
            kept = self.states.get(name)
            if kept is None:
                why = _why_not_kept(value, self.cap)
                if why is not None:
                    self.left_out[name] = why
                    continue
                kept = self.states[name] = [np.zeros(np.size(value), self.dtype)] * self.seen
            kept.append(np.asarray(value, dtype=self.dtype).reshape(-1))
        self.seen += 1

    @property
    def dtype(self) -> type:
        return np.float64 if self.precise else np.float32

    def restart(self) -> None:
        """Forgets what it kept: the rollout runs again from its start."""
        self.states.clear()
        self.left_out.clear()
        self.motion.clear()
        self._last_image.clear()
        self._layout.clear()
        self.seen = 0

    def _moved(self, name: str, image: np.ndarray) -> None:
        # Bytes in the order they lie in memory (an env's image is often a transposed view), a
        # run of MOTION_RUN in every MOTION_EVERY: walking the whole image each step took the
        # env's own data out of the caches and slowed its steps (PushT: 8% a rollout, against
        # 1% sampled), while a frozen image still reads exactly 0.
        pixels = image.ravel(order="K")
        if pixels.size % MOTION_RUN == 0 and pixels.size >= MOTION_RUN * MOTION_EVERY:
            pixels = pixels.reshape(-1, MOTION_RUN)[::MOTION_EVERY]
        last = self._last_image.get(name)
        kept = self.motion.setdefault(name, [0.0] * self.seen)
        if last is None or last.shape != pixels.shape or self._layout.get(name) != image.strides:
            kept.append(0.0)
            self._last_image[name] = pixels.copy()
            self._layout[name] = image.strides
            return
        high = np.maximum(pixels, last)  # |a - b| of uint8 as max - min: nothing wider, exact
        np.minimum(pixels, last, out=last)
        np.subtract(high, last, out=high)
        wide = np.uint32 if high.size < 2**24 else np.uint64  # 255 a pixel cannot overflow it
        kept.append(float(np.add.reduce(high, axis=None, dtype=wide)) / high.size)
        np.copyto(last, pixels)


def _why_not_kept(value: Any, cap: int) -> str | None:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        return f"not numbers (dtype {array.dtype})"
    if array.ndim > 1:
        return f"shape {list(array.shape)} is not a vector"
    if array.size > cap:
        return f"{array.size} numbers, over the cap of {cap}"
    return None


def chunk_sources(
    calls: Sequence[ModelCall], times_ns: Sequence[int], period_ns: int, anchor: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the call whose chunk it played and the waypoint's index in it (NO_CHUNK: the
    hold). Derived as a ChunkPlayer plays: the newest arrived chunk, its waypoints one control
    period apart from its anchor (the observation it was asked from, or its arrival); on the
    step it lands, the latest waypoint due plays even if all are past."""
    chunk = np.full(len(times_ns), NO_CHUNK, np.int32)
    waypoint = np.full(len(times_ns), NO_CHUNK, np.int32)
    current, landed = NO_CHUNK, False
    for step, time_ns in enumerate(times_ns):
        while current + 1 < len(calls) and calls[current + 1].arrives_ns <= time_ns:
            current, landed = current + 1, True
        if current == NO_CHUNK:
            continue
        call = calls[current]
        start = call.arrives_ns if anchor == "arrival" else call.asked_ns
        index = (time_ns - start) // period_ns
        if landed:
            index, landed = min(max(index, 0), call.horizon - 1), False
        if 0 <= index < call.horizon:
            chunk[step], waypoint[step] = current, index
    return chunk, waypoint


def rollout_trace(
    episode: Episode,
    states: StateRecorder | None = None,
    state_names: Mapping[str, Mapping[int, str]] | None = None,
    precise: bool = False,
) -> dict[str, Any]:
    """The trace document of `episode` (states from the recorder that watched it, if any;
    `state_names`: per observation entry, the names its Eval gives some of its numbers;
    `precise`: state vectors at full precision, for a run that compares trajectories number
    for number: drift between pin sets)."""
    statics = episode.statics
    steps = len(episode.trace)
    period_ns = control_period_ns(statics[keys.CONTROL_HZ]) if keys.CONTROL_HZ in statics else 1
    times = [step.time_ns for step in episode.trace]
    policy = statics.get(keys.POLICY) or {}
    anchor = policy.get(keys.CHUNK_ANCHOR)
    chunk, waypoint = chunk_sources(episode.calls, times, period_ns, anchor)
    dims = int(np.size(episode.trace[0].command)) if steps else 0
    exact = np.float64 if precise else np.float32  # the commands as played, where compared
    actions = np.asarray([s.command for s in episode.trace], exact).reshape(steps, dims)
    calls = episode.calls
    arrays = {
        "time_s": np.asarray(times, np.float64) / 1e9,
        "action": actions.T,  # a row per action dimension
        keys.REWARD: np.asarray([s.reward for s in episode.trace], np.float32),
        keys.SUCCESS: np.asarray([s.success for s in episode.trace], np.uint8),
        "chunk": chunk,
        keys.WAYPOINT: waypoint,
        "call_asked_s": np.asarray([c.asked_ns for c in calls], np.float64) / 1e9,
        keys.CALL_LATENCY_MS: np.asarray([c.arrives_ns - c.asked_ns for c in calls], np.float32)
        / 1e6,
        "call_horizon": np.asarray([c.horizon for c in calls], np.int32),
        "call_wall_ms": np.asarray([c.wall_ns for c in calls], np.float32) / np.float32(1e6),
    }
    left_out = _watched(arrays, states, steps, precise)
    bounds = episode.action_bounds
    return {
        "format": FORMAT,
        keys.STEPS: steps,
        "period_s": period_ns / 1e9,
        keys.CHUNK_ANCHOR: anchor,
        "action_low": None if bounds is None else _floats(bounds[0]),
        "action_high": None if bounds is None else _floats(bounds[1]),
        keys.SUCCESS_STEP: episode.success_step,
        "state_left_out": left_out,
        "state_names": {
            entry: {str(i): name for i, name in sorted(named.items())}
            for entry, named in sorted((state_names or {}).items())
            if named and f"state/{entry}" in arrays
        },
        "arrays": {name: encode_array(array) for name, array in arrays.items()},
    }


def _watched(
    arrays: dict[str, np.ndarray],
    states: StateRecorder | None,
    steps: int,
    precise: bool = False,
) -> dict[str, str]:
    """Adds to `arrays` what watched the rollout kept (state vectors, images' motion) for its
    `steps`; what it could not keep, by name, with the reason."""
    left_out: dict[str, str] = {}
    if states is not None:
        left_out.update(states.left_out)
        for name, kept in sorted(states.states.items()):
            if len(kept) < steps:
                left_out[name] = f"seen at {len(kept)} of {steps} steps"
            elif steps:  # half precision (a plot's, and half the bytes) unless asked
                dtype = np.float64 if precise else np.float16
                arrays[f"state/{name}"] = np.stack(kept[:steps]).T.astype(dtype)
        for name, moved in sorted(states.motion.items()):
            if len(moved) >= steps and steps:
                arrays[f"{MOTION}/{name}"] = np.asarray(moved[:steps], np.float16)
    return left_out


def _floats(values: np.ndarray) -> list[float | None]:
    """Bounds as JSON numbers; an unbounded side (inf) as null."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, float).reshape(-1)]


# The dtypes a trace's arrays may have (a name outside them is refused, never parsed).
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")  # fmt: skip


def encode_array(array: np.ndarray) -> dict[str, Any]:
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    packed = zlib.compress(np.ascontiguousarray(little).tobytes(), 6)
    return {
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "zlib": base64.b64encode(packed).decode("ascii"),
    }


def decode_array(entry: Mapping[str, Any], budget: list[int] | None = None) -> np.ndarray:
    """An encoded array, decompressed to no more than its shape and dtype say (and, given a
    `budget` of bytes left, no more than it: a zlib bomb is refused, not inflated)."""
    if entry["dtype"] not in DTYPES:
        allowed = ", ".join(DTYPES)
        raise ValueError(f"an array's dtype must be one of {allowed}, got {entry['dtype']!r}")
    dtype = np.dtype(entry["dtype"]).newbyteorder("<")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"an array's shape must be a list of sizes, got {shape!r}")
    size = dtype.itemsize * math.prod(shape)
    if budget is not None:
        if size > budget[0]:
            raise ValueError(f"its arrays would decode to over {DECODED_LIMIT:,} bytes")
        budget[0] -= size
    inflater = zlib.decompressobj()
    raw = inflater.decompress(base64.b64decode(entry["zlib"]), size + 1)
    if len(raw) != size or inflater.unconsumed_tail:
        raise ValueError(
            f"an array of shape {shape} and dtype {dtype.name} holds other than {size:,} bytes"
        )
    return np.frombuffer(raw, dtype).reshape(shape)


def write_trace(path: Path, trace: Mapping[str, Any]) -> int:
    """Writes the trace document; returns its size in bytes."""
    make_folders(path.parent.parent, path.parent.name)
    text = json.dumps(trace, separators=(",", ":"))
    write_file(path, text, encoding="ascii")
    return len(text)


def add_expert_actions(path: Path, actions: np.ndarray | None, why_not: str | None) -> None:
    """Adds the Eval's expert's `actions` (a row per step, replayed after the run) to the trace
    at `path`, or, given none, `why_not` among what it left out; rewritten whole."""
    document = loads(read_text(path, TRACE_LIMIT, encoding="ascii"), str(path))
    steps, dims = document[keys.STEPS], document["arrays"]["action"]["shape"][0]
    if actions is not None and actions.shape == (steps, dims):
        document["arrays"][EXPERT_ACTION] = encode_array(actions.T)
    else:
        found = "" if actions is None else f"its actions are {list(actions.shape)}, "
        said = why_not or f"{found}not {steps} steps of {dims}"
        document["state_left_out"][EXPERT_ACTION] = f"the expert's replay: {said}"
    write_trace(path, document)


def read_trace(path: Path, wanted: str = "") -> dict[str, Any]:
    """A trace document with its arrays decoded (those whose names start with `wanted`: the
    others left out, not inflated); ValueError naming the file if it is not one."""
    try:
        document = loads(read_text(path, TRACE_LIMIT, encoding="ascii"), str(path))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} is not a readable rollout trace: {error}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(
            f"{path} is not a rollout trace of format {FORMAT!r} (found {found!r}); it was "
            "written by another policybench version, or is another file"
        )
    budget = [DECODED_LIMIT]
    try:
        arrays = {
            name: decode_array(entry, budget)
            for name, entry in document["arrays"].items()
            if name.startswith(wanted)
        }
    except (KeyError, TypeError, AttributeError, ValueError, zlib.error) as error:
        raise ValueError(f"{path} holds an array that cannot be read: {error}") from None
    return {**document, "arrays": arrays}
