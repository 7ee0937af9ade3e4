"""The scene never reaches a model: only observations, the instruction and the fields an Eval
declares policy-facing do."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from policybench.harness import run_rollout
from policybench.policy.base import Chunk
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency import InferenceLatency
from policybench.spec import Rollout, Scene
from policybench.world import World
from tests.envs import PointEnv, point_eval


class SceneBlindPointEnv(PointEnv):
    """Stages the same goal whatever the scene says, so any difference a model sees would have
    come from the scene itself."""

    def reset(self, *, seed=None, options=None):
        return super().reset(seed=7)


class RecordingModel:
    """Keeps the bytes of everything it is given."""

    name = "recording"

    def __init__(self) -> None:
        self.inputs: list[bytes] = []

    def open(self, context):
        self.inputs.append(pickle.dumps(context))

        def predict(obs):
            self.inputs.append(pickle.dumps({k: np.asarray(v).tobytes() for k, v in obs.items()}))
            self.inputs.append(pickle.dumps(sorted(obs)))
            return Chunk(np.full((3, 1), 0.1), context.control_hz)

        return predict

    def describe(self):
        return {"name": self.name}


def inputs_for(eval, scene: Scene, latency: str = "none") -> list[bytes]:
    model = RecordingModel()
    rollout = Rollout(eval.name, 0, 1, "reach the goal", timeout_s=1.0, scene=scene)
    policy = ChunkPolicy(model, latency=InferenceLatency.parse(latency), execute_steps=2)
    episode = run_rollout(rollout, World(eval), policy)
    assert episode.steps == 10
    return model.inputs


# With a delay in steps, requests also carry the delay and the rest of the model's own chunk,
# and the session seeds its latency draws from the scene: none of it may tell scenes apart.
# (A latency profile's draws do differ by scene, by design: the delay each request is told is
# then a draw seeded by the scene, though never the scene itself.)
@pytest.mark.parametrize("latency", ["none", "steps:1"])
def test_perturbing_every_scene_field_leaves_the_model_inputs_byte_identical(latency):
    eval = dataclasses.replace(point_eval(), make_env=lambda task: SceneBlindPointEnv())
    base = Scene(task="reach", seed=3, fields={"init_state": 4, "placement": "left", "x": 0.25})
    reference = inputs_for(eval, base, latency)
    perturbed = [
        dataclasses.replace(base, task="reach-other"),
        dataclasses.replace(base, seed=99),
        *(
            dataclasses.replace(base, fields={**base.fields, name: other})
            for name, other in [("init_state", 17), ("placement", "right"), ("x", -3.5)]
        ),
    ]
    for scene in perturbed:
        assert inputs_for(eval, scene, latency) == reference, f"{scene} leaked into the model"


def test_only_declared_policy_facing_fields_reach_the_session_context():
    seen = []

    class ContextSpy(RecordingModel):
        def open(self, context):
            seen.append(context)
            return super().open(context)

    eval = dataclasses.replace(
        point_eval(), make_env=lambda task: SceneBlindPointEnv(), policy_facing=("embodiment",)
    )
    scene = Scene(task="reach", seed=1, fields={"embodiment": "left-arm", "init_state": 5})
    rollout = Rollout(eval.name, 0, 1, "reach the goal", timeout_s=0.5, scene=scene)
    run_rollout(rollout, World(eval), ChunkPolicy(ContextSpy()))
    (context,) = seen
    assert dict(context.fields) == {"embodiment": "left-arm"}
    assert context.instruction == "reach the goal"
