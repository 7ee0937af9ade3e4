"""The run report: results.jsonl read back line by line, summary.json and run.json, the HTML
pages and `policybench report html`, from real pytest runs (pytester) and real files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from policybench.cli import main as policybench_main
from policybench.report.stats import Tally
from policybench.report.summary import Summary
from policybench.run.results import read_results


def table_rows(index: str) -> list[dict]:
    """The rollouts table's rows as the index's script reads them (the data it embeds)."""
    found = re.search(
        r'<script type="application/json" id="rollouts-data">(.*?)</script>', index, re.S
    )
    assert found is not None, "no rollouts data in the index"
    data = json.loads(found.group(1))
    rows = []
    for row in data["rows"]:
        named = dict(zip(data["columns"], row, strict=True))
        for name, values in data["values"].items():
            named[name] = None if named[name] is None else values[named[name]]
        rows.append(named)
    return rows


ENVS = (Path(__file__).parent / "envs.py").read_text()

BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

SOLVABLE = point_eval("solvable", tasks={"reach": "reach", "near": "reach near"},
                      scripted=GreedyPointModel)
BROKEN = point_eval("broken", tasks={"crash": "reach and crash"}, raise_at_step=2,
                    scripted=GreedyPointModel)
SLOW = point_eval("slow", tasks={"far": "reach slowly"}, timeout_s=0.2, scripted=GreedyPointModel)


@policybench.parametrize(SOLVABLE, BROKEN, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    return pytester


def latest(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "reports" / "latest").resolve()


def test_wilson_interval_matches_the_textbook_value():
    # Wilson score interval for 8 of 10 at 95%: (0.4902, 0.9433) (Newcombe 1998, table I style).
    low, high = Tally(rollouts=10, solved=8, unsolved=2).interval()
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)


def test_summary_json_has_per_eval_per_task_and_overall_counts_with_intervals(bench):
    bench.runpytest("--rollouts", "2")
    summary = json.loads((latest(bench) / "summary.json").read_text())
    by_eval = {row["eval"]: row for row in summary["evals"]}
    assert {
        name: (row["rollouts"], row["solved"], row["unsolved"], row["errors"])
        for name, row in by_eval.items()
    } == {
        "solvable": (4, 4, 0, 0),
        "broken": (2, 0, 0, 2),
        "slow": (2, 0, 2, 0),
    }
    assert by_eval["solvable"]["success_rate"] == 1.0
    assert by_eval["solvable"]["interval"] == pytest.approx(list(Tally(4, 4).interval()))
    tasks = {(row["eval"], row["task"]): row["rollouts"] for row in summary["tasks"]}
    assert tasks == {
        ("solvable", "reach"): 2,
        ("solvable", "near"): 2,
        ("broken", "crash"): 2,
        ("slow", "far"): 2,
    }
    overall = summary["overall"]
    assert (overall["rollouts"], overall["solved"]) == (8, 4)
    assert overall["steps"]["count"] == 8
    assert by_eval["slow"]["steps"]["median"] == 2  # 0.2 s at 10 Hz
    assert by_eval["solvable"]["inference_latency"] == ["none"]
    # Every solvable rollout called its model: the spread of their mean call times is there.
    assert by_eval["solvable"]["infer_ms_mean"]["count"] == 4
    assert by_eval["solvable"]["infer_ms_mean"]["low"] > 0.0


def test_run_json_records_what_makes_the_run_reproducible(bench):
    bench.runpytest("--rollouts", "1", "--seed", "7", "--inference-latency", "0.05", "-k", "reach")
    run = json.loads((latest(bench) / "run.json").read_text())
    assert run["run_id"] == latest(bench).name
    assert run["command"].startswith(
        "pytest --rollouts 1 --seed 7 --inference-latency 0.05 -k reach"
    )
    assert run["policybench"] == "0.1.0"
    assert run["host"] and run["started"]
    settings = run["settings"]
    assert (settings["policy"], settings["base_seed"], settings["inference_latency"]) == (
        "scripted",
        7,
        "0.05",
    )
    record = json.loads((latest(bench) / "results.jsonl").read_text().splitlines()[0])
    assert record["policy"]["inference_latency"] == "0.05"
    assert "policybench" in record["packages"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_run_json_records_the_git_revision_of_the_checkout_the_run_started_in(bench, monkeypatch):
    # git looks no further up than the bench's own directory, whatever checkout holds it.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(bench.path.parent))

    def revision() -> str:
        bench.runpytest("--rollouts", "1", "-k", "reach")
        return json.loads((latest(bench) / "run.json").read_text())["git_revision"]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=bench.path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert revision() == "not a git checkout"
    git("init", "--quiet")
    git("add", "envs.py", "test_point.py")
    identity = ["-c", "user.name=policybench", "-c", "user.email=policybench@example.com"]
    git(*identity, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-m", "bench")
    head = git("rev-parse", "--short=12", "HEAD")
    assert revision() == head  # the run's own reports are untracked: the checkout is clean
    with (bench.path / "envs.py").open("a") as envs:
        envs.write("# a change not committed\n")
    assert revision() == f"{head}-dirty"


def test_terminal_summary_names_the_html_report(bench):
    result = bench.runpytest("--rollouts", "1")
    result.stdout.fnmatch_lines(["results: *results.jsonl", "report: *index.html (written in *s)"])
    assert (latest(bench) / "index.html").is_file()


def test_html_report_shows_overview_chart_rollouts_and_error_messages(bench):
    bench.runpytest("--rollouts", "2")
    run_dir = latest(bench)
    index = (run_dir / "index.html").read_text()
    for element in (
        'id="overview-table"',
        'id="success-chart"',
        'id="rollouts-table"',
        'class="histogram"',
        'data-filter="outcome"',
    ):
        assert element in index
    assert index.count('<g class="bar"') == 3  # one bar per task, but for the one that errored
    assert "Every rollout errored, so no rate is drawn, for: broken / crash." in index
    assert [row["outcome"] for row in table_rows(index)].count("error") == 2
    assert "env step raised RuntimeError: simulated physics blow-up at step 2" in index
    pages = sorted((run_dir / "rollouts").glob("*.html"))
    assert len(pages) == 8
    broken = [page.read_text() for page in pages if "crash" in page.read_text()]
    assert broken and all("simulated physics blow-up" in page for page in broken)
    assert all("not started with --record-video" in page for page in broken)


def test_html_escapes_what_the_records_say(tmp_path):
    record = {
        "eval": "e",
        "task": "<script>alert(1)</script>",
        "outcome": "error",
        "steps": 0,
        "sim_s": 0.0,
        "wall_s": 0.0,
        "reason": "<b>boom</b>",
    }
    (tmp_path / "results.jsonl").write_text(json.dumps(record) + "\n")
    assert policybench_main(["report", "html", str(tmp_path)]) == 0
    html = (tmp_path / "index.html").read_text() + (
        tmp_path / "rollouts" / "00000.html"
    ).read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;b&gt;boom&lt;/b&gt;" in html


def test_corrupt_results_lines_are_reported_by_line_number_and_the_rest_aggregated(bench, capsys):
    bench.runpytest("--rollouts", "2", "-k", "reach or near or far")
    path = latest(bench) / "results.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 6
    lines[2] = lines[2][: len(lines[2]) // 2]  # cut off, as an interrupted write leaves it
    lines.insert(4, '{"eval": "solvable", "task": "reach"}')  # valid JSON, not a rollout
    path.write_text("\n".join(lines) + "\n")

    results = read_results(path)
    assert len(results.records) == 5
    assert results.problems[0].startswith("results.jsonl line 3: not valid JSON")
    assert results.problems[1] == "results.jsonl line 5: missing field 'outcome', skipped"

    assert policybench_main(["report", "html", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: results.jsonl line 3: not valid JSON" in err
    summary = json.loads((latest(bench) / "summary.json").read_text())
    assert summary["overall"]["rollouts"] == 5
    assert summary["problems"] == list(results.problems)
    assert "results.jsonl line 3: not valid JSON" in (latest(bench) / "index.html").read_text()


def test_summary_lists_every_value_of_a_static_that_differs_between_rollouts():
    records = [
        {
            "eval": "e",
            "task": "t",
            "outcome": o,
            "steps": 3,
            "sim_s": 0.3,
            "wall_s": 0.01,
            "policy": {"name": "p", "checkpoint": c},
        }
        for o, c in (("solved", "step-100"), ("unsolved", "step-200"))
    ]
    (row,) = Summary.of(records).evals
    assert row.policy == {"name": "p", "checkpoint": ["step-100", "step-200"]}
    assert row.stats.tally == Tally(2, 1, 1, 0)


@pytest.mark.parametrize("evals", [("e",), ("e", "f")])
def test_the_whole_runs_row_is_what_its_records_count(evals):
    # A run of one Eval takes its Eval's row for the whole run; it must be the same figures.
    records = [
        {
            "eval": evals[i % len(evals)], "task": f"t{i % 3}", "outcome": o, "steps": 3 + i,
            "sim_s": 0.1 * i, "wall_s": 0.01 * i, "success_reported": i % 2 == 0,
            "policy": {"name": "p", "inference_latency": "none" if i % 4 else "0.1"},
        }
        for i, o in enumerate(["solved", "unsolved", "error", "solved", "unsolved"] * 3)
    ]  # fmt: skip
    summary = Summary.of(records)
    alone = Summary.of([{**r, "eval": "every"} for r in records]).evals[0]
    assert summary.overall.eval == "all" and summary.overall.task is None
    assert summary.overall.stats == alone.stats and summary.overall.policy == alone.policy
    assert summary.overall.success_reported == alone.success_reported is True


def test_report_of_a_missing_run_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        policybench_main(["report", "html", str(tmp_path / "nope")])
    assert "expected a run directory holding results.jsonl" in str(exit.value)


def test_a_results_follower_reads_each_whole_line_once_as_the_file_grows(tmp_path):
    from policybench.run.results import ResultsFollower

    path = tmp_path / "results.jsonl"
    follower = ResultsFollower(path)
    assert follower.new() == []  # no file yet
    first = {"eval": "e", "task": "t", "outcome": "solved", "steps": 3, "sim_s": 0.3, "wall_s": 0.1}
    line = json.dumps(first) + "\n"
    path.write_text(line + line[:10])  # a second record cut off mid-line
    assert follower.new() == [first]
    with path.open("a") as file:
        file.write(line[10:] + "not json\n")
    assert follower.new() == [first]  # the cut line, once whole; garbage skipped
    assert follower.new() == []
