"""openpi's wire encoding: msgpack maps in which numpy arrays and scalars travel as tagged maps,
byte for byte as openpi's `msgpack_numpy` writes and reads them."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

NDARRAY, NPGENERIC = b"__ndarray__", b"__npgeneric__"
DATA, DTYPE, SHAPE = b"data", b"dtype", b"shape"
REFUSED_KINDS = {"O": "object", "V": "void", "c": "complex"}
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
# The most entries a map or a msgpack array of a frame may hold: observations are a few keys of
# arrays (which travel as bytes), not millions of Python objects.
MAX_MAP_ENTRIES, MAX_ARRAY_ITEMS = 1024, 1 << 16
# The most maps and lists a whole frame may build, counted as it decodes: an empty map is one
# byte on the wire and a Python dict of about 64 bytes in memory (a 56 MiB frame of them once
# took a server past 4 GiB); nesting is bounded by msgpack itself.
MAX_CONTAINERS = 1 << 16
# The most items all of a frame's lists and maps may hold together (a map's entry counts twice:
# key and value). A 2-character string is 3 bytes on the wire and about 60 in memory: a 60 MiB
# frame of them once decoded to 1.7 GiB. With this bound, what a frame decodes to is at most
# twice what it carries (its bytes, strings and array data, and a writable array's copy) plus
# about 32 MiB of Python objects.
MAX_ITEMS = 1 << 18
# The Python type a scalar's data must have, by its dtype's kind: `dtype.type(data)` of anything
# else may allocate what the data names (np.bytes_(2**30) is a GiB of zeros).
SCALAR_DATA = {
    "b": (bool,),
    "i": (int,),
    "u": (int,),
    "f": (float, int),
    "S": (bytes,),
    "U": (str,),
}
ACTIONS = "actions"  # the openpi protocol's answer key, `[H, D]`
SERVER_TIMING = "server_timing"  # what a server adds to each answer about its timing


class WireError(ValueError):
    """A frame that is not a valid openpi message (garbage, a refused dtype, too large)."""


def _check_dtype(dtype: np.dtype) -> None:
    kind = REFUSED_KINDS.get(dtype.kind)
    if kind is not None:
        raise WireError(
            f"numpy dtype {dtype} ({kind}) cannot travel over the openpi wire; "
            "send bool, integer, float, bytes or str arrays"
        )


def _pack_numpy(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        _check_dtype(value.dtype)
    if isinstance(value, np.ndarray):
        # msgpack copies a contiguous array's memory straight into the frame; no bytes in between.
        data = value.data if value.flags.c_contiguous else value.tobytes()
        return {NDARRAY: True, DATA: data, DTYPE: value.dtype.str, SHAPE: value.shape}
    if isinstance(value, np.generic):
        return {NPGENERIC: True, DATA: value.item(), DTYPE: value.dtype.str}
    raise TypeError(
        f"cannot send a {type(value).__name__} over the openpi wire; send numpy arrays, "
        "numbers, strings, bytes, lists and str-keyed maps"
    )


def _unpack_numpy(tagged: dict[Any, Any], writable: bool = True) -> Any:
    """A tagged map's array or scalar, no larger than the bytes the frame carried for it."""
    if NDARRAY in tagged:
        dtype, data, shape = _dtype_of(tagged), tagged[DATA], tagged[SHAPE]
        if not isinstance(data, bytes) or not _is_shape(shape):
            raise WireError("an __ndarray__ carries bytes as its data and integers as its shape")
        array = np.frombuffer(data, dtype=dtype).reshape(shape)
        return array.copy() if writable else array
    if NPGENERIC in tagged:
        dtype, data = _dtype_of(tagged), tagged[DATA]
        kinds = SCALAR_DATA.get(dtype.kind, ())
        if type(data) not in kinds or (dtype.kind in "SU" and len(data) > dtype.itemsize):
            raise WireError(
                f"an __npgeneric__ of dtype {dtype} carries a {type(data).__name__}; expected a "
                f"{' or '.join(kind.__name__ for kind in kinds) or 'known dtype'} of its size"
            )
        return dtype.type(data)
    return tagged


def _dtype_of(tagged: dict[Any, Any]) -> np.dtype:
    name = tagged.get(DTYPE)
    if not isinstance(name, str) or len(name) > 16:
        raise WireError(f"a numpy dtype travels as its short name ('<f4'), got {name!r:.40}")
    dtype = np.dtype(name)
    _check_dtype(dtype)
    return dtype


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, list | tuple) and all(type(size) is int for size in shape)


def _unpack_read_only(tagged: dict[Any, Any]) -> Any:
    return _unpack_numpy(tagged, writable=False)


def packb(message: Any) -> bytes:
    """One frame's bytes. Raises WireError for a refused dtype, TypeError for an unknown type."""
    return msgpack.packb(message, default=_pack_numpy)


def unpackb(
    frame: bytes, max_bytes: int | None = DEFAULT_MAX_FRAME_BYTES, *, writable: bool = True
) -> Any:
    """The message in a frame. Arrays are writable copies, or with `writable=False` read-only
    views of the bytes msgpack decoded (no copy; what openpi's own server hands its policy).
    Raises WireError, with what came and what was expected, for a frame over `max_bytes`, a
    frame that is not msgpack, or a malformed array."""
    if max_bytes is not None and len(frame) > max_bytes:
        raise WireError(
            f"frame of {len(frame)} bytes exceeds the limit of {max_bytes} bytes; "
            "send smaller observations or raise the limit"
        )
    hook = _unpack_numpy if writable else _unpack_read_only
    built = items = 0

    def counted(container: Any) -> Any:
        nonlocal built, items
        built += 1
        items += len(container) * (2 if isinstance(container, dict) else 1)
        if built > MAX_CONTAINERS:
            raise WireError(
                f"frame of {len(frame)} bytes holds more than {MAX_CONTAINERS} maps and lists; "
                "an observation is a few keys of arrays"
            )
        if items > MAX_ITEMS:
            raise WireError(
                f"frame of {len(frame)} bytes holds more than {MAX_ITEMS} items in its maps and "
                "lists; an observation is a few keys of arrays (send numbers as numpy arrays)"
            )
        return container

    try:
        return msgpack.unpackb(
            frame,
            object_hook=lambda tagged: hook(counted(tagged)),
            list_hook=counted,
            max_map_len=MAX_MAP_ENTRIES,
            max_array_len=MAX_ARRAY_ITEMS,
            max_ext_len=0,
        )
    except Exception as error:  # anything a hostile frame can make the decoder raise
        raise WireError(
            f"frame of {len(frame)} bytes is not an openpi msgpack message "
            f"({type(error).__name__}: {error})"
        ) from None


def actions_of(answer: Any) -> np.ndarray:
    """The `[H, D]` actions in a server's answer (one action `[D]` counts as a chunk of one)."""
    if not isinstance(answer, dict) or ACTIONS not in answer:
        got = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        raise WireError(f"a server answer must be a map with {ACTIONS!r}, got {got}")
    actions = np.asarray(answer[ACTIONS])
    if actions.ndim == 1:
        actions = actions[None]
    if actions.ndim != 2 or actions.dtype.kind not in "fiu" or len(actions) < 1:
        raise WireError(
            f"server answered {ACTIONS!r} of shape {actions.shape} and dtype {actions.dtype}; "
            "expected numbers of shape [H>=1, D]"
        )
    return actions
