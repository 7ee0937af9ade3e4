"""The event loop a server runs on: uvloop's where it is installed (a dependency on Linux and
macOS), asyncio's own elsewhere. Every request crosses from the loop to the model's thread and
back; uvloop's cross-thread wake-up costs less, and at a lone client asking a small model back to
back, the server's CPU per request fell by a third (`bench/serve.py --width 0`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError:  # Windows: uvloop is not built there
    uvloop = None

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the server's loop."""
    if uvloop is not None:
        return uvloop.run(main)
    return asyncio.run(main)


def new_event_loop() -> asyncio.AbstractEventLoop:
    return uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
