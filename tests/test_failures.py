"""Where a run's unsolved rollouts cluster (report.failures): over real trace files, rollouts
that failed the same way and ended in the same state are one cluster, told apart from those that
ended elsewhere, stalled elsewhere or violated a spec; and a real run's report says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from policybench import keys
from policybench.record.rollout_trace import FORMAT, encode_array
from policybench.report.failures import clusters_lines, failure_clusters
from tests.test_readme import example_source


def rollout(run_dir: Path, n: int, outcome: str, path: np.ndarray, **more) -> dict:
    """A record of the toy Eval and its trace: `path` the state, a row per number."""
    name = f"traces/{n}.json"
    (run_dir / "traces").mkdir(exist_ok=True)
    arrays = {"state/state": encode_array(path.astype(np.float16))}
    (run_dir / name).write_text(json.dumps({"format": FORMAT, "arrays": arrays}))
    return {
        keys.EVAL: "toy",
        keys.TASK: more.pop("task", "reach"),
        keys.NODEID: f"test_toy[{n}]",
        keys.OUTCOME: outcome,
        keys.REASON: "timeout after 50 steps" if outcome == "unsolved" else "success",
        keys.ROLLOUT_TRACE: name,
        **more,
    }


def towards(goal: tuple[float, float], stop: int, steps: int = 50) -> np.ndarray:
    """A path from the origin that reaches `goal` at step `stop` and stays there."""
    share = np.minimum(np.arange(steps) / stop, 1.0)
    return np.outer(goal, share)


def test_rollouts_that_ended_alike_cluster_apart_from_those_that_did_not(tmp_path):
    rng = np.random.default_rng(0)
    jitter = lambda: rng.normal(0, 0.005, (2, 50))  # noqa: E731
    records = [rollout(tmp_path, n, "solved", towards((1.0, 1.0), 40) + jitter()) for n in range(6)]
    records += [  # stuck halfway early
        rollout(tmp_path, 10 + n, "unsolved", towards((0.5, 0.0), 10) + jitter(), task=task)
        for n, task in enumerate(["reach", "reach", "reach", "push", "push"])
    ]
    records += [  # overshot, moving to the end
        rollout(tmp_path, 20 + n, "unsolved", towards((2.5, 1.0), 50) + jitter()) for n in range(5)
    ]
    records.append(  # near the overshooting ones, too few to be a pattern of its own
        rollout(tmp_path, 26, "unsolved", towards((2.2, 1.4), 50) + jitter())
    )
    spec = {"margin": -0.2, "step": 3, "time_s": 0.3, "values": None, "first_violated_step": 3}
    records.append(
        rollout(tmp_path, 30, "unsolved", towards((0.5, 0.0), 10), specs={"no_collision": spec})
    )
    clusters = failure_clusters(records, tmp_path)
    assert [len(c.rollouts) for c in clusters] == [6, 5, 1]
    overshot, stuck, violated = clusters
    assert "test_toy[26]" in overshot.rollouts
    assert stuck.tasks == {"reach": 3, "push": 2} and stuck.share == pytest.approx(5 / 12)
    # within STILL of the Eval's range from a little before step 10, where it stopped
    assert re.fullmatch(
        r"still from step ([789]|10) \(median; 1\d% of the episode\)", stuck.stalled
    )
    # y short of the solved rollouts' end; x by less than an sd of the Eval's final x (the
    # overshooting rollouts widen it)
    assert [name for name, _ in stuck.furthest] == ["state[1]"] and stuck.furthest[0][1] < -1
    assert set(stuck.rollouts) == {f"test_toy[{n}]" for n in range(10, 15)}
    assert overshot.stalled == "still moving near the end"
    assert overshot.furthest[0][0] == "state[0]" and overshot.furthest[0][1] > 1
    assert violated.how == "timeout after 50 steps; violated no_collision"
    lines = clusters_lines(clusters)
    assert lines[1] == "how the unsolved rollouts failed: 3 clusters"
    assert lines[2].startswith("  toy: 6 unsolved (50%), timeout after 50 steps; still moving")
    assert lines[3].startswith("  toy: 5 unsolved (42%), timeout after 50 steps; still from step ")


def test_without_traces_a_cluster_is_a_way_of_failing(tmp_path):
    records = [
        {keys.EVAL: "toy", keys.TASK: "reach", keys.NODEID: f"t[{n}]", keys.OUTCOME: outcome,
         keys.REASON: reason}
        for n, (outcome, reason) in enumerate(
            [("unsolved", "timeout"), ("unsolved", "fell"), ("unsolved", "timeout"),
             ("solved", "success"), ("error", "env crashed")]
        )
    ]  # fmt: skip
    clusters = failure_clusters(records, None)
    assert [(c.how, c.rollouts, c.stalled) for c in clusters] == [
        ("timeout", ("t[0]", "t[2]"), "no traces"),
        ("fell", ("t[1]",), "no traces"),
    ]
    assert failure_clusters(records[3:], tmp_path) == ()  # nothing unsolved: nothing to say
    assert clusters_lines(()) == []


def test_a_way_of_failing_is_one_cluster_whatever_its_numbers_and_lone_ways_are_other(tmp_path):
    """Step counts and seconds vary per rollout and do not split a way of failing; rollouts that
    end apart in groups too small to be a pattern stay in it; ways of one rollout each are one
    "other" cluster, last; the clusters do not depend on the records' order."""
    rng = np.random.default_rng(1)
    records = [
        rollout(tmp_path, n, "unsolved", towards((x, 0.0), 10) + rng.normal(0, 0.005, (2, 50)),
                task=f"task{n}")
        for n, x in enumerate([0.2, 0.2, 1.0, 1.0, 3.0, 3.0])
    ]  # fmt: skip
    for n, record in enumerate(records):
        record[keys.REASON] = f"env ended the episode after {100 + n} steps ({(100 + n) / 80:g} s)"
    records += [
        rollout(tmp_path, 10, "unsolved", towards((1.0, 1.0), 10), **{keys.REASON: "fell over"}),
        rollout(tmp_path, 11, "unsolved", towards((1.0, 1.0), 10), **{keys.REASON: "dropped it"}),
    ]
    clusters = failure_clusters(records, tmp_path)
    assert [(c.how, len(c.rollouts)) for c in clusters] == [
        ("env ended the episode after N steps", 6),
        ("other (2 rollouts, 2 ways)", 2),
    ]
    assert failure_clusters(records[::-1], tmp_path) == clusters


def test_state_numbers_are_named_by_the_evals_signals():
    """MetaWorld names its 39-d state's hand, gripper, object and goal: a cluster's final-state
    numbers read `hand[2]`, not `state[2]`; numbers it does not name keep their place; a signal
    computed from several numbers names none."""
    from policybench.suites.metaworld import SIGNALS
    from policybench.trajectory.signals import element_names

    names = element_names(SIGNALS, "state", 39)
    assert names[2] == "hand[2]" and names[3] == "gripper_opening"
    assert names[4] == "object[0]" and names[38] == "goal[2]"
    assert 20 not in names
    spread = {"reach": lambda s: s["obs.state"][:, 0:3].sum(axis=1)}
    assert element_names(spread, "state", 39) == {}
    assert element_names({"other": lambda s: s["obs.pixels"]}, "state", 39) == {}


SHORT_MT = """
import dataclasses

import policybench
from policybench.spec import seeded_per_task
from policybench.suites.metaworld import MT10, mt10

TASKS = {name: MT10[name] for name in ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3")}
MT = dataclasses.replace(mt10(tasks=TASKS), plan=seeded_per_task(TASKS, timeout_s=1.0))


@policybench.parametrize(MT)
def test_mt(rollout, harness):
    harness(rollout)
"""


def test_a_real_runs_clusters_are_one_per_way_of_failing_and_the_same_at_n0_and_n2(pytester):
    """The README's quickstart policy on four MetaWorld tasks, 3 rollouts each: its unsolved
    rollouts time out after different numbers of steps yet are one cluster, named alike in a run
    without workers and one with two."""
    pytest.importorskip("metaworld")
    pytester.makepyfile(test_mt=SHORT_MT, reacher=example_source())  # the README's own
    pytester.syspathinsert()
    found = []
    for workers in ("0", "2"):
        result = pytester.runpytest_subprocess(
            "--policy=reacher:MODEL", "--rollouts", "3", "-n", workers
        )
        assert result.ret == 0, result.stdout.str()
        summary = json.loads((pytester.path / "reports/latest/summary.json").read_text())
        found.append(summary["failure_clusters"])
    assert found[0] == found[1]
    ways = [cluster["how"] for cluster in found[0]]
    assert len(ways) == len(set(ways)) and sum(c["rollouts"] for c in found[0]) >= 6, found[0]
