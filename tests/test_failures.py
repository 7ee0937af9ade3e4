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
        for n, task in enumerate(["reach", "reach", "reach", "push"])
    ]
    records += [  # overshot, moving to the end
        rollout(tmp_path, 20 + n, "unsolved", towards((2.5, 1.0), 50) + jitter()) for n in range(2)
    ]
    spec = {"margin": -0.2, "step": 3, "time_s": 0.3, "values": None, "first_violated_step": 3}
    records.append(
        rollout(tmp_path, 30, "unsolved", towards((0.5, 0.0), 10), specs={"no_collision": spec})
    )
    clusters = failure_clusters(records, tmp_path)
    assert [len(c.rollouts) for c in clusters] == [4, 2, 1]
    stuck, overshot, violated = clusters
    assert stuck.tasks == {"reach": 3, "push": 1} and stuck.share == pytest.approx(4 / 7)
    # within STILL of the Eval's range from a little before step 10, where it stopped
    assert re.fullmatch(
        r"still from step ([789]|10) \(median; 1\d% of the episode\)", stuck.stalled
    )
    # y short of the solved rollouts' end; x by less than an sd of the Eval's final x (the
    # overshooting rollouts widen it)
    assert [name for name, _ in stuck.furthest] == ["state[1]"] and stuck.furthest[0][1] < -1
    assert set(stuck.rollouts) == {f"test_toy[{n}]" for n in range(10, 14)}
    assert overshot.stalled == "still moving near the end"
    assert overshot.furthest[0][0] == "state[0]" and overshot.furthest[0][1] > 1
    assert violated.how == "timeout after 50 steps; violated no_collision"
    lines = clusters_lines(clusters)
    assert lines[1] == "how the unsolved rollouts failed: 3 clusters"
    assert lines[2].startswith("  toy: 4 unsolved (57%), timeout after 50 steps; still from step ")


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
