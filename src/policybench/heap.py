"""What a process' C heap gives back when envs close.

glibc's malloc serves a large buffer from a mapping of its own, returned to the system when
freed, but raises that threshold to the size of each such buffer freed (up to 32 MiB); from then
on buffers of that size come from the heap, and what they leave there when freed stays in the
process. A process that builds, closes and builds again big simulators (a LIBERO env holds over
a GB of models, textures and render buffers) then holds the fragments of each. A fixed threshold
keeps large buffers in mappings of their own; `trim` returns the heap's free pages after a
close. With another C library both do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import mmap

import numpy as np

M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, kept fixed


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    libc = ctypes.CDLL(None)  # the C library this process runs on
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    if hasattr(libc, "madvise"):
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return libc


@functools.cache
def keep_large_buffers_apart() -> bool:
    """Fixes malloc's mmap threshold for the rest of the process (once per process); True when
    the C library took it."""
    libc = _glibc()
    return libc is not None and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1


def trim() -> None:
    """Returns the heap's free pages to the system."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


MADV_DONTNEED = 4  # madvise's advice number on Linux: the pages read as zeros from now on
PAGE_BYTES = mmap.PAGESIZE


def release(array: np.ndarray) -> int:
    """Gives the memory pages lying wholly inside `array` back to the system, for a buffer that
    will not be read again (its pages read as zeros afterwards); returns the bytes released. Only
    for private, anonymous memory, as malloc's; without glibc's madvise it does nothing."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "madvise") or not array.flags.c_contiguous:
        return 0
    start = array.ctypes.data
    first = -(-start // PAGE_BYTES) * PAGE_BYTES
    end = (start + array.nbytes) // PAGE_BYTES * PAGE_BYTES
    if end <= first:
        return 0
    if libc.madvise(first, end - first, MADV_DONTNEED) != 0:
        return 0
    return end - first
