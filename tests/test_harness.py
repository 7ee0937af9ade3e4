"""The harness: how a rollout ends, what it records, and how it fails loudly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import EndEpisode, Step
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency import InferenceLatency, LatencyMode
from policybench.record.episode import OutcomeKind
from policybench.world import World
from tests.envs import GreedyPointModel, point_eval


def run(eval, policy, rollout_index=0):
    world = World(eval)
    rollout = eval.rollouts(2, 0)[rollout_index]
    return run_rollout(rollout, world, policy), world


class FixedSession:
    """A session that answers with `answer(obs, time_ns)` and calls no model."""

    calls = ()

    def __init__(self, answer):
        self.answer = answer

    def __call__(self, obs, time_ns):
        return self.answer(obs, time_ns)


class FixedSessionPolicy:
    """A policy whose sessions answer with `answer(obs, time_ns)`."""

    def __init__(self, answer, name="fixed"):
        self.answer = answer
        self.name = name

    def new_session(self, context):
        return FixedSession(self.answer)

    def describe(self):
        return {keys.POLICY_NAME: self.name}


def test_rollout_ends_solved_at_the_first_success():
    episode, _ = run(point_eval(), ChunkPolicy(GreedyPointModel()))
    assert episode.outcome.kind is OutcomeKind.SOLVED
    assert episode.success_step == episode.steps - 1
    assert episode.trace[-1].success and not any(step.success for step in episode.trace[:-1])


def test_rollout_ends_unsolved_at_its_timeout_in_sim_time():
    idle = FixedSessionPolicy(lambda obs, t: Step(np.zeros(1), t + 1))
    episode, _ = run(point_eval(timeout_s=2.0, control_hz=10.0), idle)
    assert episode.outcome.kind is OutcomeKind.UNSOLVED
    assert "timeout after 20 steps (2 s)" in episode.outcome.reason
    assert episode.steps == 20
    assert episode.sim_s == 2.0
    assert [step.time_ns for step in episode.trace] == [k * 100_000_000 for k in range(20)]


def test_rollout_ends_when_the_policy_ends_it():
    ender = FixedSessionPolicy(
        lambda obs, t: EndEpisode("gave up") if t >= 300_000_000 else Step(np.zeros(1), t + 1)
    )
    episode, _ = run(point_eval(), ender)
    assert episode.outcome.kind is OutcomeKind.UNSOLVED
    assert episode.outcome.reason == "policy ended the episode: gave up"
    assert episode.steps == 3


def test_env_that_raises_mid_rollout_is_an_error_and_the_world_rebuilds_it():
    eval = point_eval(raise_at_step=3)
    episode, world = run(eval, ChunkPolicy(GreedyPointModel()))
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert (
        "env step raised RuntimeError: simulated physics blow-up at step 3"
        in episode.outcome.reason
    )
    assert "Traceback" in episode.outcome.details
    assert episode.steps == 2  # the two steps that finished are kept
    broken = world.env_for("reach")
    assert broken.resets == 0, "the env that raised must have been discarded and rebuilt"


def test_env_that_fails_to_reset_is_an_error_naming_the_reset():
    episode, _ = run(point_eval(raise_on_reset=True), ChunkPolicy(GreedyPointModel()))
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert episode.outcome.reason.startswith("env reset raised RuntimeError")


def test_policy_that_raises_is_an_error_naming_the_policy():
    def broken(obs, t):
        raise ZeroDivisionError("bad weights")

    episode, _ = run(point_eval(), FixedSessionPolicy(broken))
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert episode.outcome.reason == "policy raised ZeroDivisionError: bad weights"


def test_wrong_action_shape_names_expected_and_actual_shape():
    wide = FixedSessionPolicy(lambda obs, t: Step(np.zeros(7), t + 1), name="wide")
    episode, _ = run(point_eval(), wide)
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert "policy 'wide' answered action of shape (7,), expected (1,)" in episode.outcome.reason


def test_nan_action_is_an_error():
    nan = FixedSessionPolicy(lambda obs, t: Step(np.array([math.nan]), t + 1))
    episode, _ = run(point_eval(), nan)
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert "not all finite numbers" in episode.outcome.reason


def test_latency_shifts_when_the_first_chunk_starts_playing():
    eval = point_eval(timeout_s=1.0)
    instant, _ = run(eval, ChunkPolicy(GreedyPointModel(horizon=10)))
    late_policy = ChunkPolicy(
        GreedyPointModel(horizon=10), latency=InferenceLatency(LatencyMode.FIXED, 0.3)
    )
    late, _ = run(eval, late_policy)
    # With 0.3 s of latency at 10 Hz the robot holds (zero action) for three steps first.
    assert [float(step.command[0]) for step in late.trace[:3]] == [0.0, 0.0, 0.0]
    assert float(late.trace[3].command[0]) != 0.0
    assert float(instant.trace[0].command[0]) != 0.0
    assert late.statics[keys.POLICY][keys.INFERENCE_LATENCY] == "0.3"
    assert instant.statics[keys.POLICY][keys.INFERENCE_LATENCY] == "none"


def test_statics_record_the_rollout_scene_policy_and_versions():
    episode, _ = run(point_eval(name="point-eval"), ChunkPolicy(GreedyPointModel()), 1)
    statics = episode.statics
    assert statics[keys.EVAL] == "point-eval"
    assert statics[keys.TASK] == "reach"
    assert statics[keys.ROLLOUT_INDEX] == 1
    assert statics[keys.ROLLOUT_COUNT] == 2
    assert statics[keys.SCENE] == {keys.TASK: "reach", keys.SEED: 1}
    assert statics[keys.POLICY][keys.POLICY_NAME] == "greedy"
    assert statics[keys.CONTROL_HZ] == 10.0
    assert "policybench" in statics[keys.PACKAGES]
    record = episode.record()
    assert record[keys.OUTCOME] == "solved"
    assert record[keys.STEPS] == episode.steps


@pytest.mark.parametrize("rollouts", [0])
def test_an_eval_with_no_rollouts_plans_nothing(rollouts):
    assert point_eval().rollouts(rollouts, 0) == ()


def test_a_recorder_that_raises_is_named_and_the_env_is_kept():
    def broken_recorder(time_ns, obs):
        if time_ns > 0:
            raise OSError("disk full")

    eval = point_eval()
    world = World(eval)
    rollout = eval.rollouts(1, 0)[0]
    episode = run_rollout(rollout, world, ChunkPolicy(GreedyPointModel()), broken_recorder)
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert episode.outcome.reason == "recorder raised OSError: disk full"
    assert world.env_for("reach").resets == 1, "a healthy env is not rebuilt for a recorder fault"


def test_an_observer_sees_each_observation_before_its_step():
    seen = []
    eval = point_eval(timeout_s=0.5)
    episode = run_rollout(
        eval.rollouts(1, 0)[0],
        World(eval),
        FixedSessionPolicy(lambda obs, t: Step(np.zeros(1), t + 1)),
        lambda time_ns, obs: seen.append(time_ns),
    )
    assert seen == [step.time_ns for step in episode.trace]


def test_model_calls_and_their_wall_time_are_recorded():
    eval = point_eval(timeout_s=2.0)
    idle_chunks = FixedChunkModel(horizon=4)
    episode, _ = run(eval, ChunkPolicy(idle_chunks))
    record = episode.record()
    assert episode.steps == 20
    assert record[keys.MODEL_CALLS] == 5  # 20 steps, 4 waypoints a chunk
    assert record[keys.INFER_MS_MAX] >= record[keys.INFER_MS_MEAN] > 0.0


def test_a_session_without_call_accounting_is_an_error_naming_the_contract():
    class Bare(FixedSessionPolicy):
        def new_session(self, context):
            return self.answer  # a plain function: no `calls`

    episode = run(point_eval(), Bare(lambda obs, t: Step(np.zeros(1), t + 1), name="bare"))[0]
    assert episode.outcome.kind is OutcomeKind.ERROR
    assert "policy 'bare' opened a function, which is not a Session" in episode.outcome.reason
    assert "lists its model calls in `calls`" in episode.outcome.reason


def test_a_rollout_run_on_another_evals_world_is_refused():
    rollout = point_eval(name="other").rollouts(1, 0)[0]
    with pytest.raises(ValueError, match="belongs to eval 'other', but the World is of eval"):
        run_rollout(rollout, World(point_eval()), FixedSessionPolicy(lambda o, t: None))


def test_a_session_without_a_model_records_no_calls():
    idle = FixedSessionPolicy(lambda obs, t: Step(np.zeros(1), t + 1))
    record = run(point_eval(), idle)[0].record()
    assert record[keys.MODEL_CALLS] == 0
    assert record[keys.INFER_MS_MEAN] is None


class FixedChunkModel:
    name = "still"

    def __init__(self, horizon):
        self.horizon = horizon

    def open(self, context):
        from policybench.policy.base import Chunk

        return lambda obs: Chunk(np.zeros((self.horizon, 1)), context.control_hz)

    def describe(self):
        return {keys.POLICY_NAME: self.name}
