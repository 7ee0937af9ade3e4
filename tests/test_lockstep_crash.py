"""A worker killed (a real SIGKILL) while it steps a group of rollouts side by side
(`--envs-per-worker K -n N`): every rollout of the group that had not reported runs again on a
replaced worker, or ends as an error record naming the signal, and every other rollout finishes;
results.jsonl holds each planned rollout once. So too under a `--dist` of whole units of work."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.test_plugin import ENVS

DYING = """
import dataclasses, os, signal
from pathlib import Path
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class Dying(PointEnv):
    \"\"\"Kills its own process at its first step: always, or once per run (a marker file).\"\"\"

    def __init__(self, once):
        super().__init__()
        self.once = once

    def step(self, action):
        marker = Path("died-once")
        if not (self.once and marker.exists()):
            marker.write_text("")
            os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does
        return super().step(action)


POINT = point_eval("point", scripted=GreedyPointModel)
ONCE = dataclasses.replace(
    point_eval("once", tasks={"once": "die once"}, scripted=GreedyPointModel),
    make_env=lambda task: Dying(once=True),
)
ALWAYS = dataclasses.replace(
    point_eval("always", tasks={"die": "die every time"}, scripted=GreedyPointModel),
    make_env=lambda task: Dying(once=False),
)


@policybench.parametrize(EVALS)
def test_point(rollout, harness):
    harness(rollout)
"""


def records(pytester: pytest.Pytester) -> dict[str, dict]:
    """The run's records by rollout id; each rollout has one."""
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    ids = [r["nodeid"].split("[")[1].rstrip("]") for r in lines]
    assert not [i for i, n in Counter(ids).items() if n > 1], "a rollout recorded twice"
    return dict(zip(ids, lines, strict=True))


@pytest.mark.parametrize("slots", [2, 3])
def test_a_group_whose_worker_was_killed_runs_again_and_every_rollout_finishes(pytester, slots):
    pytester.makepyfile(envs=ENVS, test_point=DYING.replace("EVALS", "POINT, ONCE"))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--envs-per-worker", str(slots), "--rollouts", str(slots)
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    assert result.parseoutcomes() == {"passed": 2 * slots, "rerun": slots}
    by_id = records(pytester)
    planned = [f"{task}/seed={i}" for task in ("reach", "once") for i in range(slots)]
    assert sorted(by_id) == sorted(planned)
    assert all(record["outcome"] == "solved" for record in by_id.values())
    # The whole group the killed worker held ran again: each of its rollouts says so.
    retried = {i for i, record in by_id.items() if record.get("retried")}
    assert retried == {f"once/seed={i}" for i in range(slots)}
    for i in retried:
        assert len(by_id[i]["retried"]) == 1 and "killed by SIGKILL" in by_id[i]["retried"][0]


def test_a_group_whose_worker_dies_each_time_ends_as_error_records_naming_the_signal(pytester):
    pytester.makepyfile(envs=ENVS, test_point=DYING.replace("EVALS", "POINT, ALWAYS"))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--envs-per-worker", "2", "--rollouts", "2", "--retry-errors", "1"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    assert result.parseoutcomes() == {"passed": 2, "errors": 2, "rerun": 2}
    by_id = records(pytester)
    assert sorted(by_id) == ["die/seed=0", "die/seed=1", "reach/seed=0", "reach/seed=1"]
    for died in ("die/seed=0", "die/seed=1"):
        record = by_id[died]
        assert record["outcome"] == "error" and record["eval"] == "always"
        assert record["scene"] == {"task": "die", "seed": int(died[-1])}
        assert "killed by SIGKILL" in record["reason"] and record["worker"].startswith("gw")
        assert len(record["retried"]) == 1 and "killed by SIGKILL" in record["retried"][0]
    assert by_id["reach/seed=0"]["outcome"] == by_id["reach/seed=1"]["outcome"] == "solved"


@pytest.mark.parametrize("dist", ["loadfile", "loadscope"])
def test_a_worker_killed_under_a_dist_of_whole_units_leaves_one_record_per_rollout(pytester, dist):
    """xdist's schedulers of whole units cannot run one crashed item again by themselves; the
    rollout the dead worker ran is retried, then an error, and the rest of its unit runs."""
    pytester.makepyfile(envs=ENVS, test_point=DYING.replace("EVALS", "POINT, ALWAYS"))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", dist, "--rollouts", "2", "--retry-errors", "1"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    assert result.parseoutcomes() == {"passed": 2, "errors": 2, "rerun": 2}
    by_id = records(pytester)
    assert sorted(by_id) == ["die/seed=0", "die/seed=1", "reach/seed=0", "reach/seed=1"]
    assert all("killed by SIGKILL" in by_id[f"die/seed={i}"]["reason"] for i in (0, 1))
    assert all(len(by_id[f"die/seed={i}"]["retried"]) == 1 for i in (0, 1))


KILLER = """
import os, signal
from envs import GreedyPointModel


class Killer(GreedyPointModel):
    \"\"\"A model whose first call kills the process it runs in.\"\"\"

    name = "killer"

    def open(self, context):
        os.kill(os.getpid(), signal.SIGKILL)


MODEL = Killer()
"""


def test_in_an_ab_run_a_worker_killed_by_one_arm_leaves_the_other_arms_rollouts_alone(pytester):
    """Each arm's rollouts of a task make groups of their own, so the group in flight when the
    killer arm's model ends its worker holds none of the other arm's rollouts."""
    pytester.makepyfile(envs=ENVS, killer=KILLER, test_point=DYING.replace("EVALS", "POINT"))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--envs-per-worker", "2", "--rollouts", "2", "--retry-errors", "0",
        "--policy", "killer:MODEL", "--policy", "scripted", "--policy-sharing", "per-worker",
    )  # fmt: skip
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    assert result.parseoutcomes() == {"passed": 2, "errors": 2}
    by_arm: dict[str, list[dict]] = {}
    for record in records(pytester).values():
        by_arm.setdefault(record["arm"], []).append(record)
    assert len(by_arm) == 2 and len(by_arm["scripted"]) == 2
    assert all(r["outcome"] == "solved" and not r.get("retried") for r in by_arm["scripted"])
    (killed,) = (records for arm, records in by_arm.items() if arm != "scripted")
    assert [r["outcome"] for r in killed] == ["error", "error"]
    assert all("killed by SIGKILL" in r["reason"] for r in killed)
