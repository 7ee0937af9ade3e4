"""Models and an Eval for the served-policy tests: a module-level Eval that a `policybench serve`
process can import, and models that echo, record, fail on request or answer in batches."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import Chunk, SessionContext
from policybench.policy.codec import Codec, concat, prompt
from tests.envs import GreedyPointModel, point_eval

# An openpi client (which names no codec) sends the state as `observation/state`.
OPENPI = Codec("openpi", (concat(keys.STATE, into="observation/state"), prompt()))
POINT = dataclasses.replace(
    point_eval("point-served", scripted=GreedyPointModel), codecs={"openpi": OPENPI}
)


class RecordingModel:
    """Answers the `answer` array each observation carries (default one zero action); keeps
    every observation it was given. An observation with `fail` raises with that text."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def open(self, context: SessionContext):
        def predict(obs):
            self.seen.append(dict(obs))
            if "fail" in obs:
                raise ValueError(f"model refused: {obs['fail']}")
            return Chunk(np.asarray(obs.get("answer", np.zeros((1, 1)))), context.control_hz)

        return predict

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name}


class EchoBatchModel:
    """Answers each observation with `[[who, seq]]` in one batched call that takes `delay_s`;
    records the size of every batch. A `poison` observation fails its whole batch."""

    name = "echo-batch"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.batch_sizes: list[int] = []
        self._lock = threading.Lock()

    def predict_batch(self, requests):
        with self._lock:
            self.batch_sizes.append(len(requests))
        time.sleep(self.delay_s)
        if any(obs["who"][0] < 0 for _, obs in requests):  # a poisoned request
            raise RuntimeError("poisoned batch")
        shapes = sorted({obs["who"].shape for _, obs in requests})
        if shapes != [(1,)]:  # a model stacking its inputs fails the whole call
            raise ValueError(f"expected 'who' of shape (1,), got {shapes}")
        return [
            Chunk(np.array([[obs["who"][0], obs["seq"][0]]], dtype=np.float64), ctx.control_hz)
            for ctx, obs in requests
        ]

    def open(self, context: SessionContext):
        return lambda obs: self.predict_batch([(context, obs)])[0]

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name}
