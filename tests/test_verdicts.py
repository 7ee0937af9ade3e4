"""Operators' verdicts (verdicts.jsonl) and the scoring page's server over HTTP: bad input is
refused with nothing written, a later verdict stands with both kept, a torn last line is
reported and kept; verdicts survive merge and --resume and can drive the gates and comparisons."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.cli import main
from policybench.run.verdicts import (
    VERDICTS,
    Verdict,
    append_verdict,
    operator_outcomes,
    read_verdicts,
    rollout_id,
)
from policybench.scoring.app import ScoringApp
from tests.test_shards import BENCHMARK, ENVS


def point_run(pytester: pytest.Pytester, report_dir: str = "reports") -> Path:
    """A real run of the point Evals (in process); its run directory."""
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    result = pytester.runpytest(
        "--rollouts", "1", "-p", "no:cacheprovider", "--report-dir", report_dir
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    return (pytester.path / report_dir / "latest").resolve()


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def post(url: str, data: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + "verdict", json.dumps(data).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_verdict_for_a_rollout_not_in_the_run_is_a_404_and_writes_nothing(pytester):
    run_dir = point_run(pytester)
    with ScoringApp(run_dir).server("127.0.0.1", 0) as server:
        status, answer = post(
            server.url,
            {"rollout_id": "nope[seed=9]", "operator_verdict": "success", "scorer": "ana"},
        )
        bad_status, bad = post(
            server.url,
            {
                "rollout_id": rollout_id(records(run_dir)[0]),
                "operator_verdict": "great",
                "scorer": "ana",
            },
        )
        nameless, unnamed = post(
            server.url,
            {"rollout_id": rollout_id(records(run_dir)[0]), "operator_verdict": "success"},
        )
    assert status == 404
    assert "no rollout 'nope[seed=9]' in run" in answer["error"]
    assert "nothing was recorded" in answer["error"]
    assert bad_status == 400 and "success, failure, unsure" in bad["error"]
    assert nameless == 400 and "scorer's name" in unnamed["error"]
    assert not (run_dir / VERDICTS).exists()


def test_a_second_verdict_by_the_same_scorer_stands_and_both_are_kept(pytester):
    run_dir = point_run(pytester)
    first = records(run_dir)[0]
    with ScoringApp(run_dir).server("127.0.0.1", 0) as server:
        rollout = rollout_id(first)
        assert (
            post(
                server.url, {"rollout_id": rollout, "operator_verdict": "failure", "scorer": "ana"}
            )[0]
            == 200
        )
        status, answer = post(
            server.url,
            {
                "rollout_id": rollout,
                "operator_verdict": "success",
                "scorer": "ana",
                "note": "on replay",
            },
        )
    assert status == 200
    assert answer["replaces"]["operator_verdict"] == "failure"
    lines = (run_dir / VERDICTS).read_text().splitlines()
    assert [json.loads(line)["operator_verdict"] for line in lines] == ["failure", "success"]
    latest = read_verdicts(run_dir).latest()[rollout]["ana"]
    assert (latest.verdict, latest.note) == ("success", "on replay")
    judged = operator_outcomes([first], read_verdicts(run_dir))
    assert judged.records[0][keys.OUTCOME] == "solved"
    assert judged.records[0]["automatic_outcome"] == first[keys.OUTCOME]


def test_a_torn_last_line_is_reported_and_kept_and_the_lines_after_it_still_read(pytester, capsys):
    run_dir = point_run(pytester)
    rollouts = [rollout_id(record) for record in records(run_dir)]
    append_verdict(run_dir, Verdict.now(rollouts[0], "success", "ana"))
    with (run_dir / VERDICTS).open("a") as file:
        file.write('{"rollout_id": "' + rollouts[1] + '", "verdi')  # a writer killed mid-line
    torn = (run_dir / VERDICTS).read_text()
    append_verdict(run_dir, Verdict.now(rollouts[2], "failure", "ana"))

    text = (run_dir / VERDICTS).read_text()
    assert text.startswith(torn + "\n"), (
        "the torn line stays as it was, the next on a line of its own"
    )
    verdicts = read_verdicts(run_dir)
    assert [v.rollout for v in verdicts.given] == [rollouts[0], rollouts[2]]
    (problem,) = verdicts.problems
    assert problem.startswith("verdicts.jsonl line 2: not valid JSON")
    assert "kept in the file" in problem
    assert main(["report", "html", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "warning: verdicts.jsonl line 2: not valid JSON" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["operator"]["problems"] == [problem]


def test_operator_outcomes_count_unscored_rollouts_apart_and_errors_stay_errors():
    def record(seed: int, outcome: str) -> dict[str, Any]:
        return {keys.EVAL: "e", keys.TASK: "t", keys.OUTCOME: outcome, keys.NODEID: f"t[{seed}]"}

    runs = [record(0, "solved"), record(1, "unsolved"), record(2, "unsolved"), record(3, "error")]
    runs.append(record(4, "solved"))
    given = [
        Verdict("t[0]", "failure", "ana", "1"),
        Verdict("t[1]", "success", "ana", "2"),
        Verdict("t[1]", "success", "ben", "3"),
        Verdict("t[2]", "unsure", "ana", "4"),
        Verdict("t[4]", "success", "ana", "5"),
        Verdict("t[4]", "failure", "ben", "6"),
    ]
    from policybench.run.verdicts import Verdicts

    judged = operator_outcomes(runs, Verdicts(tuple(given)))
    assert [r[keys.OUTCOME] for r in judged.records] == ["unsolved", "solved", "error"]
    assert [(r[keys.NODEID], why) for r, why in judged.unscored] == [
        ("t[2]", "scored unsure"),
        ("t[4]", "scorers disagree"),
    ]
    (line,) = judged.lines("run1")
    assert "2 rollout(s) of run1 have no operator verdict" in line
    only_ben = operator_outcomes(runs, Verdicts(tuple(given)), scorer="ben")
    assert [r[keys.NODEID] for r in only_ben.records] == ["t[1]", "t[3]", "t[4]"]
    assert [why for _, why in only_ben.unscored] == ["not scored yet", "not scored yet"]


def test_verdicts_survive_merge_and_those_given_on_the_merge_survive_a_remerge(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    for k in (1, 2):
        result = pytester.runpytest(
            "--rollouts", "1", "--shard", f"{k}/2", "--report-dir", "shards"
        )
        assert result.ret == 0
    parts = sorted((pytester.path / "shards").glob("*-shard*of2"))
    for verdict, part in zip(("success", "failure"), parts, strict=True):
        append_verdict(part, Verdict.now(rollout_id(records(part)[0]), verdict, "ana"))
    out = pytester.path / "merged"
    assert main(["report", "merge", *map(str, parts), "--out", str(out)]) == 0
    assert [v.verdict for v in read_verdicts(out).given] == ["success", "failure"]
    append_verdict(out, Verdict.now(rollout_id(records(out)[-1]), "unsure", "ben"))
    assert main(["report", "merge", *map(str, parts), "--out", str(out)]) == 0
    assert [v.verdict for v in read_verdicts(out).given] == ["success", "failure", "unsure"]
    operator = json.loads((out / "summary.json").read_text())["operator"]
    assert operator["scorers"] == ["ana", "ben"]


def test_verdicts_survive_resume_and_gates_can_judge_them_with_unscored_rollouts_named(pytester):
    run_dir = point_run(pytester)
    runs = records(run_dir)
    for record in runs[:-1]:
        append_verdict(run_dir, Verdict.now(rollout_id(record), "failure", "ana"))
    before = (run_dir / VERDICTS).read_text()
    resumed = pytester.runpytest(
        "--rollouts",
        "1",
        "-p",
        "no:cacheprovider",
        "--resume",
        "latest",
        "--outcome-source",
        "operator",
        "--success-fail-under",
        "0.5",
    )
    assert (run_dir / VERDICTS).read_text() == before
    text = resumed.stdout.str()
    assert resumed.ret == 1, text[-3000:]  # every scored rollout failed, by the operator
    assert f"judged operator verdicts (operator): {len(runs) - 1} of {len(runs)} rollouts" in text
    unscored = f"not counted in the rates: {rollout_id(runs[-1])} (not scored yet)"
    assert "1 rollout(s) have no operator verdict and are " + unscored in text
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["operator"]["rows"][-1]["scored"] == len(runs) - 1
    bad = pytester.runpytest("--rollouts", "1", "--outcome-source", "operators")
    assert bad.ret == 4
    bad.stderr.fnmatch_lines(
        ["*--outcome-source 'operators': expected automatic, operator or operator:NAME*"]
    )


def test_compare_with_operator_outcomes_compares_the_verdicts_and_lists_the_unscored(
    pytester, capsys
):
    first = point_run(pytester, "one")
    second = point_run(pytester, "two")
    for run_dir, verdict in ((first, "success"), (second, "failure")):
        for record in records(run_dir)[:-1]:
            append_verdict(run_dir, Verdict.now(rollout_id(record), verdict, "ana"))
    capsys.readouterr()
    done = main(["report", "compare", str(first), str(second), "--outcome-source", "operator"])
    assert done == 0
    captured = capsys.readouterr()
    scored = len(records(first)) - 1
    assert f"{scored}/{scored} (100%)" in captured.out and f"0/{scored} (0%)" in captured.out
    assert (
        f"warning: outcome source operator: 1 rollout(s) of {first.name} have no operator verdict"
        in captured.err
    )
