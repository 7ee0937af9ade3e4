"""ChunkPlayer: chunk playback in simulated time, replanning and latency charging."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policybench.policy.base import Chunk
from policybench.policy.chunk_player import ChunkAnchor, ChunkPlayer
from policybench.policy.latency import InferenceLatency, LatencyMode

PERIOD_NS = 100_000_000  # 10 Hz control
FPS = 10.0


class ScriptedChunks:
    """Answers the given chunk lengths in turn; waypoint values are (chunk number, index)."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = list(lengths)
        self.asked_at: list[int] = []

    def __call__(self, obs) -> Chunk:
        number = len(self.asked_at)
        self.asked_at.append(int(obs["t"][0]))
        length = self.lengths[number % len(self.lengths)]
        return Chunk(np.array([[number, k] for k in range(length)], dtype=float), FPS)


def play(player: ChunkPlayer, ticks: int) -> list[tuple[int, tuple[int, int] | None]]:
    """Drives the player like the harness: one tick per control period, calls when it asks."""
    played, resume_at = [], 0
    for tick in range(ticks):
        now = tick * PERIOD_NS
        if now < resume_at:
            played.append((now, None))
            continue
        step = player({"t": np.array([now])}, now)
        assert step.resume_at_ns > now, "a session must ask to be called in the future"
        resume_at = step.resume_at_ns
        command = None if step.commands is None else tuple(int(v) for v in step.commands)
        played.append((now, command))
    return played


@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    execute_steps=st.one_of(st.none(), st.integers(1, 12)),
    ticks=st.integers(1, 80),
)
@settings(max_examples=300, deadline=None)
def test_every_waypoint_is_played_once_at_its_time(lengths, execute_steps, ticks):
    source = ScriptedChunks(lengths)
    played = play(ChunkPlayer(source, execute_steps=execute_steps, period_ns=PERIOD_NS), ticks)

    # Without latency the robot is commanded at every tick, never twice the same waypoint.
    commands = [command for _, command in played]
    assert None not in commands
    assert len(set(commands)) == len(commands)
    # Chunk n was asked at tick t_n and its waypoint k plays at t_n + k periods, in order,
    # until the chunk drains or `execute_steps` ticks have passed since it was asked.
    for now, (number, k) in played:
        assert now == source.asked_at[number] + k * PERIOD_NS
    for number in range(len(source.asked_at)):
        length = lengths[number % len(lengths)]
        quota = length if execute_steps is None else min(length, execute_steps)
        mine = [k for _, (n, k) in played if n == number]
        expected = list(range(quota))
        assert mine == expected[: len(mine)]
        if number < len(source.asked_at) - 1:
            assert mine == expected, "a chunk was cut short before its quota"


def test_a_k_action_chunk_plays_k_steps_then_asks_again():
    source = ScriptedChunks([4])
    played = play(ChunkPlayer(source), 9)
    assert [command for _, command in played] == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)
    ]  # fmt: skip
    assert source.asked_at == [0, 4 * PERIOD_NS, 8 * PERIOD_NS]


def test_fixed_latency_delays_the_first_chunk_and_drops_waypoints_already_past():
    source = ScriptedChunks([6])
    latency = InferenceLatency(LatencyMode.FIXED, 0.25)  # 2.5 ticks
    played = play(ChunkPlayer(source, latency=latency), 6)
    # Nothing to play until the chunk arrives at 0.25 s; the first tick after is 0.3 s, where
    # waypoint 3 (anchored at the observation, t=0) is due and 0..2 are already past.
    assert [command for _, command in played] == [None, None, None, (0, 3), (0, 4), (0, 5)]


def test_arrival_anchor_plays_a_late_chunk_from_its_first_waypoint():
    source = ScriptedChunks([6])
    latency = InferenceLatency(LatencyMode.FIXED, 0.25)
    player = ChunkPlayer(source, latency=latency, anchor=ChunkAnchor.ARRIVAL)
    played = play(player, 6)
    assert [command for _, command in played] == [None, None, None, (0, 0), (0, 1), (0, 2)]


def test_previous_chunk_keeps_playing_while_the_next_is_in_flight():
    source = ScriptedChunks([8])
    latency = InferenceLatency(LatencyMode.FIXED, 0.2)  # 2 ticks
    played = play(ChunkPlayer(source, execute_steps=5, latency=latency, period_ns=PERIOD_NS), 10)
    commands = [command for _, command in played]
    # Chunk 0 arrives at tick 2 (plays its waypoint 2), plays 3 waypoints, then at tick 5 (five
    # steps after the first call) chunk 1 is asked; chunk 0 keeps playing until chunk 1 arrives
    # at tick 7 with waypoint 2 due.
    assert commands[:2] == [None, None]
    assert commands[2:7] == [(0, 2), (0, 3), (0, 4), (0, 5), (0, 6)]
    assert commands[7] == (1, 2)
    assert source.asked_at == [0, 5 * PERIOD_NS]


def test_at_most_one_call_is_in_flight():
    source = ScriptedChunks([1])
    latency = InferenceLatency(LatencyMode.FIXED, 0.35)
    player = ChunkPlayer(source, latency=latency)
    play(player, 20)
    asked = [call.asked_ns for call in player.calls]
    arrived = [call.arrives_ns for call in player.calls]
    assert all(ask >= previous for ask, previous in zip(asked[1:], arrived, strict=False))
    # Asked at tick 0, arrives at 3.5, plays its one waypoint at tick 4, drained: asks at tick 5.
    assert asked == [0, 5 * PERIOD_NS, 10 * PERIOD_NS, 15 * PERIOD_NS]


def test_measured_latency_charges_the_wall_time_of_the_call():
    source = ScriptedChunks([3])
    clock = iter([0, 123_000_000, 500_000_000, 500_000_000])
    player = ChunkPlayer(
        source, latency=InferenceLatency(LatencyMode.MEASURED), wall_clock_ns=lambda: next(clock)
    )
    player({"t": np.array([0])}, 0)
    assert player.calls[0].arrives_ns == 123_000_000


@pytest.mark.parametrize("text", ["fast", "-1", "nan", "inf"])
def test_bad_latency_text_says_what_is_accepted(text):
    with pytest.raises(ValueError, match="'none', seconds >= 0"):
        InferenceLatency.parse(text)


def test_latency_parses_its_three_modes():
    assert InferenceLatency.parse("none").mode is LatencyMode.NONE
    assert InferenceLatency.parse("measured").mode is LatencyMode.MEASURED
    assert InferenceLatency.parse("0.1") == InferenceLatency(LatencyMode.FIXED, 0.1)
    assert InferenceLatency.parse("0") == InferenceLatency()


def test_a_model_answering_a_flat_action_gets_a_clear_error():
    with pytest.raises(ValueError, match=r"shape \[H>=1, D\].*actions\[None\]"):
        Chunk(np.zeros(4), 10.0)
