"""The server's model thread: calls run one at a time, in order, off the event loop; their
results and exceptions reach the loop; a shutdown cancels what was still queued."""

from __future__ import annotations

import asyncio
import threading

import pytest

from policybench.serve import event_loop
from policybench.serve.model_thread import ModelThread


def test_calls_run_in_order_on_the_model_thread_and_answer_on_the_loop():
    ran: list[tuple[int, str]] = []

    def work(i: int) -> int:
        ran.append((i, threading.current_thread().name))
        return i * i

    async def scenario() -> None:
        model_thread = ModelThread("model")
        try:
            answers = await asyncio.gather(*(model_thread.call(work, i) for i in range(20)))
        finally:
            model_thread.shutdown()
        assert answers == [i * i for i in range(20)]

    event_loop.run(scenario())
    assert [i for i, _ in ran] == list(range(20))
    assert {name for _, name in ran} == {"model"}


def test_an_exception_reaches_its_caller_and_the_thread_goes_on():
    def fail() -> None:
        raise ValueError("bad batch")

    async def scenario() -> None:
        model_thread = ModelThread()
        try:
            with pytest.raises(ValueError, match="bad batch"):
                await model_thread.call(fail)
            assert await model_thread.call(int, "7") == 7
        finally:
            model_thread.shutdown()

    event_loop.run(scenario())


def test_a_shutdown_cancels_queued_calls_and_refuses_new_ones():
    started, release = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return release.wait(10)

    async def scenario() -> None:
        model_thread = ModelThread()
        running = model_thread.call(hold)
        queued = model_thread.call(int, "1")
        while not started.is_set():
            await asyncio.sleep(0.001)
        model_thread.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            model_thread.call(int, "2")
        release.set()
        assert await running is True  # the call it was running finishes
        with pytest.raises(asyncio.CancelledError):
            await queued

    event_loop.run(scenario())


def test_the_server_loop_is_uvloops_where_it_is_installed():
    uvloop = pytest.importorskip("uvloop")
    loop = event_loop.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
