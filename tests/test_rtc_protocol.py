"""The real-time chunking paper's evaluation protocol (chunk H, delay d, execution horizon s), run
by the harness, equals the paper's reference loop step for step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import Chunk
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.latency import InferenceLatency
from policybench.spec import Eval, Rollout, Scene
from policybench.world import World

H = 8  # the paper's chunk length
STEPS = 40  # control steps each rollout runs
CONTROL_HZ = 10.0


class StepCounter(gym.Env):
    """Observes how many steps it has taken; never succeeds, never ends on its own."""

    metadata = {"render_modes": []}
    action_space = gym.spaces.Box(-1e9, 1e9, (3,), np.float64)
    observation_space = gym.spaces.Box(0.0, 1e9, (1,), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.array([0.0]), {}

    def step(self, action):
        self.steps += 1
        return np.array([float(self.steps)]), 0.0, False, False, {"is_success": False}


def labelled_chunk(call: int, seen_step: float) -> np.ndarray:
    """A chunk whose waypoint k says (call number, k, the step its observation was taken at)."""
    return np.array([[call, k, seen_step] for k in range(H)], dtype=float)


def eval_flow_actions(d: int, s: int) -> tuple[list[tuple[int, ...]], list[np.ndarray]]:
    """kinetix's eval_flow.py execution loop, as a plain function over StepCounter: the first
    chunk is computed before the loop; each cycle asks for a chunk from the current observation
    with the previous chunk as prefix, executes A_prev[:d] then A'[d:s], and keeps A'[s:] (padded
    with zeros) as the next prefix. Returns the executed actions and each call's prefix."""
    env = StepCounter()
    obs, _ = env.reset()
    calls = 0
    chunk = labelled_chunk(calls, obs[0])
    prefixes: list[np.ndarray] = []
    executed: list[tuple[int, ...]] = []
    while len(executed) < STEPS:
        calls += 1
        prefixes.append(chunk)
        fresh = labelled_chunk(calls, obs[0])
        for action in np.concatenate([chunk[:d], fresh[d:s]]):
            obs, *_ = env.step(action)
            executed.append(tuple(int(v) for v in action))
        chunk = np.concatenate([fresh[s:], np.zeros((s, 3))])
    return executed[:STEPS], prefixes


class LabelledChunks:
    """A deterministic chunk model: `labelled_chunk` of its call count and the observed step; it
    keeps the prefix and delay each request carried."""

    name = "labelled-chunks"

    def __init__(self) -> None:
        self.prefixes: list[np.ndarray] = []
        self.delays: list[int] = []

    def open(self, context):
        calls = iter(range(10**6))

        def predict(obs):
            if keys.INFERENCE_DELAY in obs:  # in a run with latency
                self.prefixes.append(np.asarray(obs[keys.ACTION_PREFIX]))
                self.delays.append(int(obs[keys.INFERENCE_DELAY]))
            return Chunk(labelled_chunk(next(calls), obs[keys.STATE][0]), context.control_hz)

        return predict

    def describe(self):
        return {"name": self.name}


def counter_eval() -> Eval:
    return Eval(
        name="counter",
        make_env=lambda task: StepCounter(),
        plan=lambda name, per_task, base_seed: (),
        control_hz=CONTROL_HZ,
        hold=lambda last, obs: np.zeros(3),
        hold_name="zero",
    )


def policybench_actions(d: int, s: int) -> tuple[list[tuple[int, ...]], LabelledChunks]:
    eval = counter_eval()
    rollout = Rollout(
        eval.name, 0, 1, "count", timeout_s=STEPS / CONTROL_HZ, scene=Scene("count", 0)
    )
    model = LabelledChunks()
    latency = InferenceLatency.parse(f"steps:{d}")
    policy = ChunkPolicy(model, execute_steps=s, latency=latency, warm_start=True)
    episode = run_rollout(rollout, World(eval), policy)
    assert episode.steps == STEPS, episode.outcome
    return [tuple(int(v) for v in step.command) for step in episode.trace], model


PROTOCOLS = [(d, s) for d in range(5) for s in range(max(1, d), H - d + 1)]


@pytest.mark.parametrize(("d", "s"), PROTOCOLS, ids=[f"d={d}-s={s}" for d, s in PROTOCOLS])
def test_executed_actions_equal_the_reference_loop_step_for_step(d, s):
    expected, reference_prefixes = eval_flow_actions(d, s)
    played, model = policybench_actions(d, s)
    assert played == expected
    # With a delay, each charged call was told it and the chunk still to play: the reference
    # loop's prefix, less its zero padding (without one, requests carry neither).
    if d == 0:
        assert model.delays == model.prefixes == []
        return
    assert model.delays[0] == 0 and model.delays[1:] == [d] * (len(model.delays) - 1)
    for told, reference in zip(model.prefixes[1:], reference_prefixes, strict=False):
        np.testing.assert_array_equal(told, reference[: len(told)])
        assert not reference[len(told) :].any()


def test_the_reference_loop_replays_the_delayed_prefix_before_the_new_chunk():
    # d=2, s=3: call 1 (from step 0) plays chunk 0's waypoints 0-1, then its own waypoint 2;
    # call 2 (from step 3) plays call 1's waypoints 3-4, then its own waypoint 2.
    expected, _ = eval_flow_actions(2, 3)
    assert expected[:6] == [(0, 0, 0), (0, 1, 0), (1, 2, 0), (1, 3, 0), (1, 4, 0), (2, 2, 3)]


def test_an_execution_horizon_past_the_chunk_less_the_delay_is_a_clear_error():
    eval = counter_eval()
    rollout = Rollout(eval.name, 0, 1, "count", timeout_s=1.0, scene=Scene("count", 0))
    policy = ChunkPolicy(
        LabelledChunks(), execute_steps=6, latency=InferenceLatency.parse("steps:3")
    )
    episode = run_rollout(rollout, World(eval), policy)
    assert episode.outcome.kind.value == "error"
    assert "valid s lie in [max(1, d), H - d] = 3..5" in episode.outcome.reason


def test_an_execution_horizon_shorter_than_the_delay_is_refused_before_any_call():
    with pytest.raises(ValueError, match=r"takes at least max\(1, d\) = 3"):
        ChunkPolicy(
            LabelledChunks(), execute_steps=2, latency=InferenceLatency.parse("steps:3")
        ).new_session(counter_context())


def counter_context():
    from policybench.policy.base import SessionContext

    return SessionContext("count", CONTROL_HZ)
