"""Adaptive batching: a request goes to the model at once unless another connection is expected to
ask within the window, so a lone client never waits; at any concurrency, every client gets
exactly the answer the model gives its observation alone."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from policybench import keys
from policybench.policy.base import Chunk, SessionContext
from policybench.serve.batcher import Batcher, CallCost, Peer, Request, RolloutState
from policybench.serve.client import Endpoint, RemoteModel
from policybench.serve.model_thread import ModelThread
from policybench.serve.server import PolicyServer, ServerConfig, ServerThread, fixed_model
from tests.served import EchoBatchModel, RecordingModel

CONTEXT = SessionContext("do the thing", 10.0)
WAIT_S = 10.0  # the longest any client or loop in these tests may wait


class ElementwiseModel:
    """A batched model whose answer to each observation is computed from that observation alone,
    element by element (no reduction a batch could reorder), so a batched answer is bit for bit
    the one the observation gets alone. Each call takes `delay_s`; it records every batch size."""

    name = "elementwise"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.batch_sizes: list[int] = []

    def predict_batch(self, requests):
        self.batch_sizes.append(len(requests))
        time.sleep(self.delay_s)
        images = np.stack([obs["image"] for _, obs in requests]).astype(np.float32)
        states = np.stack([obs["state"] for _, obs in requests])
        actions = np.sin(states)[:, None, :] * (1 + images[:, 0, :3, :1] / 255)
        return [Chunk(actions[i], ctx.control_hz) for i, (ctx, _) in enumerate(requests)]

    def open(self, context: SessionContext):
        return lambda obs: self.predict_batch([(context, obs)])[0]

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name}


class CountingModel:
    """An unbatched model with per-rollout state: a rollout's n-th answer is `[[who, n]]`."""

    name = "counting"

    def open(self, context: SessionContext):
        calls = iter(range(1_000_000))
        return lambda obs: Chunk(np.array([[obs["who"][0], next(calls)]]), context.control_hz)

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name}


def observation(client: int, step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([client, step])
    return {
        "image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
        "state": rng.normal(size=4).astype(np.float32),
        "who": np.array([float(client)]),
    }


def serve(model, **config) -> ServerThread:
    server = PolicyServer(fixed_model(model, 10.0), ServerConfig(port=0, **config), model.name)
    return ServerThread(server)


def ask_in_threads(url: str, clients: int, steps: int) -> list[list[np.ndarray]]:
    """`clients` clients, a thread each, started together, each asking `steps` times in turn."""
    start = threading.Barrier(clients, timeout=WAIT_S)

    def client(who: int) -> list[np.ndarray]:
        source = RemoteModel(Endpoint(url, infer_timeout_s=WAIT_S)).open(CONTEXT)
        start.wait()
        return [source(observation(who, step)).actions for step in range(steps)]

    with ThreadPoolExecutor(clients, thread_name_prefix="client") as pool:
        futures = [pool.submit(client, who) for who in range(clients)]
        return [future.result(timeout=60) for future in futures]


# --- on real sockets --------------------------------------------------------------------------


def test_a_lone_client_never_opens_a_batch_window():
    model = EchoBatchModel()
    # A window this long could not go unnoticed; a second connection that never asks is there
    # too, as a rollout waiting for its env would be.
    with serve(model, max_wait_ms=5_000) as server:
        silent = RemoteModel(Endpoint(server.url)).open(CONTEXT)
        source = RemoteModel(Endpoint(server.url, infer_timeout_s=WAIT_S)).open(CONTEXT)
        for seq in range(30):
            source({"who": np.array([0.0]), "seq": np.array([float(seq)])})
        counters = server.server.batch_counters()
        silent.close()
    assert counters.windows == 0
    assert counters.batches == counters.requests == 30 and model.batch_sizes == [1] * 30


@pytest.mark.parametrize("clients", [1, 2, 4, 8])
def test_answers_are_identical_to_unbatched_at_every_concurrency(clients):
    model = ElementwiseModel(delay_s=0.003)
    steps = 12
    with serve(model, max_batch=8, max_wait_ms=20) as server:
        answers = ask_in_threads(server.url, clients, steps)
        counters = server.server.batch_counters()
    for who, per_client in enumerate(answers):
        for step, actions in enumerate(per_client):
            alone = model.predict_batch([(CONTEXT, observation(who, step))])[0].actions
            assert actions.dtype == alone.dtype and actions.tobytes() == alone.tobytes(), (
                f"client {who} step {step}: served {actions.tolist()}, alone {alone.tolist()}"
            )
    assert counters.requests == clients * steps
    if clients > 1:  # the answers above did go through shared model calls
        assert counters.batches < counters.requests, counters
    else:
        assert counters.windows == 0


@pytest.mark.parametrize("clients", [2, 8])
def test_an_unbatched_model_keeps_each_rollouts_state_at_every_concurrency(clients):
    with serve(CountingModel(), max_wait_ms=20) as server:
        answers = ask_in_threads(server.url, clients, steps=10)
        counters = server.server.batch_counters()
    assert [[a.tolist() for a in per_client] for per_client in answers] == [
        [[[who, n]] for n in range(10)] for who in range(clients)
    ]
    assert counters.windows == 0  # waiting cannot pay off without predict_batch


# --- the window, step by step -----------------------------------------------------------------


def test_a_peer_is_expected_while_its_usual_turnaround_may_end_within_the_window():
    peer = Peer()
    assert not peer.expected(now=1.0, deadline=1.002)  # never answered
    peer.answered(1.0)
    peer.asks(1.001)  # its first turnaround: 1 ms, no spread yet
    assert (peer.turnaround_s, peer.spread_s) == (pytest.approx(0.001), 0.0)
    assert not peer.expected(now=1.0011, deadline=1.0031)  # it is asking
    peer.answered(2.0)
    assert peer.expected(now=2.0002, deadline=2.0022)  # due at 2.001
    assert not peer.expected(now=2.0002, deadline=2.0008)  # due after the deadline
    assert not peer.expected(now=2.0015, deadline=2.0035)  # late: busy with something else
    peer.asks(2.003)  # 3 ms: mean and spread move a quarter of the way
    assert peer.turnaround_s == pytest.approx(0.0015) and peer.spread_s == pytest.approx(0.0005)
    peer.answered(3.0)  # due at 3.0015, give or take two spreads: 3.0005 to 3.0025
    assert peer.expected(now=3.0001, deadline=3.0006)
    assert peer.expected(now=3.0024, deadline=3.0044)
    assert not peer.expected(now=3.0026, deadline=3.0046)


def test_a_peer_that_asks_rarely_is_not_expected_soon_after_its_answer():
    rollout = Peer()  # a rollout stepping its env for 50 ms between chunks
    rollout.answered(0.0)
    rollout.asks(0.05)
    rollout.answered(1.0)
    assert not rollout.expected(now=1.0001, deadline=1.0021)


def request(who: float) -> Request:
    obs = {"who": np.array([who]), "seq": np.array([0.0])}
    return Request(RolloutState(CONTEXT), obs)


def run(scenario) -> None:
    """Runs `scenario(batcher_for)` on a fresh event loop; `batcher_for(model, max_wait_s)`
    makes Batchers whose model thread is shut down afterwards."""
    model_thread = ModelThread("model")

    def batcher_for(model, max_wait_s: float) -> Batcher:
        return Batcher(model, model_thread, max_batch=8, max_wait_s=max_wait_s)

    try:
        asyncio.run(asyncio.wait_for(scenario(batcher_for), WAIT_S))
    finally:
        model_thread.shutdown()


def just_answered(peer: Peer, turnaround_s: float = 0.02) -> None:
    peer.answered(time.perf_counter())
    peer.turnaround_s = turnaround_s


def test_a_request_waits_for_a_peer_expected_in_the_window_and_goes_when_it_asks():
    async def scenario(batcher_for):
        batcher = batcher_for(EchoBatchModel(), max_wait_s=WAIT_S)
        first, second = batcher.connect(), batcher.connect()
        just_answered(second)
        waiting = asyncio.ensure_future(batcher.submit(first, request(1.0)))
        await asyncio.sleep(0.05)
        assert (batcher.counters.windows, batcher.counters.batches) == (1, 0)
        answer = await batcher.submit(second, request(2.0))
        assert answer.batch_size == 2 and (await waiting).batch_size == 2
        assert (batcher.counters.windows, batcher.counters.batches) == (1, 1)

    run(scenario)


def test_a_window_ends_at_its_deadline_when_the_expected_peer_does_not_ask():
    async def scenario(batcher_for):
        batcher = batcher_for(EchoBatchModel(), max_wait_s=0.05)
        first, second = batcher.connect(), batcher.connect()
        just_answered(second)
        answer = await batcher.submit(first, request(1.0))
        assert answer.batch_size == 1 and answer.queue_ms >= 45
        assert (batcher.counters.windows, batcher.counters.batches) == (1, 1)

    run(scenario)


def test_a_window_ends_when_the_peer_it_waits_for_disconnects():
    async def scenario(batcher_for):
        batcher = batcher_for(EchoBatchModel(), max_wait_s=WAIT_S)
        first, second = batcher.connect(), batcher.connect()
        just_answered(second)
        waiting = asyncio.ensure_future(batcher.submit(first, request(1.0)))
        await asyncio.sleep(0.05)
        batcher.disconnect(second)
        assert (await waiting).batch_size == 1
        assert (batcher.counters.windows, batcher.counters.batches) == (1, 1)

    run(scenario)


def test_a_calls_fixed_cost_is_fitted_to_the_calls_seen():
    cost = CallCost()
    assert cost.fixed_s() is None  # no call seen
    for _ in range(5):
        cost.add(4, 0.012)
    assert cost.fixed_s() is None  # calls of one size cannot tell fixed from per request
    for size in [1, 8, 3, 6, 2, 7, 5, 4] * 3:
        cost.add(size, 0.004 + 0.002 * size)
    assert cost.fixed_s() == pytest.approx(0.004)
    for size in [1, 8, 3, 6, 2, 7, 5, 4] * 20:  # the model changes: the newer calls win
        cost.add(size, 0.001 + 0.003 * size)
    assert cost.fixed_s() == pytest.approx(0.001, abs=1e-4)


@pytest.mark.parametrize(
    ("fixed_s", "per_request_s", "window_s"),
    [(0.0, 0.005, 0.0), (0.05, 0.001, 0.05)],
    ids=["cost-per-request-only", "fixed-cost"],
)
def test_a_window_lasts_no_longer_than_the_fixed_part_of_a_call(fixed_s, per_request_s, window_s):
    # A request that joins another's call spares the model a call of its own; waiting longer
    # than that call's fixed part idles the model for more than it saves.
    async def scenario(batcher_for):
        batcher = batcher_for(EchoBatchModel(), max_wait_s=WAIT_S)
        for size in range(1, 9):  # the calls seen so far
            batcher.call_cost.add(size, fixed_s + per_request_s * size)
        first, second = batcher.connect(), batcher.connect()
        just_answered(second, turnaround_s=0.01)
        answer = await batcher.submit(first, request(1.0))
        assert answer.batch_size == 1
        assert batcher.counters.windows == (1 if window_s else 0)
        assert window_s * 1e3 - 5 <= answer.queue_ms < window_s * 1e3 + 500

    run(scenario)


def test_a_model_without_predict_batch_never_waits():
    async def scenario(batcher_for):
        batcher = batcher_for(RecordingModel(), max_wait_s=WAIT_S)
        first, second = batcher.connect(), batcher.connect()
        just_answered(second)
        await batcher.submit(first, request(1.0))
        assert (batcher.counters.windows, batcher.counters.batches) == (0, 1)

    run(scenario)


def test_requests_that_wait_while_the_model_runs_go_together_without_a_window():
    async def scenario(batcher_for):
        model = EchoBatchModel(delay_s=0.1)
        batcher = batcher_for(model, max_wait_s=WAIT_S)
        peers = [batcher.connect() for _ in range(4)]
        running = asyncio.ensure_future(batcher.submit(peers[0], request(0.0)))
        await asyncio.sleep(0.01)  # the first call has started; the others queue behind it
        answers = await asyncio.gather(*(batcher.submit(p, request(1.0)) for p in peers[1:]))
        await running
        assert model.batch_sizes == [1, 3] and [a.batch_size for a in answers] == [3, 3, 3]
        assert batcher.counters.windows == 0  # nobody else was left to wait for

    run(scenario)


def test_the_window_counts_from_when_the_model_frees_so_two_clients_fall_into_step():
    # Without it two clients would take turns for ever: each one's request waits out the
    # other's call, longer than any window, and goes alone.
    async def scenario(batcher_for):
        model = EchoBatchModel(delay_s=0.1)
        batcher = batcher_for(model, max_wait_s=0.05)
        first, second = batcher.connect(), batcher.connect()
        first.turnaround_s = 0.001  # it asks straight back after an answer

        async def ask_twice() -> list[int]:
            return [(await batcher.submit(first, request(1.0))).batch_size for _ in range(2)]

        asking = asyncio.ensure_future(ask_twice())
        await asyncio.sleep(0.01)  # the first call has started
        answer = await batcher.submit(second, request(2.0))
        assert await asking == [1, 2] and answer.batch_size == 2
        assert model.batch_sizes == [1, 2] and batcher.counters.windows == 1

    run(scenario)


def test_the_call_timeout_counts_from_when_the_model_begins_not_while_a_build_runs():
    """A request queued behind another Eval's model build (1.5 s on the model's thread) is not
    hung at a 1 s call timeout: its own call, when it begins, takes no time. A call that itself
    runs past the timeout still is."""
    from policybench.serve.batcher import ModelCallHung

    model_thread = ModelThread("model")

    async def scenario() -> None:
        batcher = Batcher(Timed(0.0), model_thread, max_batch=8, max_wait_s=0.0, call_timeout_s=1)
        building = model_thread.call(time.sleep, 1.5)  # another Eval's model being built
        answer = await batcher.submit(batcher.connect(), request(1.0))
        assert answer.chunk.actions.shape[0] >= 1
        await building
        slow = Batcher(Timed(1.5), model_thread, max_batch=8, max_wait_s=0.0, call_timeout_s=0.5)
        with pytest.raises(ModelCallHung, match=r"did not return within 0\.5 s"):
            await slow.submit(slow.connect(), request(1.0))

    try:
        asyncio.run(asyncio.wait_for(scenario(), WAIT_S))
    finally:
        model_thread.shutdown()


class Timed:
    """A batched model whose call takes `delay_s` and answers zeros."""

    name = "timed"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def predict_batch(self, requests):
        time.sleep(self.delay_s)
        return [Chunk(np.zeros((1, 1)), 10.0) for _ in requests]
