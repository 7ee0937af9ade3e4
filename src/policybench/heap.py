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

M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, kept fixed


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    libc = ctypes.CDLL(None)  # the C library this process runs on
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
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
