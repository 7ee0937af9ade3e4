"""`report merge` of a blinded run's shards keeps its blinding (one key, one set of letters), so
`report unblind` unblinds the merged run; parts blinded apart are refused, even with the
protocol change allowed, since a letter stands for another policy in each."""

from __future__ import annotations

import json

import pytest

from policybench.cli import main
from tests.test_arms import AB, BENCHMARK
from tests.test_plugin import ENVS


def shards(pytester: pytest.Pytester, keys: tuple[str, str], into: str) -> list[str]:
    for k, key in zip((1, 2), keys, strict=True):
        args = ("--rollouts", "1", *AB, "--blind", key, "--shard", f"{k}/2", "--report-dir", into)
        assert pytester.runpytest(*args).ret == 0
    return sorted(str(path) for path in (pytester.path / into).glob("*-shard*of2"))


def test_merged_shards_of_a_blinded_run_unblind(pytester, capsys):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    parts = shards(pytester, ("K1", "K1"), "same")
    out = pytester.path / "merged"
    assert main(["report", "merge", *parts, "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").open()]
    assert len(records) == 4 and {r["arm"] for r in records} == {"A", "B"}
    capsys.readouterr()

    assert main(["report", "unblind", str(out)]) == 0

    assert capsys.readouterr().out.startswith("unblinded merged: A = ")
    records = [json.loads(line) for line in (out / "results.jsonl").open()]
    solved = {r["arm"]: 0 for r in records}
    for r in records:
        solved[r["arm"]] += r["outcome"] == "solved"
    assert solved == {"scripted": 2, "random": 0}
    assert json.loads((out / "run.json").read_text())["settings"]["arms"] == ["scripted", "random"]


def test_parts_blinded_with_different_keys_are_refused_even_with_a_protocol_change(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    parts = shards(pytester, ("K1", "K2"), "apart")
    out = str(pytester.path / "merged")
    with pytest.raises(SystemExit) as refused:
        main(["report", "merge", *parts, "--out", out, "--allow-protocol-change"])
    assert "the parts were not blinded alike" in str(refused.value.code)
    assert "same --blind KEY" in str(refused.value.code)
