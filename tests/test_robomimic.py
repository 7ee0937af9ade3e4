"""robomimic's tasks, in their interpreter (robosuite 1.4.1, MuJoCo 2.3.7): each Eval's first
observation and a fixed action sequence's trajectory equal, bit for bit, a plain loop written
as Diffusion Policy's image runner runs its test episodes on robomimic 0.3.0's own env code
(tests/robomimic_03.py; same interpreter, same stack)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from policybench.suites import robomimic
from policybench.world import World
from tests.interpreters import built_python

HERE = Path(__file__).resolve().parent
STEPS = 6
EVALS = [robomimic.LIFT, robomimic.CAN, robomimic.SQUARE, robomimic.TRANSPORT, robomimic.TOOL_HANG]


@pytest.fixture(scope="module")
def python() -> Path:
    return built_python(robomimic.INTERPRETER)


@pytest.fixture(scope="module")
def sdist() -> Path:
    """robomimic 0.3.0's sdist (`pip download --no-deps --no-binary :all: robomimic==0.3.0`)."""
    folder = os.environ.get("ROBOMIMIC_SDIST")
    found = sorted(Path(folder).glob("robomimic-0.3.0.tar.gz")) if folder else []
    if not found:
        pytest.skip(
            "needs $ROBOMIMIC_SDIST, a folder holding robomimic-0.3.0.tar.gz (tox fetches it)"
        )
    return found[0]


def reference(python: Path, sdist: Path, task: str, seed: int, out: Path) -> dict[str, np.ndarray]:
    command = [str(python), str(HERE / "robomimic_03.py"), str(sdist), task, str(seed), str(STEPS)]
    subprocess.run([*command, str(out)], check=True, cwd=out.parent)
    with np.load(out) as saved:
        return dict(saved)


def assert_same(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], at: str) -> None:
    assert sorted(ours) == sorted(theirs), at
    for key, array in theirs.items():
        assert ours[key].dtype == array.dtype and ours[key].shape == array.shape, (at, key)
        assert np.array_equal(ours[key], array), (at, key)


@pytest.mark.parametrize("eval", EVALS, ids=[e.name for e in EVALS])
def test_first_observation_and_trajectory_are_diffusion_policys_bit_for_bit(
    eval, python, sdist, tmp_path
):
    [rollout] = eval.rollouts(1, 0)
    task, seed = rollout.scene.task, rollout.scene.seed
    assert seed == robomimic.TEST_START_SEED  # the runner's first test episode
    saved = reference(python, sdist, task, seed, tmp_path / "reference.npz")
    world = World(eval)
    try:
        first = world.reset(rollout.scene)
        assert_same(first, part(saved, "first"), "first observation")
        for i, action in enumerate(saved["actions"]):
            step = world.step(action)
            assert_same(step.obs, part(saved, f"step{i}"), f"step {i}")
            assert (
                step.reward == saved[f"step{i}/reward"]
                and step.success == saved[f"step{i}/success"]
            )
    finally:
        world.close()


def part(saved: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {
        key.removeprefix(f"{prefix}/"): value
        for key, value in saved.items()
        if key.startswith(f"{prefix}/") and key.rpartition("/")[2] not in ("reward", "success")
    }


def test_a_task_robomimic_lacks_is_refused_with_its_tasks(python):
    from policybench.envserver.proxy import EnvServerError

    with pytest.raises(EnvServerError, match="no robomimic task 'stack'; its tasks: lift, can"):
        robomimic.LIFT.make_env("stack")


class Seeing:
    """A model that notes a digest of every observation it is asked about, per rollout, and
    answers one fixed action (a move that closes the gripper)."""

    name = "seeing"

    def __init__(self) -> None:
        self.seen: dict[int, list[str]] = {}

    def open(self, context):
        from policybench.policy.base import Chunk

        log = self.seen.setdefault(id(context), [])

        def predict(obs):
            digest = hashlib.sha256()
            for key in sorted(obs):
                digest.update(key.encode() + np.ascontiguousarray(obs[key]).tobytes())
            log.append(digest.hexdigest())
            return Chunk(np.array([[0.3, -0.2, -0.3, 0, 0, 0.1, 1.0]]), context.control_hz)

        return predict

    def describe(self):
        return {"policy_name": self.name}


def test_rendering_envs_side_by_side_in_one_server_see_what_each_sees_alone(python):
    """--envs-per-worker 2 on robomimic: both envs in one env server, each on a thread of its
    own there (each renders through a GL context of its own); every observation, images
    included, is the one its rollout shows alone."""
    from policybench.harness import run_rollout
    from policybench.lockstep import Lockstep
    from policybench.policy.chunk_player import ChunkPolicy

    rollouts = [dataclasses.replace(r, timeout_s=0.3) for r in robomimic.LIFT.rollouts(2, 0)]
    alone = []
    for rollout in rollouts:
        model, world = Seeing(), World(robomimic.LIFT)
        try:
            run_rollout(rollout, world, ChunkPolicy(model))
        finally:
            world.close()
        alone += model.seen.values()
    model, lockstep = Seeing(), Lockstep(robomimic.LIFT, 2)
    try:
        lockstep.run(rollouts, ChunkPolicy(model))
        servers = {world._env.server_pid for world in lockstep.worlds}
    finally:
        lockstep.close()
    assert len(servers) == 1 and all(len(seen) == 6 for seen in alone)
    assert sorted(model.seen.values()) == sorted(alone) and alone[0] != alone[1]


def test_an_action_moved_by_a_thousandth_still_fails_the_golden(python):
    """The CPU tolerance of robomimic's goldens does not make them blind: one action of
    Transport's golden episode moved by 1e-3 fails it (its commands are compared exactly; its
    observations move by about 1e-5, as much as another CPU's numerics move them)."""
    import json

    from benchmarks.golden_pipelines import isolated_trace
    from benchmarks.test_robomimic import moves
    from policybench.record.trace import differences

    golden = json.loads(
        (
            HERE.parent / "goldens/test_robomimic/test_robomimic_golden[robomimic-transport].json"
        ).read_text()
    )
    actions = moves(2)
    actions[1, 0] += 1e-3
    [rollout] = robomimic.TRANSPORT.rollouts(1, 0)
    trace = isolated_trace(
        robomimic.TRANSPORT, rollout.scene.task, actions, 0.4, robomimic.CPU_NUMERICS
    )
    assert [d.path for d in differences(golden, trace)] == ["trace[1].command[0]"]
    moved = abs(
        trace["trace"][7]["obs"]["robot0_eef_pos"][0]
        - golden["trace"][7]["obs"]["robot0_eef_pos"][0]
    )
    assert 1e-6 < moved < 1e-3  # what the tolerance could not tell from another CPU's numerics


def test_the_lift_expert_replayed_on_what_a_rollout_keeps_is_the_expert_watching_live(
    python, tmp_path
):
    """A rollout keeps only the entries the expert reads (not the cameras' images), and the
    expert replayed on them after the run acts as it does watching live, step for step."""
    from policybench.policy.base import SessionContext
    from policybench.record.shadow import ObservationKeeper, read_kept, replay

    eval, steps = robomimic.LIFT, 30
    [rollout] = eval.rollouts(1, 0)
    context = SessionContext(rollout.instruction, eval.control_hz)
    live, keeper, watched = eval.scripted().open(context), ObservationKeeper(eval.expert_reads), []
    world = World(eval)
    try:
        obs, rng = world.reset(rollout.scene), np.random.default_rng(0)
        for step in range(steps):
            keeper(step, obs)
            watched.append(np.asarray(live(obs).actions[0], np.float32))
            space = world.action_space
            obs = world.step(rng.uniform(space.low, space.high).astype(space.dtype)).obs
    finally:
        world.close()
    assert keeper.write(tmp_path / "kept" / "r.npz", steps, context, {"eval": eval.name}) is None
    kept = read_kept(tmp_path / "kept" / "r.npz")
    assert sorted(kept.observations) == sorted(eval.expert_reads)
    actions, why_not = replay(eval.scripted(), kept)
    assert why_not is None
    np.testing.assert_array_equal(actions, np.stack(watched))
