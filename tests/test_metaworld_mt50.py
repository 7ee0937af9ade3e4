"""MT50 and ML45 run end to end: a random policy served by the run's own shared server plays one
rollout of a task of every new MetaWorld Eval at -n 2 without error (LeRobot's 480x480 groups
cut to four steps: what is under test is that each runs, not how long), and MetaWorld's experts
solve MT50 from state (one rollout of five tasks here; every task in the CI smoke run)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("metaworld")

BENCHMARK = """
import dataclasses

import policybench
from policybench.spec import seeded_per_task
from policybench.suites import metaworld
from policybench.suites.metaworld_ml import ML45_TEST, ML45_TRAIN


def short(eval):
    tasks = {r.scene.task: r.instruction for r in eval.rollouts(1, 0)}
    return dataclasses.replace(
        eval, plan=seeded_per_task(tasks, 4 / eval.control_hz, metaworld.LEROBOT_START_SEED)
    )


GROUPS = [
    short(getattr(metaworld, f"MT50_LEROBOT_{group}"))
    for group in ("EASY", "MEDIUM", "HARD", "VERY_HARD")
]


@policybench.parametrize(metaworld.MT50_STATE)
def test_mt50(rollout, harness):
    harness(rollout)


@policybench.parametrize(ML45_TRAIN)
def test_ml45_train(rollout, harness):
    harness(rollout)


@policybench.parametrize(ML45_TEST)
def test_ml45_test(rollout, harness):
    harness(rollout)


@policybench.parametrize(*GROUPS)
def test_lerobot_groups(rollout, harness):
    harness(rollout)
"""

# One task of each Eval: MT50 (state), ML45's splits, LeRobot's four groups.
ONE_EACH = (
    "(test_mt50 and stick-pull) or (ml45_train and reach-wall) or door-lock or "
    "(lerobot and (faucet-open or hammer or assembly or stick-pull))"
)


def records(pytester: pytest.Pytester) -> list[dict]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_served_random_policy_runs_every_new_metaworld_eval(pytester: pytest.Pytester):
    pytester.makepyfile(test_new=BENCHMARK)
    result = pytester.runpytest_subprocess(
        "--policy=random", "--policy-sharing=shared", "-n", "2", "--rollouts", "1",
        "-k", ONE_EACH,
    )  # fmt: skip
    found = records(pytester)
    assert {r["outcome"] for r in found} <= {"solved", "unsolved"}, result.stdout.str()[-3000:]
    evals = {r["eval"] for r in found}
    assert evals == {
        "metaworld-mt50",
        "metaworld-ml45-train",
        "metaworld-ml45-test",
        "metaworld-mt50-lerobot-easy",
        "metaworld-mt50-lerobot-medium",
        "metaworld-mt50-lerobot-hard",
        "metaworld-mt50-lerobot-very-hard",
    }
    assert all(r["policy"].get("served") == "shared" for r in found)


def test_metaworlds_experts_solve_mt50_tasks_from_state(pytester: pytest.Pytester):
    pytester.makepyfile(test_new=BENCHMARK)
    result = pytester.runpytest_subprocess(
        "--rollouts",
        "1",
        "-k",
        "test_new and (assembly or basketball or disassemble or "
        "hand-insert or shelf-place) and not lerobot and not ml45",
    )
    found = records(pytester)
    assert len(found) == 5 and {r["eval"] for r in found} == {"metaworld-mt50"}
    assert [r["outcome"] for r in found] == ["solved"] * 5, result.stdout.str()[-3000:]
