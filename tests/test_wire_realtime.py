"""What a request is told in a run with latency crosses the openpi wire: a served model gets the
delay in steps and the rest of the chunk it answered last (the real-time chunking prefix) under
keys.INFERENCE_DELAY and keys.ACTION_PREFIX, through a real `policybench serve` on loopback."""

from __future__ import annotations

import numpy as np

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import Chunk
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency import InferenceLatency
from policybench.serve.client import Endpoint, RemoteModel
from policybench.spec import Rollout, Scene
from policybench.world import World
from tests.served import OPENPI, POINT
from tests.test_server import serve

H = 6


class NumberedChunks:
    """Answers chunks of H one-dimensional actions numbered call*10 + k; keeps what it saw."""

    name = "numbered"

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def open(self, context):
        def predict(obs):
            call = len(self.seen)
            self.seen.append({name: np.array(value) for name, value in obs.items()})
            actions = np.array([[(call * 10 + k) / 100] for k in range(H)])
            return Chunk(actions, context.control_hz)

        return predict

    def describe(self):
        return {keys.POLICY_NAME: self.name}


def served_run(latency: str) -> tuple[NumberedChunks, list]:
    model = NumberedChunks()
    with serve(model) as server:
        policy = ChunkPolicy(
            RemoteModel(Endpoint(server.url)),
            OPENPI,
            execute_steps=3,
            latency=InferenceLatency.parse(latency),
        )
        rollout = Rollout(POINT.name, 0, 1, "reach", timeout_s=1.5, scene=Scene("reach", 0))
        episode = run_rollout(rollout, World(POINT), policy)
    assert episode.outcome.kind.value != "error", episode.outcome
    return model, [float(step.command[0]) for step in episode.trace]


def test_a_served_model_is_told_its_delay_and_the_rest_of_its_last_chunk():
    model, _ = served_run("steps:2")
    assert len(model.seen) >= 4
    assert all(int(obs[keys.INFERENCE_DELAY]) == 2 for obs in model.seen)
    assert model.seen[0][keys.ACTION_PREFIX].shape == (0, 0)  # no chunk yet
    for call, obs in enumerate(model.seen[1:], start=1):
        # Asked 3 steps after the previous call: its waypoints 0-2 are past, 3-5 still to play,
        # as the model itself answered them.
        expected = [[((call - 1) * 10 + k) / 100] for k in range(3, H)]
        np.testing.assert_array_equal(obs[keys.ACTION_PREFIX], expected)
    assert "observation/state" in model.seen[0]  # the codec still encoded the observation


def test_a_run_without_latency_sends_neither_key():
    model, _ = served_run("none")
    assert not any(keys.INFERENCE_DELAY in obs or keys.ACTION_PREFIX in obs for obs in model.seen)
