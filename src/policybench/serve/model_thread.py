"""The thread a server runs its model on: every model call and build, one at a time and in the
order asked, off the event loop.

A ThreadPoolExecutor does the same with more on the way (a lock, a semaphore, and a second future
chained to the loop's); at a lone client asking a small model back to back, that showed as a
fifth of the server's CPU per request (`bench/serve.py --width 0`). This thread takes a call
from a `queue.SimpleQueue` and hands its outcome straight to the loop's future.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, asyncio.Future, Callable[..., Any], tuple[Any, ...]]


class ModelThread:
    """Runs calls on one daemon thread. `call` is used from an event loop; `shutdown` stops the
    thread after the call it is running, cancelling the calls still queued."""

    def __init__(self, name: str = "policybench-model") -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def call(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """A future on the running loop for `function(*args)` run on this thread. Raises
        RuntimeError once the thread is shut down."""
        if self._closed:
            raise RuntimeError("the model thread is shut down")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future, function, args))
        return future

    def shutdown(self) -> None:
        self._closed = True
        self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, function, args = job
            if self._closed:  # shut down: what is still queued does not run
                _settle_from_thread(loop, future, None, None, cancel=True)
                continue
            try:
                outcome = (function(*args), None)
            except BaseException as error:  # the caller's to handle
                outcome = (None, error)
            _settle_from_thread(loop, future, *outcome)


def _settle_from_thread(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future,
    result: Any,
    error: BaseException | None,
    cancel: bool = False,
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: no one waits any more
        loop.call_soon_threadsafe(_settle, future, result, error, cancel)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None, cancel: bool) -> None:
    if future.done():  # cancelled by its caller meanwhile
        return
    if cancel:
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
