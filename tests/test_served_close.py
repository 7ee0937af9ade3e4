"""`policybench serve` closes what a Model's `open` returned for a rollout when the rollout's
connection ends, on the model's thread, as the pytest process does for a model it runs itself."""

from __future__ import annotations

import threading

import numpy as np

from policybench.policy.base import Chunk, SessionContext
from tests.test_server import WAIT_S, open_source, serve


class ClosingModel:
    """Each rollout's source says, when closed, on which thread."""

    name = "closing"

    def __init__(self) -> None:
        self.closed_on: list[str] = []
        self.closed = threading.Event()

    def open(self, context: SessionContext):
        model = self

        class Source:
            def __call__(self, obs):
                return Chunk(np.zeros((1, 2)), 10.0)

            def close(self) -> None:
                model.closed_on.append(threading.current_thread().name)
                model.closed.set()

        return Source()

    def describe(self) -> dict:
        return {"name": self.name}


def test_a_served_rollouts_source_is_closed_on_the_model_thread_when_its_connection_ends():
    model = ClosingModel()
    with serve(model) as server:
        source = open_source(server.url)
        source({"state": np.zeros(2)})
        assert model.closed_on == []  # the rollout is still running
        source.close()
        assert model.closed.wait(WAIT_S), "the server never closed the rollout's source"
    assert model.closed_on == ["policybench-model"]
