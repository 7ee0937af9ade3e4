"""A run given no policy uses `--policy=scripted`, an Eval's own expert. On an Eval that has none,
its rollouts are skipped; the run says in one line that no policy was given and how to give one,
and a run that ran nothing for that reason is a usage error (exit 4), not a success."""

from __future__ import annotations

import pytest

from tests.test_plugin import ENVS

BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

MINE = point_eval("mine")  # a custom Eval: no scripted expert
{more}

@policybench.parametrize(MINE{also})
def test_point(rollout, harness):
    harness(rollout)
"""
NO_POLICY = "*no policy was given, and the default (--policy=scripted*) cannot run on mine: give one with --policy=random*"  # noqa: E501


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_custom_eval_run_without_a_policy_is_a_usage_error_saying_how_to_give_one(
    pytester, workers
):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK.format(more="", also=""))
    result = pytester.runpytest("--rollouts", "2", "-n", workers)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines([f"nothing ran: {NO_POLICY[1:]}"])
    assert pytester.runpytest("--rollouts", "1", "--policy=random").ret == 0


def test_a_run_that_ran_something_names_the_evals_left_without_a_policy_in_one_line(pytester):
    theirs = 'THEIRS = point_eval("theirs", tasks={"go": "go"}, scripted=GreedyPointModel)'
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK.format(more=theirs, also=", THEIRS"))
    result = pytester.runpytest("--rollouts", "1")
    assert result.ret == 0
    assert result.parseoutcomes() == {"passed": 1, "skipped": 1}
    # What ran, then one line for what did not and how to run it: no paragraph besides.
    result.stdout.fnmatch_lines(["mine: 1 item not run: *no scripted policy; try --policy=random"])
    assert "no policy was given" not in result.stdout.str()
    assert "nothing ran" not in result.stdout.str()


def test_items_not_run_are_one_line_per_reason_whatever_the_evals_are_named():
    from policybench.pytest_plugin.aggregation import not_run_lines

    no_expert = "eval {!r} has no scripted policy; try --policy=random"
    not_run = {
        ("a", no_expert.format("a")): 3,  # a name that is also a letter of the reason
        ("b", no_expert.format("b")): 2,
        ("libero_goal", "libero not installed"): 4,
        ("libero_goal-lerobot", "libero not installed"): 4,
    }
    assert not_run_lines(not_run) == [
        "5 items not run (a, b): the Eval has no scripted policy; try --policy=random",
        "8 items not run (libero_goal, libero_goal-lerobot): libero not installed",
        "(-v lists them by Eval)",
    ]
    assert len(not_run_lines(not_run, each=True)) == 4
