"""Comparing runs: per-task rates, the change and a two-sided Fisher exact p-value on synthetic
result sets with known counts; runs with different Evals compare the shared tasks and list the
rest; `policybench report compare` and `--baseline` on a pytest run."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import pytest

from policybench.cli import main as policybench_main
from policybench.report.compare import compare_runs


def records(eval: str, task: str, solved: int, rollouts: int) -> list[dict]:
    return [
        {
            "eval": eval,
            "task": task,
            "outcome": "solved" if i < solved else "unsolved",
            "steps": 10,
            "sim_s": 1.0,
            "wall_s": 0.01,
        }
        for i in range(rollouts)
    ]


def fisher_two_sided(a: int, b: int, c: int, d: int) -> float:
    """Fisher's exact test from its definition: the hypergeometric probabilities of all tables
    with the same margins that are no more likely than the observed one."""
    row, col, n = a + b, a + c, a + b + c + d

    def p(x: int) -> float:
        return comb(col, x) * comb(n - col, row - x) / comb(n, row)

    observed = p(a)
    return sum(
        p(x)
        for x in range(max(0, row + col - n), min(row, col) + 1)
        if p(x) <= observed * (1 + 1e-7)
    )


def write_run(directory: Path, lines: list[dict]) -> Path:
    directory.mkdir(parents=True)
    (directory / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return directory


def test_fisher_p_value_for_known_counts():
    # 9/10 before, 2/10 after: p = 0.005477 (two-sided Fisher exact).
    comparison = compare_runs(records("e", "t", 9, 10), records("e", "t", 2, 10))
    (row,) = comparison.tasks
    assert row.p_value == pytest.approx(fisher_two_sided(9, 1, 2, 8), rel=1e-9)
    assert row.p_value == pytest.approx(0.005477, abs=1e-6)
    assert row.difference == pytest.approx(-0.7)
    assert row.regression and comparison.regressions == (row,)


def test_equal_counts_are_no_regression_and_small_samples_are_not_significant():
    same = compare_runs(records("e", "t", 5, 10), records("e", "t", 5, 10))
    assert same.tasks[0].p_value == pytest.approx(1.0)
    small = compare_runs(records("e", "t", 3, 3), records("e", "t", 1, 3))
    assert small.tasks[0].p_value == pytest.approx(fisher_two_sided(3, 0, 1, 2))  # 0.4
    assert not small.regressions


def test_p_values_are_adjusted_across_tasks():
    before = records("e", "a", 9, 10) + records("e", "b", 5, 10) + records("e", "c", 5, 10)
    after = records("e", "a", 4, 10) + records("e", "b", 5, 10) + records("e", "c", 5, 10)
    rows = {row.task: row for row in compare_runs(before, after).tasks}
    raw = fisher_two_sided(9, 1, 4, 6)  # 0.0573: not significant even before adjusting
    assert rows["a"].p_value == pytest.approx(raw)
    assert rows["a"].adjusted_p == pytest.approx(min(1.0, raw * 3))  # BH with two p = 1
    assert not rows["a"].regression


def test_runs_with_different_evals_compare_shared_tasks_and_list_the_rest():
    before = records("shared", "t", 4, 5) + records("old", "gone", 5, 5)
    after = records("shared", "t", 5, 5) + records("new", "added", 0, 5)
    comparison = compare_runs(before, after, ("A", "B"))
    assert [(row.eval, row.task) for row in comparison.tasks] == [("shared", "t")]
    assert comparison.only_before == (("old", "gone"),)
    assert comparison.only_after == (("new", "added"),)
    lines = comparison.lines()
    assert "only in A: old/gone" in lines and "only in B: new/added" in lines


def test_compare_command_prints_writes_and_gates(tmp_path, capsys):
    reports = tmp_path / "reports"
    write_run(reports / "before", records("e", "t", 9, 10) + records("e", "u", 3, 10))
    write_run(reports / "after", records("e", "t", 2, 10) + records("e", "u", 3, 10))
    args = ["report", "compare", "before", "after", "--report-dir", str(reports)]
    assert policybench_main(args) == 0
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "1 significant regression " in out
    written = json.loads((reports / "after" / "compare-before.json").read_text())
    assert [row["regression"] for row in written["tasks"]] == [True, False]
    assert (reports / "after" / "compare-before.txt").read_text().splitlines()[0].startswith("eval")
    assert policybench_main([*args, "--fail-on-regression"]) == 1


def test_compare_command_reports_a_corrupt_line_and_compares_the_rest(tmp_path, capsys):
    before = write_run(tmp_path / "a", records("e", "t", 3, 3))
    after = write_run(tmp_path / "b", records("e", "t", 3, 3))
    with (after / "results.jsonl").open("a") as file:
        file.write('{"eval": "e", "task": "t", "outc')
    assert policybench_main(["report", "compare", str(before), str(after)]) == 0
    captured = capsys.readouterr()
    assert "b: results.jsonl line 4: not valid JSON" in captured.err
    assert "3/3 (100%)" in captured.out


BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

EVAL = point_eval("point", tasks={"reach": "reach"}, timeout_s=TIMEOUT, scripted=GreedyPointModel)


@policybench.evaluate(EVAL)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_baseline_option_compares_at_the_end_and_can_gate_on_a_regression(pytester):
    envs = (Path(__file__).parent / "envs.py").read_text()
    pytester.makepyfile(envs=envs, test_point=BENCHMARK.replace("TIMEOUT", "2.0"))
    assert pytester.runpytest("--rollouts", "6").ret == 0
    baseline = (pytester.path / "reports" / "latest").resolve().name
    # The same rollouts with too short a timeout: 6/6 solved becomes 0/6, p = 2 / C(12, 6).
    pytester.makepyfile(test_point=BENCHMARK.replace("TIMEOUT", "0.1"))
    result = pytester.runpytest("--rollouts", "6", "--baseline", "latest", "--fail-on-regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"compared with baseline {baseline}:",
            "point*reach*6/6 (100%)*0/6 (0%)*-100.0%*0.00216*REGRESSION",
            "FAIL regression point/reach: success 0.0% (95% CI [0.0%, 39.0%]) below baseline "
            "100.0% (adjusted p = 0.00216 < 0.05)",
        ]
    )
    run_dir = (pytester.path / "reports" / "latest").resolve()
    assert json.loads((run_dir / "compare.json").read_text())["before"] == baseline
    assert 'id="comparison"' in (run_dir / "index.html").read_text()
