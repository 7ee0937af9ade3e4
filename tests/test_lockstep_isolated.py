"""`--envs-per-worker K` on an Eval whose envs run in an interpreter of their own: the K envs
live in one env server and their steps cross K to a frame, with real server processes; the
Episodes are the ones each rollout gives alone in this process, an env that raises fails only
its own rollout, and a server that dies fails its K rollouts and is replaced for the next."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from policybench.envserver import ENV_PYTHON_VARIABLE, Interpreter, Isolated, proxy
from policybench.lockstep import Lockstep
from policybench.policy.chunk_player import ChunkPolicy
from policybench.record.episode import OutcomeKind
from tests.envs import GreedyPointModel, point_eval
from tests.test_lockstep import PerRolloutBatched, alone_and_side_by_side, comparable

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Each round of steps sent together, as (steps, servers); the servers see the repository
    on their path (for tests.envs)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    seen: list[tuple[int, int]] = []
    step_together = proxy.step_together

    def counted(steps, publish):
        seen.append((len(steps), len({id(p.server) for p, _ in steps})))
        return step_together(steps, publish)

    monkeypatch.setattr(proxy, "step_together", counted)
    return seen


def solved(episode) -> bool:
    return episode.outcome.kind is OutcomeKind.SOLVED


def isolated_point(**env_kwargs):
    eval = point_eval(tasks={"a": "reach a", "b": "reach b"}, timeout_s=1.0)
    python = Interpreter("tests", python=sys.executable)
    return dataclasses.replace(eval, make_env=Isolated("tests.envs:make_point", python, env_kwargs))


def run_side_by_side(eval, rollouts, policy, slots):
    lockstep = Lockstep(eval, slots)
    try:
        episodes = lockstep.run(rollouts, policy)
        servers = {world._env.server_pid for world in lockstep.worlds if world._env is not None}
        return episodes, servers
    finally:
        lockstep.close()


@pytest.mark.parametrize("batching", [True, False], ids=["batching-model", "own-sources"])
def test_k_isolated_envs_share_one_server_and_step_k_to_a_frame(rounds, batching):
    eval = isolated_point()
    rollouts = eval.rollouts(2, 0)  # four: two tasks, two seeds
    model = GreedyPointModel()
    policy = ChunkPolicy(PerRolloutBatched(model) if batching else model)
    episodes, servers = run_side_by_side(eval, rollouts, policy, slots=4)
    assert len(servers) == 1 and os.getpid() not in servers
    assert all(solved(e) for e in episodes)
    # Every step crossed in a round of the slots still running, one frame to the one server.
    assert sum(steps for steps, _ in rounds) == sum(e.steps for e in episodes)
    assert {servers for _, servers in rounds} == {1}
    assert len(rounds) == max(e.steps for e in episodes) and rounds[0][0] == 4


def test_side_by_side_in_one_server_equals_each_rollout_alone_in_this_process(rounds):
    pytest.importorskip("metaworld")
    import policybench.suites.metaworld as metaworld

    tasks = {name: metaworld.MT10[name] for name in ("reach-v3", "push-v3")}
    here = metaworld.mt10(tasks=tasks)
    os.environ[ENV_PYTHON_VARIABLE] = sys.executable  # what isolable reads, once, at mt10()
    try:
        isolated = metaworld.mt10(tasks=tasks)
    finally:
        del os.environ[ENV_PYTHON_VARIABLE]
    assert isinstance(isolated.make_env, Isolated)
    timeouts = (2.0, 0.5, 1.0, 2.0)  # they end at different steps
    rollouts = [
        dataclasses.replace(r, timeout_s=t)
        for r, t in zip(here.rollouts(2, 0), timeouts, strict=True)
    ]
    expert = lambda: metaworld.MetaWorldExpert(metaworld.MT10)  # noqa: E731
    alone, _, _ = alone_and_side_by_side(here, rollouts, expert, slots=4)
    together, servers = run_side_by_side(
        isolated, rollouts, ChunkPolicy(PerRolloutBatched(expert())), slots=4
    )
    assert [comparable(e) for e in together] == [comparable(e) for e in alone]
    assert len(servers) == 1 and max(steps for steps, _ in rounds) == 4


def test_an_env_that_raises_in_a_round_fails_its_own_rollout_alone(rounds):
    eval = isolated_point(raise_at_step=3, seed_that_raises=1)
    rollouts = eval.rollouts(2, 0)
    episodes, _ = run_side_by_side(eval, rollouts, ChunkPolicy(GreedyPointModel()), slots=4)
    failed = [r.scene.seed for r, e in zip(rollouts, episodes, strict=True) if e.outcome.is_error]
    assert failed == [1, 1]  # task a's and task b's seed 1
    assert all(
        "simulated physics blow-up at step 3" in e.outcome.reason
        for e in episodes
        if e.outcome.is_error
    )
    assert all(solved(e) for e in episodes if not e.outcome.is_error)


def test_a_server_that_dies_fails_the_rollouts_it_held_and_the_next_group_gets_another(rounds):
    eval = isolated_point(raise_at_step=2, seed_that_dies=0)
    lockstep = Lockstep(eval, 2)
    try:
        first = lockstep.run(eval.rollouts(1, 0), ChunkPolicy(GreedyPointModel()))
        second = lockstep.run(eval.rollouts(1, 1), ChunkPolicy(GreedyPointModel()))
        servers = {w._env.server_pid for w in lockstep.worlds if w._env is not None}
    finally:
        lockstep.close()
    for episode in first:
        assert episode.outcome.is_error and "ended at steps" in episode.outcome.reason
    assert all(solved(e) for e in second) and len(servers) == 1
