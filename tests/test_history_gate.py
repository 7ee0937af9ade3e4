"""The history gate's error rates, by simulation with the project's own store and comparison code
(tests/history_sim.py): an unchanged stochastic policy trips one call at most alpha / calls, and
a sequence of 50 nightly calls at most alpha; a drop of 0.2 on every task is caught as often as
the gate says it is (its stated power, which docs/guides/history.md tabulates)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from policybench.report.history_gate import CALLS, DROP
from tests.history_sim import Line, records_of

ALPHA = 0.05


def test_one_call_of_an_unchanged_policy_false_alarms_at_most_its_level(tmp_path):
    rng = np.random.default_rng(1)
    line = Line(tmp_path)
    trials, level = 600, ALPHA  # --calls 1: the whole alpha in one call, the hardest case
    alarms = 0
    for _ in range(trials):
        reference, newest = line.add(records_of(rng, 3)), line.add(records_of(rng, 3))
        alarms += line.call(reference, newest, 1, level).regressed
    # At most alpha, up to the simulation's own noise (a 1-in-1000 margin above it).
    assert alarms <= binom.ppf(0.999, trials, level), alarms


def test_fifty_nightly_calls_of_an_unchanged_policy_false_alarm_at_most_alpha(tmp_path):
    rng = np.random.default_rng(2)
    line = Line(tmp_path)
    sequences, level = 80, ALPHA / CALLS
    with_an_alarm = 0
    for _ in range(sequences):
        reference = line.add(records_of(rng, 3))
        calls = [line.call(reference, line.add(records_of(rng, 3)), k, level) for k in range(1, 51)]
        with_an_alarm += any(call.regressed for call in calls)
    assert with_an_alarm <= binom.ppf(0.999, sequences, ALPHA), with_an_alarm


@pytest.mark.parametrize("per_task", [5, 10])
def test_a_drop_of_twenty_points_is_caught_as_often_as_the_gate_says(tmp_path, per_task):
    rng = np.random.default_rng(3)
    line = Line(tmp_path)
    trials, level = 200, ALPHA / CALLS
    calls = []
    for _ in range(trials):
        reference = line.add(records_of(rng, per_task))
        calls.append(line.call(reference, line.add(records_of(rng, per_task, DROP)), 1, level))
    caught = sum(call.regressed for call in calls) / trials
    said = float(np.mean([call.power for call in calls]))
    # The stated power (exact McNemar power at the reference's rates) within the simulation's
    # noise: 3 standard errors of `trials` draws.
    assert abs(caught - said) <= 3 * np.sqrt(said * (1 - said) / trials) + 0.02, (caught, said)


def test_a_call_with_too_few_pairs_to_ever_reach_its_level_says_how_many_it_needs(tmp_path):
    from policybench.report.history_gate import pairs_to_reach

    assert pairs_to_reach(ALPHA / CALLS) == 11  # every one of 10 lost gives p = 2/1024 > 0.001
    line = Line(tmp_path)
    rng = np.random.default_rng(4)
    reference = line.add(records_of(rng, 1))  # MT10 x 1: 10 pairs
    collapsed = line.add([{**r, "outcome": "unsolved"} for r in records_of(rng, 1)])
    call = line.call(reference, collapsed, 1, ALPHA / CALLS)
    assert not call.regressed
    assert "10 paired scenes can never reach level 0.001, however many are lost: run 11" in (
        call.line()
    )


def test_a_calls_power_is_found_once_for_its_reference_pairs_and_level(tmp_path):
    """The power depends on the reference, the pairs and the level alone: a later call against
    the same reference takes it from the store, equal to the power found afresh."""
    from policybench.report.history_gate import power_at_drop

    rng = np.random.default_rng(5)
    line = Line(tmp_path)
    reference = line.add(records_of(rng, 5))
    level = ALPHA / CALLS
    first, second = (line.call(reference, line.add(records_of(rng, 5)), k, level) for k in (1, 2))
    afresh = power_at_drop(line.records(reference.run_id, "metaworld-mt10"), 50, level)
    assert first.power == second.power == afresh is not None
    # Another level (or another count of pairs) is another power, found afresh.
    other = line.call(reference, line.add(records_of(rng, 5)), 3, ALPHA)
    assert (
        other.power
        == power_at_drop(line.records(reference.run_id, "metaworld-mt10"), 50, ALPHA)
        != first.power
    )
