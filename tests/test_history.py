"""`policybench history`: runs written into one folder are read into history.sqlite and shown on
index.html, success per Eval over runs; a run under another protocol starts a new line; a
significant drop between consecutive comparable runs is marked, and `--fail-on-regression`
fails on a newest run significantly worse than its reference; the store answers "success per
Eval per run" as the runs' summaries do, is rebuilt when deleted, reads only new runs, and counts
a run merged from shards once."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from policybench.cli import main
from policybench.report.history import STORE, SUCCESS_PER_EVAL
from tests.test_shards import BENCHMARK, ENVS

RUN = ("--rollouts", "6", "--report-dir", "runs", "-p", "no:randomly")


def history(folder: Path, *args: str) -> int:
    return main(["history", str(folder), *args])


@pytest.fixture
def runs(pytester: pytest.Pytester) -> Path:
    """Two runs of one protocol into `runs/`: the expert, then a random policy below its floor."""
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    assert pytester.runpytest(*RUN).ret == 0
    assert pytester.runpytest(*RUN, "--policy=random", "--success-fail-under", "0.9").ret == 1
    return pytester.path / "runs"


def test_two_runs_then_a_drop_then_another_protocol(runs, pytester, capsys):
    assert history(runs) == 0  # without --fail-on-regression a drop is shown, not failed
    said = capsys.readouterr().out
    assert said.startswith(f"{runs}: 2 runs (2 read, 0 unchanged); {runs / 'index.html'}")
    assert "REGRESSION reach: " in said
    assert "significantly worse (18 of 18 paired scenes lost, 0 gained" in said
    assert "level 0.001 for call 1 after the reference" in said
    page = (runs / "index.html").read_text()
    first, second = sorted(p.name for p in runs.iterdir() if p.name[:1].isdigit())
    assert first in page and second in page
    assert page.count('class="history-plot"') == 2  # reach and slow
    assert 'class="change worse"' in page  # the drop, marked on reach's plot
    assert history(runs, "--fail-on-regression") == 1
    # A third run under another base seed: another protocol, a new line, and what changed.
    assert pytester.runpytest(*RUN, "--seed", "7").ret == 0
    assert history(runs, "--fail-on-regression") == 0  # nothing before it on its line
    page = (runs / "index.html").read_text()
    assert page.count('class="protocol-break"') == 2
    assert "protocol changed: run.base_seed: 0 -&gt; 7" in page


def test_the_store_answers_success_per_eval_as_the_runs_summaries_do(runs, capsys):
    assert history(runs) == 0
    with sqlite3.connect(runs / STORE) as store:
        rows = store.execute(SUCCESS_PER_EVAL).fetchall()
    expected = []
    for run_dir in sorted(p for p in runs.iterdir() if p.name[:1].isdigit()):
        summary = json.loads((run_dir / "summary.json").read_text())
        for row in sorted(summary["evals"], key=lambda r: r["eval"]):
            expected.append((run_dir.name, row["eval"], row["solved"], row["rollouts"]))
    assert [row[:4] for row in rows] == expected
    with sqlite3.connect(runs / STORE) as store:
        rollouts = store.execute(
            "SELECT run_id, rollout, task, outcome, steps, scene FROM rollouts"
        ).fetchall()
        verdicts = [v for (v,) in store.execute("SELECT verdict FROM runs ORDER BY run_id")]

    def scene(value: object) -> str:
        return json.dumps(value, sort_keys=True)

    written = sorted(  # every rollout as its run's results.jsonl says: a row each in the view
        (run_dir.name, r["nodeid"], r["task"], r["outcome"], r["steps"], scene(r["scene"]))
        for run_dir in runs.iterdir()
        if run_dir.name[:1].isdigit()
        for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())
    )
    assert len(written) == 2 * (3 * 6 + 6)
    assert sorted((*row[:5], scene(json.loads(row[5]))) for row in rollouts) == written
    assert verdicts[0] == "passed"
    assert verdicts[1].startswith("failed: overall: success 0.0%")
    # Deleted, it is rebuilt from the runs; asked again, it reads nothing it has read.
    (runs / STORE).unlink()
    capsys.readouterr()
    assert history(runs) == 0
    assert "2 runs (2 read, 0 unchanged)" in capsys.readouterr().out
    assert history(runs) == 0
    assert "2 runs (0 read, 2 unchanged)" in capsys.readouterr().out
    with sqlite3.connect(runs / STORE) as store:
        assert store.execute(SUCCESS_PER_EVAL).fetchall() == rows


def test_a_run_merged_from_shards_counts_once(pytester, capsys):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    for k in (1, 2):
        assert pytester.runpytest(*RUN, "--shard", f"{k}/2").ret == 0
    runs = pytester.path / "runs"
    parts = sorted(runs.glob("*-shard*of2"))
    assert len(parts) == 2
    assert main(["report", "merge", *map(str, parts), "--out", str(runs / "merged")]) == 0
    capsys.readouterr()
    assert history(runs) == 0
    assert capsys.readouterr().out.startswith(f"{runs}: 1 runs (3 read, 0 unchanged)")
    with sqlite3.connect(runs / STORE) as store:
        [(rollouts,)] = store.execute(
            "SELECT SUM(rollouts) FROM evals WHERE run_id = 'merged'"
        ).fetchall()
    assert rollouts == 3 * 6 + 6


def test_a_folder_that_is_not_one_is_said(tmp_path, capsys):
    assert history(tmp_path / "nowhere") == 2
    assert "is not a folder of runs" in capsys.readouterr().err


def test_a_store_of_an_older_shape_is_rebuilt_from_the_runs(runs, capsys):
    """A store an earlier version wrote (its rollouts a table, a row each) is an index of
    another shape: dropped and rebuilt from the runs, what it held forgotten."""
    with sqlite3.connect(runs / STORE) as old:
        old.executescript(
            """
            CREATE TABLE runs (run_id TEXT PRIMARY KEY, path TEXT NOT NULL, started TEXT,
                               results_mtime_ns INTEGER, results_size INTEGER);
            CREATE TABLE rollouts (run_id TEXT NOT NULL, rollout TEXT NOT NULL, eval TEXT,
                                   outcome TEXT, PRIMARY KEY (run_id, rollout));
            CREATE INDEX rollouts_eval ON rollouts(run_id, eval);
            INSERT INTO runs VALUES ('gone', 'gone', NULL, 0, 0);
            INSERT INTO rollouts VALUES ('gone', 'x', 'e', 'solved');
            PRAGMA user_version = 4;
            """
        )
    assert history(runs) == 0
    assert "2 runs (2 read, 0 unchanged)" in capsys.readouterr().out
    with sqlite3.connect(runs / STORE) as store:
        kinds = dict(store.execute("SELECT name, type FROM sqlite_master WHERE name LIKE 'roll%'"))
        per_run = store.execute("SELECT run_id, COUNT(*) FROM rollouts GROUP BY run_id").fetchall()
    assert kinds == {"rollouts": "view"}
    assert sorted(n for _, n in per_run) == [3 * 6 + 6] * 2 and "gone" not in dict(per_run)


def test_a_run_that_cannot_be_read_is_skipped_and_the_others_kept(runs, tmp_path, capsys):
    """Each run is stored under a savepoint of its own: one refused (its results a link out of
    the folder) undoes only what it stored, before or after the good ones, all in one commit."""
    (tmp_path / "elsewhere.jsonl").write_text((next(runs.glob("*/results.jsonl"))).read_text())
    for name in ("000-linked", "zzz-linked"):
        (runs / name).mkdir()
        (runs / name / "results.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    assert history(runs) == 0
    said = capsys.readouterr()
    assert "2 runs (2 read, 0 unchanged, 2 with lines or files skipped (above))" in said.out
    assert said.err.count("is a symbolic link") == 2
    with sqlite3.connect(runs / STORE) as store:  # committed: another connection reads them
        stored = [r for (r,) in store.execute("SELECT run_id FROM runs ORDER BY run_id")]
        counted = store.execute("SELECT COUNT(*) FROM rollouts").fetchone()[0]
    assert stored == sorted(p.name for p in runs.iterdir() if p.name[:1] == "2")
    assert counted == 2 * (3 * 6 + 6)


def test_a_store_whose_pairing_was_edited_says_to_delete_it(runs, capsys):
    """The tests read each run's pairing back from the store: one edited by hand (or written by
    another version under this one's number) is refused with a line saying what to do."""
    assert history(runs) == 0
    with sqlite3.connect(runs / STORE) as store:
        store.execute("""UPDATE evals SET paired = '{"tasks": ["reach"], "arms": []}'""")
        store.execute("DELETE FROM changes")
        store.execute("DELETE FROM gate_calls")
    capsys.readouterr()
    assert history(runs) == 2
    said = capsys.readouterr().err
    assert "the store's rollouts of" in said and "delete it to rebuild it from the runs" in said
    (runs / STORE).unlink()
    assert history(runs) == 0
