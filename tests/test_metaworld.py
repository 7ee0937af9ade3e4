"""The MetaWorld suite on the real simulator: scenes are staged from the seed alone, Worlds are
reused without carrying state between rollouts, and xdist gives the same outcomes as one process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "metaworld", reason="MetaWorld not installed: pip install 'policybench[metaworld]'"
)

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.base import SessionContext
from policybench.policy.chunk_player import ChunkPolicy
from policybench.record.episode import OutcomeKind
from policybench.spec import Scene
from policybench.suites.metaworld import MT10, MT10_STATE
from policybench.world import World

REPO = Path(__file__).resolve().parents[1]


def test_a_seed_stages_the_same_placement_and_different_seeds_differ():
    world = World(MT10_STATE)
    first = world.reset(Scene("pick-place-v3", 3))["state"].copy()
    world.reset(Scene("pick-place-v3", 4))
    again = world.reset(Scene("pick-place-v3", 3))["state"]
    other = World(MT10_STATE).reset(Scene("pick-place-v3", 4))["state"]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_a_reused_world_replays_a_rollout_exactly():
    policy = ChunkPolicy(MT10_STATE.scripted())
    rollouts = {r.id: r for r in MT10_STATE.rollouts(3, 0)}
    target = rollouts["push-v3/seed=2"]
    fresh = run_rollout(target, World(MT10_STATE), policy)
    world = World(MT10_STATE)
    for warmup in ("push-v3/seed=0", "reach-v3/seed=1"):
        run_rollout(rollouts[warmup], world, policy)
    reused = run_rollout(target, world, policy)
    assert fresh.steps == reused.steps
    for a, b in zip(fresh.trace, reused.trace, strict=True):
        np.testing.assert_array_equal(a.command, b.command)
        assert a.reward == b.reward


def test_expert_solves_every_mt10_task_on_seed_zero():
    world, policy = World(MT10_STATE), ChunkPolicy(MT10_STATE.scripted())
    outcomes = {
        r.scene.task: run_rollout(r, world, policy).outcome.kind for r in MT10_STATE.rollouts(1, 0)
    }
    assert outcomes == dict.fromkeys(MT10, OutcomeKind.SOLVED)


def outcomes_of(pytester: pytest.Pytester, report_dir: Path, *args: str) -> dict[str, tuple]:
    result = pytester.runpytest_subprocess(
        str(REPO / "benchmarks" / "test_metaworld.py"),
        f"--rootdir={REPO}",
        "-p",
        "no:cacheprovider",
        f"--report-dir={report_dir}",
        *args,
    )
    assert result.ret == 0, result.stdout.str()
    lines = (report_dir / "latest" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return {r["nodeid"]: (r["outcome"], r["steps"], r["reason"]) for r in records}


@pytest.mark.parametrize("policy", ["scripted", "random"])
def test_two_workers_give_the_same_outcomes_as_one_process(pytester, tmp_path, policy):
    # Two rollouts of two tasks: one process runs all four in turn, two workers share them (the
    # pytest processes' start, not the rollouts, is most of this test's time).
    select = ("--rollouts", "2", "-k", "reach or pick-place", f"--policy={policy}")
    serial = outcomes_of(pytester, tmp_path / "serial", "-n", "0", *select)
    parallel = outcomes_of(pytester, tmp_path / "parallel", "-n", "2", *select)
    assert sorted(serial) == sorted(parallel)
    assert len(serial) == 4
    assert all("reach-v3" in nodeid or "pick-place-v3" in nodeid for nodeid in serial)
    assert serial == parallel


def test_an_expert_that_writes_into_its_observation_takes_a_read_only_one():
    # A served observation arrives read-only (decoded without a copy); door-open's expert
    # shifts the door position it reads in place.
    world = World(MT10_STATE)
    rollout = next(r for r in MT10_STATE.rollouts(1, 0) if r.scene.task == "door-open-v3")
    obs = world.reset(rollout.scene)
    state = obs[keys.STATE].copy()
    state.flags.writeable = False
    context = SessionContext(rollout.instruction, MT10_STATE.control_hz)
    chunk = MT10_STATE.scripted().open(context)({**obs, keys.STATE: state})
    assert chunk.actions.shape == (1, 4)
    world.close()
