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
    if NDARRAY in tagged:
        dtype = np.dtype(tagged[DTYPE])
        _check_dtype(dtype)
        array = np.frombuffer(tagged[DATA], dtype=dtype).reshape(tagged[SHAPE])
        return array.copy() if writable else array
    if NPGENERIC in tagged:
        dtype = np.dtype(tagged[DTYPE])
        _check_dtype(dtype)
        return dtype.type(tagged[DATA])
    return tagged


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
    try:
        hook = _unpack_numpy if writable else _unpack_read_only
        return msgpack.unpackb(frame, object_hook=hook)
    except WireError:
        raise
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as error:
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
