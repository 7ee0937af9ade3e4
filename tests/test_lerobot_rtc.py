"""A LeRobot checkpoint whose config enables real-time chunking gets the delay and the unplayed
tail of its last chunk through `predict_action_chunk(batch, inference_delay=...,
prev_chunk_left_over=...)`, as LeRobot's own RTC loop passes them. Runs in the `lerobot` tox env.

The flow-matching policies with RTC (pi0, pi0.5, SmolVLA) build their vision-language backbone
and tokenizer from the model hub, which is not reachable here, so no such checkpoint can be made
offline: a random-init ACT stands in, its RTC switch set by hand and its `predict_action_chunk`
wrapped to record the arguments (ACT itself takes none)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("lerobot", reason="needs LeRobot: pip install 'policybench[lerobot]'")
pytest.importorskip("gym_pusht", reason="needs the pusht extra")

from policybench.harness import run_rollout
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency import InferenceLatency
from policybench.policy.lerobot import LeRobotModel
from policybench.suites.pusht import LEROBOT, pusht
from policybench.world import World
from tests.test_lerobot import write_checkpoint


def test_an_rtc_checkpoint_gets_the_delay_and_its_normalized_unplayed_tail(tmp_path):
    model = LeRobotModel(write_checkpoint(tmp_path))
    model.rtc = True
    predict = model._policy.predict_action_chunk
    calls: list[tuple[dict, object]] = []

    def recording(batch, **told):
        chunk = predict(batch)
        calls.append((told, chunk[0, : model.n_action_steps].clone()))
        return chunk

    model._policy.predict_action_chunk = recording
    eval = pusht()
    rollout = dataclasses.replace(eval.rollouts(1, 0)[0], timeout_s=1.6)  # 16 steps at 10 Hz
    policy = ChunkPolicy(model, LEROBOT, execute_steps=4, latency=InferenceLatency.parse("steps:2"))
    episode = run_rollout(rollout, World(eval), policy)
    assert episode.outcome.kind.value != "error", episode.outcome
    assert len(calls) == 4  # at steps 0, 4, 8, 12
    first, _ = calls[0]
    assert first == {"inference_delay": 2, "prev_chunk_left_over": None}
    for (told, _), (_, previous) in zip(calls[1:], calls, strict=False):
        assert told["inference_delay"] == 2
        # Asked 4 steps after the previous call: its actions 4.. are still to play, as the policy
        # answered them (normalized, before the postprocessor).
        assert told["prev_chunk_left_over"].equal(previous[4:])


def test_a_checkpoint_without_rtc_is_called_as_before(tmp_path):
    model = LeRobotModel(write_checkpoint(tmp_path))
    assert not model.rtc
    assert "real_time_chunking" not in model.describe()
