"""Batched-first rollouts in one process: K rollouts of one Eval stepped side by side, each on
its own World and thread, asking a batching model once per step for all that need a chunk.

Each rollout runs the ordinary harness, so its Episode is the one it would have alone; only the
model calls meet. A barrier holds each call until every rollout still running is waiting on the
model, then answers them all with one `predict_batch` (in slot order, so a batch's make-up never
depends on thread timing). With a batching model the slots also take turns: one slot's thread
runs at a time, up to its next model call, as one thread stepping K envs would; threads that
step Python envs at once only fight over the interpreter lock. A model without `predict_batch`
(a served one, say) is asked by each rollout on its own, the K calls in flight together.

An Eval whose envs run in an interpreter of their own puts a worker's K envs in one env server,
and the barrier sends their steps together: one frame of K actions, answered a frame a step as
each env steps, so stepping K isolated envs costs one round trip, not K
(envserver.proxy.ServerPool).

A slot's wall clock, as its ChunkPlayer reads it to time a model call, stands still while the
slot waits for the other slots' turns: a call is timed at its batch's forward, as it would be on
a machine running the K rollouts for real, so `--inference-latency measured` charges each
rollout what the model took and not the other rollouts' steps."""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from policybench.envserver import Isolated
from policybench.harness import run_rollout
from policybench.policy.base import Chunk, Observation, Policy, SessionContext
from policybench.policy.chunk_player import ChunkPlayer, ChunkPolicy, rollout_draws
from policybench.record.episode import Episode
from policybench.serve.batcher import BatchedModel, Request, RolloutState, infer
from policybench.spec import Eval, Rollout
from policybench.world import EnvCache, World

if TYPE_CHECKING:
    import numpy as np

    from policybench.envserver.proxy import EnvProxy, ServerPool, Stepped


class Lockstep:
    """`slots` rollouts of `eval` at a time. Slot i always runs on thread i with World i (its
    own env: renderer contexts stay on the thread that made them), drawn from `envs` (which
    must hold `slots` envs at once; by default a cache of its own); close() ends the threads and
    closes the envs."""

    def __init__(self, eval: Eval, slots: int, envs: EnvCache | None = None) -> None:
        if slots < 1:
            raise ValueError(f"lockstep needs at least 1 slot, got {slots}")
        envs = EnvCache(slots) if envs is None else envs
        if envs.capacity is not None and envs.capacity < slots:
            raise ValueError(
                f"lockstep needs {slots} live envs at once, and its env cache holds at most "
                f"{envs.capacity}; give it a capacity of at least {slots}"
            )
        self.eval = eval
        self.worlds = [World(eval, envs, slot) for slot in range(slots)]
        self._slots = [_SlotThread(f"lockstep-{eval.name}-{i}") for i in range(slots)]
        self._servers: ServerPool | None = None

    @property
    def slots(self) -> int:
        return len(self._slots)

    def run(self, rollouts: Sequence[Rollout], policy: Policy) -> list[Episode]:
        """The Episodes of `rollouts` (at most `slots` of them), run side by side. The harness
        turns whatever a policy, codec or env raises into an error Episode; anything else a slot
        raises is raised here once every slot is done."""
        if len(rollouts) > self.slots:
            raise ValueError(f"{len(rollouts)} rollouts for {self.slots} lockstep slots")
        pool = self._pool()
        barrier = _Barrier(policy, len(rollouts))
        done: list[queue.Queue[Episode]] = []
        for slot, rollout in enumerate(rollouts):
            world, policy_of_slot = self.worlds[slot], barrier.policy_of(slot)

            def run_one(rollout=rollout, world=world, policy=policy_of_slot, slot=slot) -> Episode:
                barrier.enter(slot)
                try:
                    if pool is None:
                        return run_rollout(rollout, world, policy)
                    from policybench.envserver.proxy import gathered

                    with gathered(functools.partial(barrier.step, slot), pool):
                        return run_rollout(rollout, world, policy)
                finally:
                    barrier.leave(slot)

            done.append(self._slots[slot].submit(run_one))
        episodes = [answer.get() for answer in done]
        for episode in episodes:
            if isinstance(episode, Exception):
                raise episode
        return episodes

    def _pool(self) -> ServerPool | None:
        """Where the slots' envs are made when they run in env servers here: K to a server,
        their steps K to a frame (None: the Eval's envs run in this process or are served from
        elsewhere, one connection each)."""
        from policybench.envserver import remote

        if not isinstance(self.eval.make_env, Isolated) or remote.endpoint_in_use() is not None:
            return None
        if self._servers is None:
            from policybench.envserver.proxy import ServerPool

            self._servers = ServerPool(self.slots)
        return self._servers

    def close(self) -> None:
        for slot in self._slots:
            slot.stop()
        self.worlds[0].close()  # the Worlds share one cache


class _SlotThread:
    """One long-lived thread that runs what it is given, in order."""

    def __init__(self, name: str) -> None:
        self._work: queue.Queue[tuple[Callable[[], Any], queue.Queue] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[], Any]) -> queue.Queue:
        answer: queue.Queue = queue.Queue(maxsize=1)
        self._work.put((work, answer))
        return answer

    def stop(self) -> None:
        self._work.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (job := self._work.get()) is not None:
            work, answer = job
            try:
                answer.put(work())
            except Exception as error:  # raised again on the caller's thread, not lost with ours
                answer.put(error)


class _Barrier:
    """Where the slots' model calls and isolated env steps meet. A slot blocks at a model call
    (with a batching model) or at a step of an env server's env (`gathering`); when every slot
    still running is blocked, the steps go first, every env server's in one frame
    (proxy.step_together), and the model is asked for all only when every slot waits on it.
    With a batching model the slots also take turns in slot order: a slot runs from its answer
    (or its start) to its next block (or its end), then hands the turn on; the last to block
    dispatches. Otherwise each slot asks its own source and runs freely up to its steps."""

    def __init__(self, policy: Policy, live: int) -> None:
        self._policy = policy
        batching = isinstance(policy, ChunkPolicy) and isinstance(policy.model, BatchedModel)
        self._batching = batching
        self._live = live
        self._waiting: dict[int, Request] = {}
        # Each answered slot's chunk (or the exception in its place) and its batch's forward time.
        self._answers: dict[int, tuple[Chunk | Exception, int]] = {}
        self._stepping: dict[int, tuple[EnvProxy, np.ndarray]] = {}  # slots blocked at a step
        self._stepped: dict[int, Stepped | BaseException] = {}  # their answers
        self._paused_ns = [0] * live  # each slot's time waiting for other slots' turns
        self._ready = list(range(live))  # slots that may run, in the order they take turns
        # The slot running now: the first, from the start (None once every slot has left).
        self._turn = self._ready.pop(0) if batching and live else None
        self._lock = threading.Condition()

    def policy_of(self, slot: int) -> Policy:
        return _SlotPolicy(self._policy, self, slot) if self._batching else self._policy

    def enter(self, slot: int) -> None:
        """Blocks a slot's thread until its first turn."""
        if not self._batching:
            return
        with self._lock:
            self._lock.wait_for(lambda: self._turn == slot)

    def clock_of(self, slot: int) -> Callable[[], int]:
        """The slot's wall clock in ns: it stands still while the slot waits for other turns."""
        paused = self._paused_ns
        return lambda: time.perf_counter_ns() - paused[slot]

    def ask(self, slot: int, rollout: RolloutState, obs: Observation) -> Chunk:
        asked_ns = time.perf_counter_ns()
        with self._lock:
            self._waiting[slot] = Request(rollout, obs)
            self._hand_on()
            self._lock.wait_for(lambda: self._turn == slot and slot in self._answers)
            answer, forward_ns = self._answers.pop(slot)
        self._paused_ns[slot] += time.perf_counter_ns() - asked_ns - forward_ns
        if isinstance(answer, Exception):
            raise answer
        return answer

    def step(self, slot: int, proxy: EnvProxy, action: np.ndarray) -> Stepped:
        """Slot `slot`'s step of its isolated env, sent with the other slots' steps."""
        with self._lock:
            self._stepping[slot] = (proxy, action)
            round = self._hand_on()
        if round:
            self._send(round)
        with self._lock:
            self._lock.wait_for(
                lambda: slot in self._stepped and (not self._batching or self._turn == slot)
            )
            answer = self._stepped.pop(slot)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def leave(self, slot: int) -> None:
        with self._lock:
            self._live -= 1
            round = self._hand_on()
        if round:
            self._send(round)

    def _hand_on(self) -> list[tuple[int, tuple[EnvProxy, np.ndarray]]] | None:
        """The turn goes to the next slot that may run; when none may, the steps waiting are
        sent, or, when every slot still running waits on the model, it is asked for all. Without
        turns, the slots whose steps the caller is to send (after letting go of the lock), once
        every slot still running waits at a step."""
        if not self._batching:
            if self._stepping and len(self._stepping) == self._live:
                return [(slot, self._stepping.pop(slot)) for slot in sorted(self._stepping)]
            return None
        if not self._ready and self._stepping:
            self._step_round()
        elif not self._ready and self._waiting and len(self._waiting) == self._live:
            self._dispatch()
        self._turn = self._ready.pop(0) if self._ready else None
        self._lock.notify_all()
        return None

    def _step_round(self) -> None:
        """With turns: the round sent under the lock, its slots ready in slot order after it."""
        slots = sorted(self._stepping)
        answers: dict[int, Any] = {}
        self._round([(slot, self._stepping.pop(slot)) for slot in slots], answers.__setitem__)
        self._stepped.update(answers)
        self._ready.extend(slots)

    def _send(self, round: list[tuple[int, tuple[EnvProxy, np.ndarray]]]) -> None:
        """Without turns: the round sent outside the lock, each answer handed to its slot as
        it comes (its rollout runs on while the server steps the others)."""

        def publish(slot: int, answer: Any) -> None:
            with self._lock:
                self._stepped[slot] = answer
                self._lock.notify_all()

        self._round(round, publish)

    def _round(
        self,
        round: list[tuple[int, tuple[EnvProxy, np.ndarray]]],
        publish: Callable[[int, Any], None],
    ) -> None:
        """The round's steps (each slot's) sent together (proxy.step_together), each answer
        published for its slot; interrupted mid-round, every slot not yet answered is told."""
        from policybench.envserver.proxy import step_together

        slots = [slot for slot, _ in round]
        told: set[int] = set()

        def tell(at: int, answer: Any) -> None:
            told.add(slots[at])
            publish(slots[at], answer)

        try:
            step_together([step for _, step in round], tell)
        except BaseException as error:  # (a watchdog's) its own slot raises it when it reads it
            for slot in slots:
                if slot not in told:
                    publish(slot, error)

    def _dispatch(self) -> None:
        policy = self._policy
        assert isinstance(policy, ChunkPolicy)
        slots = sorted(self._waiting)
        requests = [self._waiting[slot] for slot in slots]
        self._waiting.clear()
        started_ns = time.perf_counter_ns()
        answers = infer(policy.model, policy.codec, requests)
        forward_ns = time.perf_counter_ns() - started_ns
        self._answers.update(
            (slot, (answer, forward_ns)) for slot, answer in zip(slots, answers, strict=True)
        )
        self._ready.extend(slots)


class _SlotPolicy:
    """The policy as one slot sees it: its sessions' model calls go through the barrier. It
    describes itself as the policy does, so its Episodes record the same policy."""

    def __init__(self, policy: ChunkPolicy, barrier: _Barrier, slot: int) -> None:
        self._policy, self._barrier, self._slot = policy, barrier, slot
        self.name = policy.name

    def new_session(self, context: SessionContext) -> ChunkPlayer:
        rollout = RolloutState(context.for_model())
        policy = self._policy
        return ChunkPlayer(
            lambda obs: self._barrier.ask(self._slot, rollout, obs),
            execute_steps=policy.execute_steps,
            latency=policy.latency,
            anchor=policy.anchor,
            period_ns=context.control_period_ns,
            draws=rollout_draws(policy.seed, context),
            warm_start=policy.warm_start,
            wall_clock_ns=self._barrier.clock_of(self._slot),
        )

    def describe(self) -> dict[str, Any]:
        return self._policy.describe()
