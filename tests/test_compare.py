"""Comparing runs: rollouts of the same scenes are paired (exact McNemar, Newcombe's paired
interval), others get Fisher's exact test; runs with different Evals compare the shared tasks and
list the rest; a protocol difference is named, refused by `policybench report compare` and fails
`--baseline --fail-on-regression`; `--baseline` on a pytest run."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import pytest

from policybench.cli import main as policybench_main
from policybench.report.compare import Design, compare_runs
from policybench.report.paired import Adjustment


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


def scenes(
    outcomes: str, eval: str = "e", task: str = "t", first_seed: int = 0, **statics
) -> list[dict]:
    """One record per character of `outcomes` (s: solved, u: unsolved, e: error), seed by seed."""
    kinds = {"s": "solved", "u": "unsolved", "e": "error"}
    return [
        {
            "eval": eval,
            "task": task,
            "scene": {"task": task, "seed": first_seed + i},
            "outcome": kinds[kind],
            "steps": 10,
            "sim_s": 1.0,
            "wall_s": 0.01,
            "timeout_s": 2.0,
            "eval_settings": {"camera": "front"},
            "packages": {"policybench": "0.1.0", "gymnasium": "1.0.0"},
            **statics,
        }
        for i, kind in enumerate(outcomes)
    ]


def binomial_two_sided(successes: int, trials: int) -> float:
    """The exact McNemar p-value from its definition: twice the smaller binomial(1/2) tail."""
    tail = min(successes, trials - successes)
    return min(1.0, 2 * sum(comb(trials, i) for i in range(tail + 1)) / 2**trials)


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
    assert "REGRESSION" in out
    assert "verdict: 1 significant regression, 0 significant improvements of 2 tasks" in out
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


def test_rollouts_of_the_same_scenes_are_paired_and_get_the_exact_mcnemar_test():
    # 20 scenes: 8 solved by both, 7 lost, 0 gained, 5 by neither. Pooled counts 15/20 vs 8/20
    # are not significant by Fisher's test; the pairs are, by McNemar's.
    before = scenes("s" * 8 + "s" * 7 + "u" * 5)
    after = scenes("s" * 8 + "u" * 7 + "u" * 5)
    (row,) = compare_runs(before, after).tasks
    assert row.design is Design.PAIRED
    assert (row.pairs.both, row.pairs.lost, row.pairs.gained, row.pairs.neither) == (8, 7, 0, 5)
    assert row.p_value == pytest.approx(binomial_two_sided(0, 7), rel=1e-9)  # 2 / 128
    assert fisher_two_sided(15, 5, 8, 12) > 0.05 > row.p_value
    assert row.difference == pytest.approx(-7 / 20) and row.regression
    low, high = row.interval
    assert low < row.difference < high < 0


def test_a_paired_task_carries_newcombes_interval_as_published():
    # Newcombe (1998) Stat Med 17:2635 Table III, first example: 36 both, 12 gained, 2 lost.
    before = scenes("s" * 36 + "u" * 12 + "s" * 2)
    after = scenes("s" * 36 + "s" * 12 + "u" * 2)
    (row,) = compare_runs(before, after).tasks
    assert row.interval == pytest.approx((0.0569, 0.3404), abs=1.5e-4)
    assert row.p_value == pytest.approx(binomial_two_sided(12, 14))
    assert row.improvement and not row.regression


def test_an_error_counts_as_not_solved_in_a_pair():
    (row,) = compare_runs(scenes("ssss"), scenes("seus")).tasks
    assert (row.pairs.both, row.pairs.lost, row.pairs.gained) == (2, 2, 0)


def test_scenes_pair_on_every_scene_field_not_only_the_seed():
    before = scenes("ssss", init_state=None)
    for record, state in zip(before, (0, 1, 2, 3), strict=True):
        record["scene"]["init_state"] = state
    after = [dict(record, scene={**record["scene"], "init_state": 9}) for record in before]
    (row,) = compare_runs(before, after).tasks
    assert row.design is Design.UNPAIRED and row.pairs is None
    assert row.p_value == pytest.approx(fisher_two_sided(4, 0, 4, 0))


def test_a_few_shared_seeds_do_not_make_a_task_paired():
    before = scenes("ssssssssss")  # seeds 0-9
    after = scenes("uuuuuuuuuu", first_seed=9)  # seeds 9-18: one scene in common
    (row,) = compare_runs(before, after).tasks
    assert row.design is Design.UNPAIRED
    assert row.p_value == pytest.approx(fisher_two_sided(10, 0, 0, 10))


def test_rollouts_without_a_partner_are_left_out_of_the_paired_test_and_named(tmp_path):
    before = scenes("ssssssssss")  # seeds 0-9
    after = scenes("uuuuuuuuuu" + "ssssssssss")  # seeds 0-19
    comparison = compare_runs(before, after, ("A", "B"))
    (row,) = comparison.tasks
    assert row.design is Design.PAIRED and row.left_out == (0, 10)
    assert (row.before.rollouts, row.after.rollouts) == (10, 10)
    assert (
        "10 rollouts of B on 1 task (e/t) have no scene in A, so the paired test leaves them "
        "out: run A with as many rollouts a task to pair them all" in comparison.lines()
    )


def test_an_evals_tasks_are_pooled_in_a_row_of_their_own():
    before = scenes("sssss", task="a") + scenes("sssss", task="b") + scenes("ss", eval="f")
    after = scenes("ssssu", task="a") + scenes("uuuss", task="b") + scenes("ss", eval="f")
    comparison = compare_runs(before, after)
    pooled = {row.eval: row for row in comparison.evals}
    assert pooled["e"].task is None and pooled["e"].pairs.lost == 4
    assert pooled["e"].p_value == pytest.approx(binomial_two_sided(0, 4))
    # Each Eval's pooled test is adjusted across the Evals (Holm): 2 x 0.125 for e.
    assert pooled["e"].adjusted_p == pytest.approx(0.25) and not pooled["e"].regression
    assert pooled["f"].p_value == 1.0 and pooled["f"].adjusted_p == 1.0


def test_holm_adjustment_can_be_chosen(tmp_path, capsys):
    before = scenes("s" * 9, task="a") + scenes("s" * 6, task="b") + scenes("s" * 5, task="c")
    after = scenes("u" * 9, task="a") + scenes("u" * 6, task="b") + scenes("s" * 5, task="c")
    rows = compare_runs(before, after, adjustment=Adjustment.HOLM).tasks
    raw = [binomial_two_sided(0, 9), binomial_two_sided(0, 6), 1.0]
    assert [row.p_value for row in rows] == pytest.approx(raw)
    # Holm: the smallest times 3, the next times 2 (kept at least the one before), then 1.
    assert [row.adjusted_p for row in rows] == pytest.approx([3 * raw[0], 2 * raw[1], 1.0])
    write_run(tmp_path / "before", before)
    write_run(tmp_path / "after", after)
    command = ["report", "compare", str(tmp_path / "before"), str(tmp_path / "after")]
    assert policybench_main([*command, "--adjust", "holm"]) == 0
    assert "adjusted across tasks by Holm" in capsys.readouterr().out


def test_a_protocol_difference_is_named_and_refused_unless_allowed(tmp_path, capsys):
    before = scenes("ssss") + scenes("ss", task="u")
    after = scenes("ssss", timeout_s=0.5, eval_settings={"camera": "wrist"}) + scenes(
        "ss", task="u", packages={"policybench": "0.2.0", "gymnasium": "1.0.0"}
    )
    comparison = compare_runs(before, after, ("A", "B"))
    assert [(d.eval, d.field) for d in comparison.protocol] == [
        ("e", "eval_settings.camera"),
        ("e", "timeout_s"),
    ]  # policybench's own version is not part of the protocol
    assert comparison.protocol_lines()[1] == "eval e: timeout_s is 2.0 in A but 0.5 in B"
    write_run(tmp_path / "A", before)
    write_run(tmp_path / "B", after)
    command = ["report", "compare", str(tmp_path / "A"), str(tmp_path / "B")]
    with pytest.raises(SystemExit, match="ran different protocols") as refused:
        policybench_main(command)
    # An Eval's settings are compared over its rollouts; B ran task u with the front camera.
    message = str(refused.value)
    assert 'eval e: eval_settings.camera is "front" in A but "front", "wrist" in B' in message
    assert "--allow-protocol-change" in message
    assert not (tmp_path / "B" / "compare-A.txt").exists()
    assert policybench_main([*command, "--allow-protocol-change"]) == 0
    out = capsys.readouterr().out
    assert "PROTOCOL DIFFERS: eval e: timeout_s is 2.0 in A but 0.5 in B" in out
    written = json.loads((tmp_path / "B" / "compare-A.json").read_text())
    assert written["protocol"][1] == {"eval": "e", "field": "timeout_s", "before": ["2.0"],
                                      "after": ["0.5"]}  # fmt: skip


BENCHMARK = """
import numpy as np

import policybench
from envs import GreedyPointModel, point_eval
from policybench.policy.base import Chunk


class StillPointModel(GreedyPointModel):
    name = "still"

    def open(self, context):
        return lambda obs: Chunk(np.zeros((1, 1)), context.control_hz)


EVAL = point_eval("point", tasks={"reach": "reach"}, timeout_s=TIMEOUT, scripted=MODEL)


@policybench.parametrize(EVAL)
def test_point(rollout, harness):
    harness(rollout)
"""


def benchmark(model: str, timeout_s: float = 2.0) -> str:
    return BENCHMARK.replace("TIMEOUT", str(timeout_s)).replace("MODEL", model)


def test_baseline_option_compares_at_the_end_and_can_gate_on_a_regression(pytester):
    envs = (Path(__file__).parent / "envs.py").read_text()
    pytester.makepyfile(envs=envs, test_point=benchmark("GreedyPointModel"))
    assert pytester.runpytest("--rollouts", "6").ret == 0
    baseline = (pytester.path / "reports" / "latest").resolve().name
    # The same six scenes under a policy that stands still: every pair is lost, p = 2 / 2^6.
    pytester.makepyfile(test_point=benchmark("StillPointModel"))
    result = pytester.runpytest(
        "--rollouts", "6", "--baseline", "latest", "--fail-on-regression",
        "--allow-weak-regression-gate",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"compared with baseline {baseline}:",
            "point*reach*McNemar*6/6 (100%)*0/6 (0%)*-100.0%*6/0*0.0312*0.0312*REGRESSION",
            "FAIL regression point/reach: success 0.0% (95% CI [0.0%, 39.0%]) below baseline "
            "100.0% (change -100.0%, 95% CI [-100.0%, -44.8%]; 6 of 6 paired scenes lost, "
            "0 gained, exact McNemar, p adjusted across tasks = 0.0312 < 0.05)",
        ]
    )
    assert "PROTOCOL DIFFERS" not in result.stdout.str()
    run_dir = (pytester.path / "reports" / "latest").resolve()
    written = json.loads((run_dir / "compare.json").read_text())
    assert written["before"] == baseline and written["tasks"][0]["design"] == "paired"
    html = (run_dir / "index.html").read_text()
    assert 'id="comparison-table"' in html and 'data-design="paired"' in html


def test_baseline_with_another_protocol_fails_the_regression_gate(pytester):
    envs = (Path(__file__).parent / "envs.py").read_text()
    pytester.makepyfile(envs=envs, test_point=benchmark("GreedyPointModel", timeout_s=2.0))
    assert pytester.runpytest("--rollouts", "2").ret == 0
    baseline = (pytester.path / "reports" / "latest").resolve().name
    pytester.makepyfile(test_point=benchmark("GreedyPointModel", timeout_s=3.0))
    result = pytester.runpytest(
        "--rollouts", "2", "--baseline", "latest", "--fail-on-regression",
        "--allow-weak-regression-gate",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "PROTOCOL DIFFERS: eval point: timeout_s is 2.0 in * but 3.0 in *",
            "FAIL --fail-on-regression: protocol differs from the baseline's: eval point: "
            "timeout_s is 2.0 in * but 3.0 in *; rerun the baseline with this run's settings, or "
            "pass --allow-protocol-change to judge regressions anyway",
        ]
    )
    run_dir = (pytester.path / "reports" / "latest").resolve()
    assert 'id="protocol-differences"' in (run_dir / "index.html").read_text()
    allowed = pytester.runpytest(
        "--rollouts", "2", "--baseline", baseline, "--fail-on-regression",
        "--allow-protocol-change", "--allow-weak-regression-gate",
    )  # fmt: skip
    assert allowed.ret == pytest.ExitCode.OK
    allowed.stdout.fnmatch_lines(
        ["PROTOCOL DIFFERS: eval point: timeout_s is 2.0 in * but 3.0 in *"]
    )


def test_a_comparison_states_improvements_as_well_as_regressions_in_one_verdict():
    before = scenes("u" * 10, task="better") + scenes("s" * 10, task="worse")
    after = scenes("s" * 10, task="better") + scenes("u" * 10, task="worse")
    comparison = compare_runs(before, after)
    assert [row.task for row in comparison.improvements] == ["better"]
    assert [row.task for row in comparison.regressions] == ["worse"]
    verdict = comparison.lines()[-1]
    assert verdict.startswith(
        "verdict: 1 significant regression, 1 significant improvement of 2 tasks"
    )
    assert "too few" not in verdict
    assert comparison.as_json()["verdict"] == verdict


@pytest.mark.parametrize(("rollouts", "paired"), [(3, True), (3, False), (5, True)])
def test_too_few_rollouts_a_task_to_ever_be_significant_is_said_with_plan(rollouts, paired):
    """10/10 against 0/10 is significant; 3/3 against 0/3 never can be (McNemar's smallest p
    with 3 pairs is 0.25, Fisher's with 3 a side 0.1), nor 5 pairs (0.0625) at 0.05."""
    first = 0 if paired else 100  # unpaired: no shared scene
    before = scenes("u" * rollouts)
    after = scenes("s" * rollouts, first_seed=first)
    comparison = compare_runs(before, after)
    (row,) = comparison.tasks
    assert row.smallest_p >= 0.05 and not row.improvement
    assert row.design is (Design.PAIRED if paired else Design.UNPAIRED)
    verdict = comparison.verdict()
    assert f"1 of them had too few rollouts ({rollouts} a task) to ever reach p < 0.05" in verdict
    assert "`policybench plan`" in verdict


@pytest.mark.parametrize("paired", [True, False])
def test_one_evals_pooled_row_is_compare_runs_row_made_alone(paired):
    """The history tests each step of a line with `pooled_row`, which skips the task rows: its
    row must be the one `compare_runs` makes for the Eval, paired or stratified."""
    import random

    from policybench.report.compare import pooled_row

    rng = random.Random(7)
    before, after = [], []
    for k, task in enumerate(("reach", "push", "door")):
        was = "".join(rng.choice("ssu") for _ in range(40))
        now = "".join(rng.choice("suu") for _ in range(40))
        before += scenes(was, task=task)
        after += scenes(now, task=task, first_seed=0 if paired else 1000 + 100 * k)
    after += scenes("ss", task="only-after")
    row = compare_runs(before, after).evals[0]
    alone = pooled_row("e", before, after)
    assert alone is not None and row.design is (Design.PAIRED if paired else Design.UNPAIRED)
    assert (alone.design, alone.p_value, alone.adjusted_p, alone.pairs) == (
        row.design, row.p_value, row.adjusted_p, row.pairs,
    )  # fmt: skip
    assert (alone.regression, alone.improvement) == (row.regression, row.improvement)
    assert pooled_row("e", before, scenes("s", task="elsewhere")) is None


def test_a_scene_key_made_from_stored_text_is_the_records_own():
    from policybench.run.records import scene_key, scene_key_of, scene_text

    scenes = ({"seed": 3, "task": "t"}, {"b": [1, 2.0, {"z": None, "a": 'é"'}], "a": True},
              {}, None, [1], "text", {"big": 2**70}, {"x": float("nan")}, {"x": None},
              {"x": float("inf")}, {"s": "\ud800"})  # fmt: skip
    for scene in scenes:
        record = {"eval": 'e"v', "task": "t/é", "scene": scene}
        assert scene_key_of('e"v', "t/é", scene_text(scene)) == scene_key(record)
        if "nan" not in repr(scene):  # NaN is not equal to itself
            assert json.loads(scene_text(scene)) == scene
    # Two scenes' texts are equal only where the scenes are (orjson writes NaN as null)
    texts = [scene_text(scene) for scene in scenes]
    assert len(set(texts)) == len(texts)
