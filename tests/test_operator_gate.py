"""Gates over operator verdicts: a run whose rollouts ran but have no verdict yet says so (how
many ran, none scored, how to score and judge again), not that no rollout finished; judged again
with --resume once scored, the gate holds; an unsure verdict reads as scored unsure."""

from __future__ import annotations

import pytest

from policybench.cli import main
from policybench.run.records import rollout_id
from policybench.run.verdicts import Verdict, append_verdict
from tests.test_verdicts import point_run, records

GATED = ("--rollouts", "1", "-p", "no:cacheprovider", "--outcome-source", "operator")


def test_a_gate_over_unscored_rollouts_says_they_ran_and_how_to_score_them(pytester):
    run_dir = point_run(pytester)
    ran = len(records(run_dir))
    judged = pytester.runpytest(*GATED, "--resume", "latest", "--success-fail-under", "0.5")
    assert judged.ret == pytest.ExitCode.TESTS_FAILED
    judged.stdout.fnmatch_lines(
        [
            f"FAIL overall: no rollout judged ({ran} rollouts ran, none has an operator verdict "
            "yet (--outcome-source operator); score them with `policybench score RUN`, then "
            "judge again with this command and --resume RUN), so floor 50.0% "
            "(--success-fail-under) cannot hold"
        ]
    )
    assert "none ran" not in judged.stdout.str()
    for record in records(run_dir):
        append_verdict(run_dir, Verdict.now(rollout_id(record), "success", "ana"))
    again = pytester.runpytest(*GATED, "--resume", "latest", "--success-fail-under", "0.5")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()[-2000:]


def test_an_unsure_verdict_reads_as_scored_unsure_not_as_unscored(pytester, capsys):
    run_dir = point_run(pytester)
    ran = records(run_dir)
    append_verdict(run_dir, Verdict.now(rollout_id(ran[0]), "unsure", "ana"))
    append_verdict(run_dir, Verdict.now(rollout_id(ran[1]), "success", "ana"))
    capsys.readouterr()
    assert main(["report", "html", str(run_dir)]) == 0
    overall = next(line for line in capsys.readouterr().out.splitlines() if "  all: " in line)
    assert f"(1/1 scored, 1 scored unsure, {len(ran) - 2} not)" in overall, overall
