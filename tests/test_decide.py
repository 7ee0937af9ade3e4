"""`--decide`: Wald's sequential test and its anytime-valid interval, checked on simulated
Bernoulli draws; decision order; and the plugin on real runs (the point env of tests/envs.py, and
real MetaWorld under its scripted expert and a random policy): the Eval's later rollouts skipped
once the test decides, the same decision at -n 0 and -n 2, a FAIL failing the run, and bad input
refused before anything runs."""

from __future__ import annotations

import fnmatch
import json
import math
from pathlib import Path

import numpy as np
import pytest

from policybench.cli import main as policybench_main
from policybench.decide import (
    Baseline,
    SequentialTest,
    Verdict,
    confidence_sequence,
    decision_order,
)
from policybench.run.records import scene_key

ENVS = (Path(__file__).parent / "envs.py").read_text()
BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

SOLVABLE = point_eval("solvable", scripted=GreedyPointModel)
SLOW = point_eval("slow", tasks={"far": "reach slowly", "farther": "reach more slowly"},
                  timeout_s=0.2, scripted=GreedyPointModel)


@policybench.parametrize(SOLVABLE, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""
SIMULATED = 10_000
WEAK = "--allow-weak-decision"  # these plans are small on purpose: they test where it stops


def error_rate(test: SequentialTest, rate: float, wrong: Verdict, seed: int) -> float:
    """The share of SIMULATED sequential tests on Bernoulli(rate) draws that end in `wrong`."""
    rng = np.random.default_rng(seed)
    draws = rng.random((SIMULATED, 400)) < rate  # far more than any of these tests takes
    verdicts = [test.walk(row).verdict for row in draws]
    assert Verdict.INCONCLUSIVE not in verdicts  # every test ended within its draws
    return verdicts.count(wrong) / SIMULATED


@pytest.mark.parametrize("given", ["0.8", "0.5:0.1,0.2,0.15", "0.3:0.01,0.05,0.1"])
def test_the_error_rates_hold_over_ten_thousand_sequential_tests(given):
    test = SequentialTest.parse(given)
    false_pass = error_rate(test, test.low, Verdict.PASS, seed=1)
    false_fail = error_rate(test, test.high, Verdict.FAIL, seed=2)
    # Wald's bounds hold up to the simulation's own noise (three standard errors).
    assert false_pass <= test.alpha + 3 * math.sqrt(test.alpha * (1 - test.alpha) / SIMULATED)
    assert false_fail <= test.beta + 3 * math.sqrt(test.beta * (1 - test.beta) / SIMULATED)


def test_the_fewest_rollouts_that_decide_are_where_a_run_of_one_outcome_decides():
    test = SequentialTest(0.8)
    assert test.fewest() == (12, 3)  # log(19) / log(0.9 / 0.7) = 11.7; log(19) / log(3) = 2.7
    assert test.walk([True] * 11).verdict is Verdict.INCONCLUSIVE
    assert (test.walk([True] * 12).verdict, test.walk([True] * 30).rollouts) == (Verdict.PASS, 12)
    assert test.walk([False] * 2).verdict is Verdict.INCONCLUSIVE
    assert (test.walk([False] * 3).verdict, test.walk([False] * 3).solved) == (Verdict.FAIL, 0)


def test_the_interval_covers_the_rate_at_every_step_at_once():
    """Ville's inequality: the chance that the interval misses the true rate at any step of a
    sequence is at most 1 - confidence; checked over 300 sequences of 60 draws."""
    rng = np.random.default_rng(3)
    rate, missed = 0.3, 0
    for _ in range(300):
        solved = np.cumsum(rng.random(60) < rate)
        intervals = [confidence_sequence(int(s), n, 0.05) for n, s in enumerate(solved, 1)]
        missed += any(not low <= rate <= high for low, high in intervals)
    assert missed / 300 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)


def test_the_interval_is_where_the_mixture_reaches_its_level():
    low, high = confidence_sequence(12, 12, 0.05)
    assert high == 1.0 and 0.6 < low < 0.7
    evidence = math.lgamma(13) + math.lgamma(1) - math.lgamma(14)  # log B(13, 1) = -log 13
    assert evidence - 12 * math.log(low) == pytest.approx(math.log(20), abs=1e-6)
    assert confidence_sequence(0, 0, 0.05) == (0.0, 1.0)
    low, high = confidence_sequence(50, 100, 0.05)
    assert low < 0.5 < high and high - 0.5 == pytest.approx(0.5 - low, abs=1e-9)


def test_decision_order_takes_each_task_in_turn_in_an_order_fixed_by_its_name():
    rollouts = [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("b", 4), ("b", 5)]
    places = decision_order(rollouts)
    rounds = [sorted(places[i] for i in range(6) if i % 3 == r) for r in range(3)]
    assert rounds == [[0, 1], [2, 3], [4, 5]]  # a scene of each task a round
    # Given in any order, a rollout's place is the same.
    shuffled = [rollouts[i] for i in (4, 0, 5, 2, 1, 3)]
    assert decision_order(shuffled) == [places[i] for i in (4, 0, 5, 2, 1, 3)]
    # Fifty tasks: the plan's first three tasks are not the round's first three.
    many = [(f"task{t:02d}", t) for t in range(50)]
    first = sorted(range(50), key=decision_order(many).__getitem__)[:3]
    assert first != [0, 1, 2]


def test_hard_tasks_first_in_the_plan_do_not_decide_alone():
    """Fifty tasks, the first three hard (rate 0.3), the rest easy (0.99): the Eval's rate is
    0.95, above --decide 0.8's passing 0.9. In plan order three failures in a row would FAIL it
    34% of the time; in decision order it FAILs at most alpha of the time (2,000 simulated
    runs of 3 rollouts a task through the project's own order and test)."""
    rates = np.array([0.3] * 3 + [0.99] * 47)
    plan = [(f"task{t:02d}", t * 3 + k) for t in range(50) for k in range(3)]
    places = decision_order(plan)
    order = sorted(range(len(plan)), key=places.__getitem__)
    test = SequentialTest.parse("0.8")
    rng = np.random.default_rng(4)
    fails = 0
    for _ in range(2000):
        solved = rng.random(len(plan)) < rates[[t for t in range(50) for _ in range(3)]]
        fails += test.walk(solved[order]).verdict is Verdict.FAIL
    assert fails / 2000 <= test.alpha


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


def summary(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "reports" / "latest" / "summary.json").read_text())


def ran(pytester: pytest.Pytester) -> list[tuple[str, str, int]]:
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted((r["eval"], r["task"], r["scene"]["seed"]) for r in records)


def test_an_eval_that_has_decided_skips_its_later_rollouts_and_a_fail_fails_the_run(bench):
    result = bench.runpytest("--decide", "0.8", "--rollouts", "20", WEAK)
    assert result.ret == 1  # the FAIL of `slow`
    result.stdout.fnmatch_lines(
        [
            "slow: 37 items not run: decided early (--decide FAIL at rollout 3): not needed",
            "solvable: 8 items not run: decided early (--decide PASS at rollout 12): not needed",
            "decide: solvable: PASS at rollout 12: 12/12 solved, rate 0.63-1.00 (anytime 95%);*",
            "decide: slow: FAIL at rollout 3: 0/3 solved, rate 0.00-0.77 (anytime 95%);*",
            "FAIL slow: --decide FAIL at rollout 3*",
            "*12 passed, 45 skipped, 3 unsolved*",
        ]
    )
    # `slow` took its two tasks in turn: a scene of each, then one of the first again.
    assert sorted(r[1] for r in ran(bench) if r[0] == "slow") in (
        ["far", "far", "farther"],
        ["far", "farther", "farther"],
    )
    decisions = {d["eval"]: d for d in summary(bench)["decisions"]}
    assert (decisions["solvable"]["verdict"], decisions["solvable"]["rollouts"]) == ("PASS", 12)
    assert decisions["slow"]["interval"][0] == 0.0
    html = (bench.path / "reports" / "latest" / "index.html").read_text()
    assert 'id="decisions"' in html and "FAIL at rollout 3" in html


def test_the_decision_is_the_same_at_any_number_of_workers(bench):
    alone = bench.runpytest("--decide", "0.8", "--rollouts", "20", "-k", "reach", WEAK)
    assert alone.ret == 0
    one = summary(bench)["decisions"]
    parallel = bench.runpytest(
        "--decide", "0.8", "--rollouts", "20", "-n", "2", "-k", "reach", WEAK
    )
    assert parallel.ret == 0
    assert summary(bench)["decisions"] == one
    # Rollouts in flight when the decision fell finished and were recorded, but no more.
    assert 12 <= summary(bench)["overall"]["rollouts"] <= 16


def test_the_decision_is_the_same_with_rollouts_run_side_by_side(bench):
    run = ("--decide", "0.8", "--rollouts", "20", "-k", "reach", WEAK)
    assert bench.runpytest(*run).ret == 0
    one = summary(bench)["decisions"]
    assert bench.runpytest(*run, "--envs-per-worker", "2").ret == 0
    assert summary(bench)["decisions"] == one


def test_each_perturbation_is_decided_on_its_own(bench):
    result = bench.runpytest("--decide", "0.8", "--rollouts", "20", "-k", "reach",
                             "--perturb", "obs_noise=1", WEAK)  # fmt: skip
    decided = {d["arm"]: (d["verdict"], d["rollouts"]) for d in summary(bench)["decisions"]}
    assert decided["none"] == ("PASS", 12)
    assert decided["obs_noise-1"][0] == "FAIL" and result.ret == 1


def test_the_report_rebuilt_later_takes_the_same_decisions(bench):
    bench.runpytest("--decide", "0.8", "--rollouts", "20", WEAK)
    before = summary(bench)["decisions"]
    run_dir = (bench.path / "reports" / "latest").resolve()
    (run_dir / "summary.json").unlink()
    assert policybench_main(["report", "html", str(run_dir)]) == 0
    assert summary(bench)["decisions"] == before


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("1.2", "--decide RATE[:ALPHA,BETA,DELTA]: RATE must lie in (0, 1), got 1.2"),
        ("0", "*: RATE must lie in (0, 1), got 0"),
        ("0.8:0.05", "--decide takes RATE[:ALPHA,BETA,DELTA] (e.g. 0.8, 0.8:0.05,0.05,0.1 or *"),
        ("basline", "--decide takes * or baseline:0.05,0.05,0.2), got 'basline'"),
        ("0.95", "*indifference zone RATE +- DELTA = 0.95 +- 0.1 must lie inside (0, 1)*"),
        ("0.8:0.05,1.5,0.1", "*BETA must lie in (0, 1), got 1.5"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(bench, given, said):
    result = bench.runpytest("--decide", given, "--rollouts", "20")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in result.stderr.lines if line.strip()]
    assert fnmatch.fnmatchcase(line, f"ERROR: {said}".replace("[", "[[]"))
    assert not (bench.path / "reports").exists()


def test_too_few_rollouts_to_ever_decide_both_ways_is_refused(bench):
    result = bench.runpytest("--decide", "0.8", "--rollouts", "3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --decide 0.8: a decision needs at least 12 rollouts of an Eval to PASS (all "
            "solved) and 3 to FAIL (none solved), and slow plans 6, solvable plans 3: give "
            "--rollouts 12 or more*"
        ]
    )


def test_a_baseline_pairs_each_rollout_with_its_scenes_twin():
    baseline = Baseline(
        [
            {"eval": "e", "task": "t", "scene": {"seed": seed}, "rollout_index": seed,
             "outcome": outcome}
            for seed, outcome in enumerate(["solved", "unsolved", "solved"])
        ]
    )  # fmt: skip

    def key(seed: int) -> str | None:
        return scene_key({"eval": "e", "task": "t", "scene": {"seed": seed}})

    # Alike (seed 0 both solved), won (seed 1), lost (seed 2), no twin (seed 7, a second seed 0).
    ordered = [(key(0), True), (key(1), True), (key(2), False), (key(7), True), (key(0), False)]
    assert baseline.outcomes(ordered) == [None, True, False, None, None]
    test = SequentialTest.parse("baseline")  # margin 0.2: wins 0.5 of them vs 0.4
    assert (test.paired, test.low, test.high, test.fewest()) == (True, 0.4, 0.5, (14, 17))
    decision = test.walk([None, True] * 14)
    assert (decision.verdict, decision.rollouts, decision.weighed) == (Verdict.PASS, 28, 14)


@pytest.mark.parametrize(
    ("before", "after", "said", "ret"),
    [
        ("random", "scripted", "PASS at rollout 15: won 14 of the 14 scenes where it and *", 0),
        ("scripted", "random", "FAIL at rollout 18: won 0 of the 17 scenes where it and the *", 1),
        ("scripted", "scripted", "INCONCLUSIVE after 20 rollouts: won 0 of the 0 scenes *", 0),
    ],
)
def test_decide_against_a_baseline_weighs_the_scenes_the_two_differ_on(
    bench, before, after, said, ret
):
    run = ("--rollouts", "20", "-k", "reach")
    assert bench.runpytest("--policy", before, *run, "--report-dir", "base").ret == 0
    result = bench.runpytest(
        "--policy", after, *run, "--decide", "baseline", "--baseline", "base/latest", WEAK
    )
    assert result.ret == ret
    result.stdout.fnmatch_lines([f"decide: solvable: {said}"])
    [decision] = summary(bench)["decisions"]
    assert (
        decision["paired"]
        and decision["rollouts"]
        == {"random": 15, "scripted": 18, None: 20}[before if before != after else None]
    )
    # The report rebuilt later finds the baseline where the run recorded it.
    run_dir = (bench.path / "reports" / "latest").resolve()
    (run_dir / "summary.json").unlink()
    assert policybench_main(["report", "html", str(run_dir)]) == 0
    assert summary(bench)["decisions"] == [decision]


def test_decide_against_a_baseline_needs_one(bench):
    result = bench.runpytest("--decide", "baseline", "--rollouts", "12")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --decide baseline decides against a baseline run: give*"])
    assert bench.runpytest("--policy", "random", "--policy", "scripted", "--rollouts", "1",
                           "-k", "reach", "--report-dir", "ab").ret == 0  # fmt: skip
    result = bench.runpytest("--decide", "baseline", "--baseline", "ab/latest", "--rollouts", "12")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --decide baseline: the baseline * is an A/B run: pick*"])


METAWORLD = """
import policybench
from policybench.suites.metaworld import MT10_STATE


@policybench.parametrize(MT10_STATE)
def test_metaworld(rollout, harness):
    harness(rollout)
"""


@pytest.mark.parametrize(
    ("policy", "verdict", "at"), [("scripted", "PASS", 12), ("random", "FAIL", 3)]
)
def test_metaworld_decides_with_far_fewer_rollouts_than_planned(pytester, policy, verdict, at):
    pytest.importorskip("metaworld")
    pytester.makepyfile(test_metaworld=METAWORLD)
    result = pytester.runpytest_subprocess(
        "--decide", "0.8", "--rollouts", "10", f"--policy={policy}"
    )
    assert result.ret == (0 if verdict == "PASS" else 1)
    result.stdout.fnmatch_lines(
        ["decide plan: metaworld-mt10: 100 rollouts planned; at 0.7: PASS 4.5%, FAIL "
         "95.3%, INCONCLUSIVE 0.2%; at 0.8: *; at 0.9: PASS 96.4%, FAIL 3.4%, INCONCLUSIVE 0.2%"]
    )  # fmt: skip
    [decision] = summary(pytester)["decisions"]
    assert (decision["verdict"], decision["rollouts"]) == (verdict, at)
    overall = summary(pytester)["overall"]
    assert overall["rollouts"] == at  # of the 100 planned
    assert overall["stopped_early"] and overall["interval_method"].startswith("anytime")
