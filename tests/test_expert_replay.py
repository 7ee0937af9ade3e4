"""The Eval's expert replayed after the run on the observations a rollout kept gives, step for
step, the actions it gives watching the rollout live: PushT's (which reads the block's pose
from pixels, so its rollouts keep their images) and MetaWorld's (state alone) on real envs
under random actions. A diagnosis replays it only where it looks (an Eval at 10% or below, or a
task of one above it), and writes what it replayed into the trace. A kept file that is not one,
or would inflate past its limit, is refused with its name."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from policybench.policy.base import Chunk, SessionContext
from policybench.record import shadow
from policybench.record.rollout_trace import (
    EXPERT_ACTION,
    FORMAT,
    KEPT_OBSERVATIONS,
    encode_array,
    read_trace,
    write_trace,
)
from policybench.record.shadow import ObservationKeeper, read_kept, replay
from policybench.report.diagnosis import diagnoses
from policybench.suites import eval_named
from policybench.world import World

STEPS = 60


@pytest.mark.parametrize(
    ("eval_name", "task", "module"),
    [("pusht", "push-t", "gym_pusht"), ("metaworld-mt10", "pick-place-v3", "metaworld")],
)
def test_a_replay_is_the_expert_watching_live(tmp_path, eval_name, task, module):
    pytest.importorskip(module)
    eval = eval_named(eval_name)
    [rollout] = [r for r in eval.rollouts(2, 0) if r.scene.task == task][-1:]
    context = SessionContext(rollout.instruction, eval.control_hz)
    world = World(eval)
    live = eval.scripted().open(context)  # as the expert watched every rollout before
    keeper = ObservationKeeper(eval.expert_reads)
    watched = []
    obs = world.reset(rollout.scene)
    space, rng = world.action_space, np.random.default_rng(0)
    for step in range(STEPS):
        keeper(step, obs)
        watched.append(np.asarray(live(obs).actions[0], np.float32))
        obs = world.step(rng.uniform(space.low, space.high).astype(space.dtype)).obs
    world.close()
    path = tmp_path / "kept" / "r.npz"
    expert = {"eval": eval.name, "ref": None, "folder": None}
    assert keeper.write(path, STEPS, context, expert) is None
    kept = read_kept(path)
    assert set(kept.observations) == set(eval.expert_reads)
    actions, why_not = replay(eval.scripted(), kept)
    assert why_not is None
    np.testing.assert_array_equal(actions, np.stack(watched))
    assert np.ptp(actions, axis=0).max() > 0  # the expert acted, not a constant


def test_a_keeper_missing_an_entry_keeps_nothing_and_says_which(tmp_path):
    keeper = ObservationKeeper(("state", "goal"))
    for step in range(3):
        keeper(step, {"state": np.zeros(2)})
    said = keeper.write(tmp_path / "k" / "r.npz", 3, SessionContext("t", 10.0), {"eval": "x"})
    assert said == "observations without goal"
    assert not (tmp_path / "k" / "r.npz").exists()


def test_a_kept_file_that_is_not_one_or_would_inflate_is_refused(tmp_path, monkeypatch):
    keeper = ObservationKeeper()
    for step in range(4):
        keeper(step, {"image": np.zeros((32, 32, 3), np.uint8)})
    path = tmp_path / "kept" / "r.npz"
    assert keeper.write(path, 4, SessionContext("t", 10.0), {"eval": "x"}) is None
    monkeypatch.setattr(shadow, "DECODED_LIMIT", 1000)  # the image alone inflates to 12 kB
    with pytest.raises(ValueError, match=r"r\.npz is not .* would decompress to [\d,]+ bytes"):
        read_kept(path)
    other = tmp_path / "other.npz"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("meta.npy", b"not numpy")
    with pytest.raises(ValueError, match=r"other\.npz is not a readable file of kept"):
        read_kept(other)


class Echo:
    """A stand-in expert (a real one is replayed above): its action is the state it is shown;
    it counts the rollouts it is replayed on."""

    name = "echo"

    def __init__(self) -> None:
        self.opened = 0

    def open(self, context):
        self.opened += 1
        return lambda obs: Chunk(np.asarray(obs["state"], np.float32)[None], context.control_hz)

    def describe(self):
        return {"name": self.name}


def _rollout(run_dir, index, task, outcome, keep):
    """A record and its trace of 5 steps of 2-D actions, the first of its task keeping its
    observations for the expert."""
    name = f"r{index}"
    steps, context = 5, SessionContext("t", 10.0)
    arrays = {"action": encode_array(np.ones((2, steps), np.float32) * index)}
    trace = {"format": FORMAT, "steps": steps, "state_left_out": {}, "arrays": arrays}
    if keep:
        keeper = ObservationKeeper(("state",))
        for step in range(steps):
            keeper(step, {"state": np.array([step, -step], np.float64)})
        keeper.write(run_dir / "kept" / f"{name}.npz", steps, context, {"eval": "e"})
        trace[KEPT_OBSERVATIONS] = f"kept/{name}.npz"
    write_trace(run_dir / "traces" / f"{name}.json", trace)
    return {"eval": "e", "task": task, "rollout_index": index, "outcome": outcome,
            "rollout_trace": f"traces/{name}.json"}  # fmt: skip


@pytest.mark.parametrize(
    ("outcomes", "replayed"),
    [
        # task a at 50%, b at 0%: the Eval (25%) is not diagnosed; only b is looked at
        ({"a": ["solved", "unsolved"], "b": ["unsolved", "unsolved"]}, ["b"]),
        # every task at 0%: the Eval is diagnosed, every kept rollout replayed
        ({"a": ["unsolved", "unsolved"], "b": ["unsolved", "unsolved"]}, ["a", "b"]),
        # all solved: nothing to diagnose
        ({"a": ["solved", "solved"], "b": ["solved", "solved"]}, []),
    ],
)
def test_the_expert_is_replayed_only_where_a_diagnosis_looks(tmp_path, outcomes, replayed):
    records, index = [], 0
    for task, ended in outcomes.items():
        # the first rollout of each task kept its observations; make it the unsolved one
        for ordinal, outcome in enumerate(sorted(ended, key=lambda o: o != "unsolved")):
            records.append(_rollout(tmp_path, index, task, outcome, keep=ordinal == 0))
            index += 1
    expert = Echo()
    diagnoses(records, tmp_path, expert_of=lambda found: expert)
    with_actions = sorted(
        r["task"]
        for r in records
        if EXPERT_ACTION in read_trace(tmp_path / r["rollout_trace"])["arrays"]
    )
    assert with_actions == replayed and expert.opened == len(replayed)
    for record in records:  # what was replayed is the expert's action at each kept step
        arrays = read_trace(tmp_path / record["rollout_trace"])["arrays"]
        if EXPERT_ACTION in arrays:
            np.testing.assert_array_equal(arrays[EXPERT_ACTION], [range(5), range(0, -5, -1)])
