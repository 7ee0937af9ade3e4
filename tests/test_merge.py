"""`policybench report merge`: shards merge into the run they split, parts of different protocols
are refused with the fields named, duplicates are dropped or named, and gaps are listed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policybench import keys
from policybench.cli import main
from policybench.record.episode import OutcomeKind
from tests.test_shards import BENCHMARK, ENVS, counts


def merge(*args: str | Path) -> int:
    return main(["report", "merge", *map(str, args)])


def read(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").open()]


def test_merged_shards_equal_the_unsharded_run(pytester, capsys):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    whole = pytester.runpytest("--rollouts", "3", "--report-dir", "reports/whole")
    assert whole.ret == 0
    for k in (1, 2, 3):
        shard = pytester.runpytest("--rollouts", "3", "--shard", f"{k}/3", "--report-dir", "shards")
        assert shard.ret == 0
    parts = sorted((pytester.path / "shards").glob("*-shard*of3"))
    out = pytester.path / "reports" / "merged"
    capsys.readouterr()

    assert merge(*parts, "--out", out) == 0

    assert capsys.readouterr().out.startswith("merged 3 parts: 12 rollouts\n")
    assert counts(out) == counts(pytester.path / "reports" / "whole" / "latest")
    outcomes = [(r[keys.NODEID], r[keys.OUTCOME], r[keys.STEPS]) for r in read(out)]
    unsharded = read(pytester.path / "reports" / "whole" / "latest")
    assert sorted(outcomes) == sorted(
        (r[keys.NODEID], r[keys.OUTCOME], r[keys.STEPS]) for r in unsharded
    )
    # In plan order: each Eval's rollouts by their index.
    assert [(r[keys.EVAL], r[keys.ROLLOUT_INDEX]) for r in read(out)] == [
        *(("reach", i) for i in range(9)),
        *(("slow", i) for i in range(3)),
    ]
    run = json.loads((out / "run.json").read_text())
    assert [(p["run_id"], p["shard"]) for p in run["settings"]["merged_from"]] == [
        (part.name, f"{k}/3") for k, part in enumerate(parts, start=1)
    ]
    assert run["command"].startswith("policybench report merge ")
    assert len(list((out / "rollouts").glob("*.html"))) == 12
    assert "reach" in (out / "index.html").read_text()


def record(task: str, seed: int, outcome: OutcomeKind, **fields: Any) -> dict[str, Any]:
    """A rollout record of a 4-rollout plan: tasks a and b, seeds 0 and 1."""
    return {
        keys.EVAL: "point",
        keys.TASK: task,
        keys.SCENE: {keys.TASK: task, keys.SEED: seed},
        keys.ROLLOUT_INDEX: "ab".index(task) * 2 + seed,
        keys.ROLLOUT_COUNT: 4,
        keys.NODEID: f"test_point.py::test_point[{task}/seed={seed}]",
        keys.OUTCOME: outcome.value,
        keys.REASON: f"{outcome.value} on purpose",
        keys.STEPS: 5,
        keys.SIM_S: 0.5,
        keys.WALL_S: 0.01,
        keys.TIMEOUT_S: 2.0,
        keys.CONTROL_HZ: 10.0,
        keys.POLICY: {keys.POLICY_NAME: "greedy"},
        **fields,
    }


def part(path: Path, *records: dict[str, Any], tail: str = "") -> Path:
    path.mkdir(parents=True)
    lines = [json.dumps(r, sort_keys=True) + "\n" for r in records]
    (path / "results.jsonl").write_text("".join(lines) + tail)
    return path


SOLVED, UNSOLVED, ERROR = OutcomeKind.SOLVED, OutcomeKind.UNSOLVED, OutcomeKind.ERROR


def test_merge_refuses_parts_of_different_protocols_naming_the_fields(tmp_path, capsys):
    one = part(tmp_path / "one", record("a", 0, SOLVED), record("a", 1, SOLVED))
    other = part(
        tmp_path / "other",
        record("b", 0, SOLVED, **{keys.TIMEOUT_S: 3.0}),
        record("b", 1, SOLVED, **{keys.POLICY: {keys.POLICY_NAME: "other"}}),
        record("a", 1, SOLVED, **{keys.TIMEOUT_S: 3.0}),
    )
    out = tmp_path / "merged"
    with pytest.raises(SystemExit) as refused:
        merge(one, other, "--out", out)
    message = str(refused.value)
    assert "eval point: timeout_s is 2.0 in one but 3.0 in other" in message
    assert 'eval point: policy.name is "greedy" in one but "greedy", "other" in other' in message
    assert "--allow-protocol-change" in message
    assert not out.exists()

    assert merge(one, other, "--out", out, "--allow-protocol-change") == 0
    run = json.loads((out / "run.json").read_text())
    allowed = run["settings"]["merge"]["protocol_changes_allowed"]
    assert any("timeout_s is 2.0 in one but 3.0 in other" in line for line in allowed)
    assert "protocol change allowed: eval point: timeout_s" in (out / "index.html").read_text()
    assert "note: protocol change allowed: eval point: timeout_s" in capsys.readouterr().out


def test_merge_drops_exact_duplicates_keeps_a_final_outcome_over_an_error_and_names_conflicts(
    tmp_path, capsys
):
    solved = record("a", 0, SOLVED)
    first = part(
        tmp_path / "first",
        solved,
        record("a", 1, ERROR, **{keys.REASON: "cannot reach a policy server"}),
        record("b", 0, SOLVED),
        record("b", 1, SOLVED),
    )
    second = part(
        tmp_path / "second",
        solved,
        record("a", 1, SOLVED),
        record("b", 0, UNSOLVED),
        record("b", 1, SOLVED, **{keys.WALL_S: 0.02}),
    )
    out = tmp_path / "merged"

    assert merge(first, second, "--out", out) == 1  # the conflict

    outcomes = {(r[keys.TASK], r[keys.SCENE][keys.SEED]): r[keys.OUTCOME] for r in read(out)}
    assert outcomes == {
        ("a", 0): "solved",
        ("a", 1): "solved",
        ("b", 0): "solved",
        ("b", 1): "solved",
    }
    found = json.loads((out / "run.json").read_text())["settings"]["merge"]
    assert found["exact_duplicates_dropped"] == 1
    assert found["repeats"] == 1
    assert found["errors_superseded"] == [
        "test_point.py::test_point[a/seed=1]: an error in first (cannot reach a policy server) "
        "and solved in second: kept solved"
    ]
    assert found["conflicts"] == [
        "test_point.py::test_point[b/seed=0]: solved in first but unsolved in second; kept first's"
    ]
    assert found["missing"] == []
    printed = capsys.readouterr()
    assert "note: conflict: test_point.py::test_point[b/seed=0]: solved in first" in printed.out
    assert "incomplete or inconsistent" in printed.err


def test_merge_lists_planned_rollouts_and_shards_that_no_part_ran(tmp_path, capsys):
    video = "videos/a0.mp4"
    shard1 = part(
        tmp_path / "20261101-120000-shard1of3", record("a", 0, SOLVED, **{keys.VIDEO: video})
    )
    (shard1 / "videos").mkdir()
    (shard1 / video).write_bytes(b"not really an mp4")
    shard3 = part(
        tmp_path / "20261101-120000-shard3of3",
        record("b", 0, UNSOLVED),
        tail='{"eval": "point", "task": "b", "outc',  # cut off by a killed controller
    )
    out = tmp_path / "merged"

    assert merge(shard1, shard3, "--out", out) == 1

    printed = capsys.readouterr()
    assert "line 2: not valid JSON" in printed.err
    missing = json.loads((out / "run.json").read_text())["settings"]["merge"]["missing"]
    assert missing == [
        "eval point (test_point.py::test_point): 2 of 4 planned rollouts ran in no part "
        "(plan indices 1, 3)",
        "no part is shard 2/3; run it and merge again",
    ]
    assert f"note: missing: {missing[1]}" in printed.out
    assert counts(out)[("point", None)]["rollouts"] == 2  # what did run is still reported
    assert (out / video).read_bytes() == b"not really an mp4"  # the merged run shows its videos


def test_merge_writes_only_into_a_new_directory_or_an_earlier_merge(tmp_path):
    one = part(tmp_path / "one", record("a", 0, SOLVED), record("a", 1, SOLVED))
    other = part(tmp_path / "other", record("b", 0, SOLVED), record("b", 1, SOLVED))
    with pytest.raises(SystemExit, match=r"--out .*one is one of the parts"):
        merge(one, other, "--out", one)
    with pytest.raises(SystemExit, match="holds a run that merge did not write"):
        merge(one, "--out", other)
    out = tmp_path / "merged"
    assert merge(one, "--out", out) == 1  # b's rollouts are missing
    assert merge(one, other, "--out", out) == 0  # merged again, with the rest
    assert len(read(out)) == 4


def test_a_part_naming_files_outside_it_is_refused_and_nothing_outside_is_touched(tmp_path):
    """A shard's results.jsonl is data from another machine: a trace named by an absolute path
    once had merge delete the victim file, a `../` path replace a file outside --out. Both are
    refused before anything is written, and the files outside stay as they were."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    outside = tmp_path / "outside.json"
    outside.write_text("mine")
    for named in (str(victim), "../../outside.json", "traces/../../../outside.json"):
        root = tmp_path / f"case{abs(hash(named))}"
        one = part(root / "one", record("a", 0, SOLVED, **{keys.ROLLOUT_TRACE: named}))
        (one / "traces").mkdir()
        (one / "traces" / "x.json").write_text("{}")
        out = root / "merged"
        with pytest.raises(SystemExit, match=r"names a file .* refused"):
            merge(one, "--out", out)
        assert victim.read_text() == "keep me" and outside.read_text() == "mine"
        assert not out.exists()


def test_report_html_reads_no_file_outside_the_run_named_as_a_trace(tmp_path):
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = AKIA-DO-NOT-LEAK")
    run = part(
        tmp_path / "run",
        record("a", 0, UNSOLVED, **{keys.ROLLOUT_TRACE: str(secret)}),
        record("a", 1, UNSOLVED, **{keys.ROLLOUT_TRACE: "../credentials"}),
    )
    assert main(["report", "html", str(run)]) == 0
    pages = [page.read_text() for page in (run / "rollouts").glob("*.html")]
    pages.append((run / "index.html").read_text())
    assert len(pages) == 3 and not any("DO-NOT-LEAK" in page for page in pages)
    assert any("its trace is not read" in page and "refused" in page for page in pages)
