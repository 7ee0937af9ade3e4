"""The canonical, human-readable form of an Episode for golden comparison, and the comparison:
sim times and integers exactly, floats within a stated tolerance, images by a coarse digest.

Where an Eval's simulated values depend on the CPU's numerics (a controller that calls BLAS, whose
kernels OpenBLAS picks by CPU; a physics engine with CPU paths of its own), its golden states a
CpuNumerics tolerance: the observations and rewards are compared within it, their images within
a level or two of their coarse thumbnail, and everything the pipeline itself computes (timing,
commands, chunk playback, outcomes, integers) as before."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import Observation
from policybench.record.episode import Episode
from policybench.record.numerics import machine_numerics

FLOAT_TOLERANCE = 1e-6  # absolute, for every float in a trace (but where CpuNumerics applies)
IMAGE_MEAN_TOLERANCE = 0.5  # absolute, in 0..255 pixel units: renderer noise, not a moved camera
IMAGE_GRID = 8  # an image digest averages the image over an 8x8 grid of blocks ...
IMAGE_LEVELS = 16  # ... and quantizes each block's mean to 16 levels before hashing

# Statics that say which software made a trace rather than what happened in it: kept in the
# golden for the reader, never compared (an upgrade must fail on behaviour, not on a number).
NOT_COMPARED = (keys.TRACE_ABOUT,)
NUMERICS = "numerics"  # recorded_with: the machine's numerics (record.numerics)
CPU_TOLERANCE = "cpu_tolerance"  # a golden's statement of its CpuNumerics
LEVELS = "levels"  # an image digest's thumbnail levels, kept where a golden compares them
# Where a golden's CpuNumerics applies: a step's observation and reward (the simulator's numbers).
SIMULATED = (keys.OBSERVATION, keys.REWARD)
PIXEL = 1 / 255  # one level of an image held as numbers in [0, 1]


@dataclass(frozen=True)
class CpuNumerics:
    """How far an Eval's simulated values may move with the CPU's numerics, as measured (by
    `measured_by`) over the kernel families a machine can run: each float within `abs` plus
    `rel` of its size, each thumbnail block of an image within `image_levels` levels (and an
    image an env hands over as numbers in [0, 1], an entry named `*{image_suffix}`, each pixel
    within `image_levels` / 255)."""

    why: str
    abs: float
    rel: float = 0.0
    image_levels: int = 1
    measured_by: str = "python bench/golden_numerics.py"
    image_suffix: str = "image"

    def as_json(self) -> dict[str, Any]:
        return {
            "why": self.why,
            "abs": self.abs,
            "rel": self.rel,
            "image_levels": self.image_levels,
            "image_suffix": self.image_suffix,
            "applies_to": list(SIMULATED),
            "measured_by": self.measured_by,
        }


def image_digest(image: np.ndarray, levels: bool = False) -> dict[str, Any]:
    """Shape, mean and a hash of a coarse, quantized thumbnail of an HxWxC uint8 image (with
    `levels`, the thumbnail itself too: one hex digit a block and channel)."""
    height, width = image.shape[:2]
    rows = np.array_split(np.arange(height), IMAGE_GRID)
    cols = np.array_split(np.arange(width), IMAGE_GRID)
    pixels = image.astype(np.float64)
    blocks = np.array(
        [[pixels[np.ix_(r, c)].mean(axis=(0, 1)) for c in cols] for r in rows]
    )  # [grid, grid, C]
    quantized = np.floor(blocks / 256.0 * IMAGE_LEVELS).astype(np.uint8)
    digest = {
        "shape": list(image.shape),
        "mean": round(float(pixels.mean()), 3),
        "coarse": hashlib.blake2b(quantized.tobytes(), digest_size=8).hexdigest(),
    }
    if levels:
        digest[LEVELS] = "".join(f"{level:x}" for level in quantized.reshape(-1))
    return digest


def is_image(value: Any) -> bool:
    """Whether an observation entry is an image: HxWxC (or CxHxW) uint8."""
    array = np.asarray(value)
    return array.dtype == np.uint8 and array.ndim == 3


def canonical_value(value: Any, levels: bool = False) -> Any:
    """A JSON value for an observation entry: images digested (with `levels`, their thumbnail
    kept), arrays as float lists."""
    array = np.asarray(value)
    if is_image(array):
        return image_digest(array, levels)
    if array.dtype.kind == "b":
        return array.tolist()
    if array.dtype.kind in "iu":
        return array.astype(int).tolist()
    return array.astype(float).tolist()


@dataclass
class TraceRecorder:
    """A harness observer that keeps the canonical form of every observation as it happens."""

    observations: list[dict[str, Any]] = field(default_factory=list)
    levels: bool = False  # keep images' thumbnails (a golden under CpuNumerics compares them)

    def __call__(self, time_ns: int, obs: Observation) -> None:
        self.observations.append(
            {name: canonical_value(obs[name], self.levels) for name in sorted(obs)}
        )

    def restart(self) -> None:
        """Forgets what it kept: the rollout runs again from its start."""
        self.observations.clear()


def canonical_trace(
    episode: Episode,
    observations: Sequence[Mapping[str, Any]] = (),
    waypoints: Mapping[int, Any] | None = None,
    calls: bool = False,
    numerics: CpuNumerics | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """The readable record a golden stores: statics, outcome, model calls and every step.

    `observations` are a TraceRecorder's, one per step; `waypoints` (sim time -> which chunk
    waypoint played then) and, with `calls`, the episode's model calls pin chunk timing;
    `numerics`: the tolerance of an Eval whose simulated values depend on the CPU (stated in the
    golden, with the machine's numerics recorded beside its packages: those of the numpy of
    `python`, the interpreter the env ran in, where it ran in another).
    """
    statics = {k: v for k, v in episode.statics.items() if k != keys.PACKAGES}
    steps = []
    for index, step in enumerate(episode.trace):
        entry: dict[str, Any] = {
            keys.TIME_NS: step.time_ns,
            keys.COMMAND: np.asarray(step.command, dtype=float).tolist(),
            keys.REWARD: float(step.reward),
            keys.SUCCESS: bool(step.success),
        }
        if index < len(observations):
            entry[keys.OBSERVATION] = observations[index]
        if waypoints is not None:
            entry[keys.WAYPOINT] = waypoints.get(step.time_ns)
        steps.append(entry)
    about: dict[str, Any] = {keys.PACKAGES: episode.statics.get(keys.PACKAGES, {})}
    stated = {}
    if numerics is not None:
        about[NUMERICS] = machine_numerics(python)
        stated[CPU_TOLERANCE] = numerics.as_json()
    return {
        keys.TRACE_ABOUT: about,
        **stated,
        keys.TRACE_STATICS: statics,
        keys.TRACE_RESULT: {
            keys.OUTCOME: episode.outcome.kind.value,
            keys.REASON: episode.outcome.reason,
            keys.STEPS: episode.steps,
            keys.SUCCESS_STEP: episode.success_step,
        },
        keys.TRACE_CALLS: [
            {"asked_ns": c.asked_ns, "arrives_ns": c.arrives_ns, "horizon": c.horizon}
            for c in (episode.calls if calls else ())
        ],
        keys.TRACE_STEPS: steps,
    }


@dataclass(frozen=True)
class Difference:
    path: str
    expected: Any
    actual: Any


def differences(expected: Any, actual: Any, tolerance: float = FLOAT_TOLERANCE) -> list[Difference]:
    """Every leaf where `actual` differs from `expected`, in document order; where `expected`
    states a CpuNumerics tolerance, its simulated values are compared within it."""
    found: list[Difference] = []
    stated = expected.get(CPU_TOLERANCE) if isinstance(expected, Mapping) else None
    _walk(expected, actual, "", tolerance, found, stated if isinstance(stated, Mapping) else None)
    return found


def _walk(
    expected: Any,
    actual: Any,
    path: str,
    tolerance: float,
    found: list[Difference],
    cpu: Mapping[str, Any] | None,
    simulated: bool = False,
) -> None:
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        if simulated and cpu is not None and LEVELS in expected and LEVELS in actual:
            _walk_image(expected, actual, path, found, int(cpu.get("image_levels", 0)))
            return
        for name in [*expected, *(k for k in actual if k not in expected)]:
            if path == "" and name in NOT_COMPARED:
                continue
            child = f"{path}.{name}" if path else str(name)
            if name not in expected or name not in actual:
                found.append(
                    Difference(child, expected.get(name, "<absent>"), actual.get(name, "<absent>"))
                )
            else:
                inside = simulated or (
                    path.startswith(f"{keys.TRACE_STEPS}[") and name in SIMULATED
                )
                if inside and cpu is not None and _pixels(cpu, name, expected[name]):
                    _walk_pixels(expected[name], actual[name], child, found, cpu)
                    continue
                _walk(
                    expected[name],
                    actual[name],
                    child,
                    _tolerance_for(name, tolerance),
                    found,
                    cpu,
                    inside,
                )
    elif isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            found.append(Difference(f"{path}.length", len(expected), len(actual)))
        for index, (a, b) in enumerate(zip(expected, actual, strict=False)):
            _walk(a, b, f"{path}[{index}]", tolerance, found, cpu, simulated)
    elif _is_float_pair(expected, actual):
        if simulated and cpu is not None and not path.endswith(".mean"):
            allowed = float(cpu.get("abs", 0.0)) + float(cpu.get("rel", 0.0)) * abs(expected)
        else:
            allowed = tolerance
        if not (math.isclose(expected, actual, rel_tol=0.0, abs_tol=allowed) or expected == actual):
            found.append(Difference(path, expected, actual))
    elif type(expected) is not type(actual) or expected != actual:
        found.append(Difference(path, expected, actual))


def _pixels(cpu: Mapping[str, Any], name: str, value: Any) -> bool:
    """Whether an observation entry is an image handed over as numbers (not digested)."""
    suffix = cpu.get("image_suffix")
    return bool(suffix) and str(name).endswith(str(suffix)) and isinstance(value, list)


def _walk_pixels(
    expected: Any, actual: Any, path: str, found: list[Difference], cpu: Mapping[str, Any]
) -> None:
    """An image held as numbers in [0, 1] (channels first or last): its shape exactly, and its
    coarse thumbnail (the mean of each block of an IMAGE_GRID x IMAGE_GRID grid) within the
    stated levels (one level is 1/255): a state that moved a little moves an edge by a fraction
    of a pixel, which changes single pixels by many levels and a block's mean by a fraction of
    one."""
    a, b = np.asarray(expected, dtype=float), np.asarray(actual, dtype=float)
    if a.shape != b.shape:
        found.append(Difference(f"{path}.shape", list(a.shape), list(b.shape)))
        return
    allowed = int(cpu.get("image_levels", 0)) * PIXEL + 1e-9
    apart = np.abs(thumbnail(a) - thumbnail(b))
    if apart.size and apart.max() > allowed:
        block = np.unravel_index(int(np.argmax(apart)), apart.shape)
        where = f"{path}.block{list(map(int, block))}"
        found.append(Difference(where, float(thumbnail(a)[block]), float(thumbnail(b)[block])))


def thumbnail(image: np.ndarray) -> np.ndarray:
    """The mean of each block of an IMAGE_GRID x IMAGE_GRID grid over an image's two largest
    axes (its height and width), per channel."""
    if image.ndim < 2:
        return image
    rows, cols = sorted(np.argsort(image.shape)[-2:])
    moved = np.moveaxis(image, (rows, cols), (-2, -1))
    r = np.array_split(np.arange(moved.shape[-2]), IMAGE_GRID)
    c = np.array_split(np.arange(moved.shape[-1]), IMAGE_GRID)
    return np.stack(
        [np.stack([moved[..., i, :][..., j].mean(axis=(-2, -1)) for j in c], -1) for i in r], -2
    )


def _walk_image(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    path: str,
    found: list[Difference],
    levels: int,
) -> None:
    """An image digest under CpuNumerics: its shape exactly, its mean within the image tolerance,
    each thumbnail block within `levels` levels (its hash, of the exact levels, not compared)."""
    if expected.get("shape") != actual.get("shape"):
        found.append(Difference(f"{path}.shape", expected.get("shape"), actual.get("shape")))
    mean_a, mean_b = expected.get("mean"), actual.get("mean")
    if _is_float_pair(mean_a, mean_b) and abs(mean_a - mean_b) > IMAGE_MEAN_TOLERANCE:
        found.append(Difference(f"{path}.mean", mean_a, mean_b))
    was, now = str(expected[LEVELS]), str(actual[LEVELS])
    apart = (
        max((abs(int(a, 16) - int(b, 16)) for a, b in zip(was, now, strict=True)), default=0)
        if len(was) == len(now)
        else None
    )
    if apart is None or apart > levels:
        found.append(Difference(f"{path}.{LEVELS}", was, now))


def _tolerance_for(name: str, tolerance: float) -> float:
    return IMAGE_MEAN_TOLERANCE if name == "mean" else tolerance


def _is_float_pair(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and (isinstance(a, float) or isinstance(b, float))
    )


def describe_differences(found: Sequence[Difference], limit: int = 12) -> list[str]:
    """A short, readable account: the first differing step and field, and how many steps differ."""
    if not found:
        return []
    step_indices = sorted({_step_of(d.path) for d in found} - {None})
    lines = []
    if step_indices:
        first = step_indices[0]
        lines.append(
            f"golden differs at {len(step_indices)} step(s); first differing step: {first}"
        )
    other = [d for d in found if _step_of(d.path) is None]
    if other:
        lines.append(f"{len(other)} difference(s) outside the steps")
    for difference in found[:limit]:
        lines.append(
            f"  {difference.path}: expected {_short(difference.expected)}, "
            f"got {_short(difference.actual)}"
        )
    if len(found) > limit:
        lines.append(f"  ... and {len(found) - limit} more differing value(s)")
    return lines


def _step_of(path: str) -> int | None:
    prefix = f"{keys.TRACE_STEPS}["
    if not path.startswith(prefix):
        return None
    return int(path[len(prefix) : path.index("]")])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
