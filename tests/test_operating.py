"""The exact operating characteristic of a --decide plan (policybench.operating) against the
project's own sequential test run on simulated outcomes; the figures the preflight prints at 30
and 300 planned rollouts; and `--decide baseline`'s error rates as written: a policy identical to
its baseline FAILs at most ALPHA of the time, one worse by the margin PASSes at most BETA, at 30
and 300 scenes, computed exactly and simulated through the paired pipeline."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policybench.decide import Baseline, SequentialTest, Verdict
from policybench.operating import Characteristic, chances


def simulated(test: SequentialTest, planned: int, rate: float, runs: int, seed: int):
    rng = np.random.default_rng(seed)
    verdicts = [test.walk(row).verdict for row in rng.random((runs, planned)) < rate]
    return verdicts.count(Verdict.PASS) / runs, verdicts.count(Verdict.FAIL) / runs


@pytest.mark.parametrize(
    ("given", "planned", "rate"),
    [("0.8", 30, 0.9), ("0.8", 30, 0.7), ("0.5:0.1,0.2,0.15", 40, 0.5)],
)
def test_the_exact_chances_equal_the_tests_own_walk_on_simulated_outcomes(given, planned, rate):
    test = SequentialTest.parse(given)
    exact = chances(test, planned, rate)
    passes, fails = simulated(test, planned, rate, 20_000, seed=5)
    spread = 4 * math.sqrt(0.25 / 20_000)
    assert abs(exact.passes - passes) < spread and abs(exact.fails - fails) < spread
    assert exact.passes + exact.fails + exact.inconclusive == pytest.approx(1.0)


def test_thirty_planned_rollouts_decide_far_less_often_than_the_error_rates_promise():
    """MT10 at --rollouts 3: at 0.9 it PASSes 74% of the time, at 0.7 it FAILs 78% (the
    figures the preflight prints, and why such a plan is refused without
    --allow-weak-decision); 100 planned reach 95%."""
    test = SequentialTest.parse("0.8")
    short = Characteristic.of(test, 30)
    assert short.at[2].passes == pytest.approx(0.740, abs=5e-4)
    assert short.at[0].fails == pytest.approx(0.780, abs=5e-4)
    assert not short.enough
    assert Characteristic.of(test, 100).enough
    long = Characteristic.of(test, 300)
    # Wald's boundaries hold the error rates approximately: within a tenth of them here.
    assert long.at[0].passes <= 1.1 * test.alpha and long.at[2].fails <= 1.1 * test.beta
    assert long.line().startswith("300 rollouts planned; at 0.7: PASS 4.5%, FAIL 95.5%")


@pytest.mark.parametrize("scenes", [30, 300])
def test_an_identical_policy_fails_and_a_worse_one_passes_no_more_often_than_written(scenes):
    """Exactly, at every share of scenes differing from the baseline's (all of them is the
    most error-prone case): FAIL of an identical policy <= ALPHA, PASS of one worse by the margin
    (0.2) <= BETA."""
    test = SequentialTest.parse("baseline")
    for differ in (0.1, 0.2, 0.5, 1.0):
        same = chances(test, scenes, 0.5, differ)
        worse = chances(test, scenes, max(0.0, 0.5 - test.delta / (2 * differ)), differ)
        assert same.fails <= test.alpha, (scenes, differ, same)
        assert worse.passes <= test.beta, (scenes, differ, worse)


@pytest.mark.parametrize("scenes", [30, 300])
def test_simulated_paired_runs_keep_the_error_rates(scenes):
    """Two runs of one stochastic policy (each scene solved with its own rate, the twins drawn
    independently: about 20% of the scenes differ) through the baseline's pairing and the walk:
    FAIL at most ALPHA of the time; a policy worse by 0.2 on every scene PASSes at most BETA."""
    rng = np.random.default_rng(6)
    test = SequentialTest.parse("baseline")
    rates = rng.choice([0.3, 0.9, 1.0], size=scenes, p=[0.3, 0.2, 0.5])
    keys = [f'["e", "t", {{"seed": {i}}}]' for i in range(scenes)]
    runs = 1000
    fails = passes = 0
    for _ in range(runs):
        before = rng.random(scenes) < rates
        baseline = Baseline([])
        baseline.solved = {key: [bool(b)] for key, b in zip(keys, before, strict=True)}
        same = rng.random(scenes) < rates
        worse = rng.random(scenes) < np.clip(rates - 0.2, 0, 1)
        fails += test.walk(baseline.outcomes(zip(keys, same, strict=True))).verdict is Verdict.FAIL
        passes += (
            test.walk(baseline.outcomes(zip(keys, worse, strict=True))).verdict is Verdict.PASS
        )
    noise = 3 * math.sqrt(0.05 * 0.95 / runs)
    assert fails / runs <= test.alpha + noise and passes / runs <= test.beta + noise
