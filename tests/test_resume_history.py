"""--resume keeps how a run started: run.json's command, host and start stay the run's first,
each resume is listed under `resumed`, and a merged run keeps its parts and merge findings."""

from __future__ import annotations

import json

import pytest

from policybench.cli import main
from tests.test_shards import BENCHMARK, ENVS


def test_resuming_a_merged_run_keeps_its_parts_and_lists_each_resume(pytester, capsys):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    for k in (1, 2):
        assert pytester.runpytest("--rollouts", "1", "--shard", f"{k}/2", "-k", "a/").ret == 0
    parts = sorted(str(path) for path in (pytester.path / "reports").glob("*-shard*of2"))
    out = pytester.path / "merged"
    assert main(["report", "merge", *parts, "--out", str(out)]) == 0
    merged = json.loads((out / "run.json").read_text())

    for _ in range(2):  # the rollouts -k left out run now
        assert pytester.runpytest("--rollouts", "1", "--resume", str(out)).ret == 0

    run = json.loads((out / "run.json").read_text())
    assert (run["command"], run["host"], run["started"]) == (
        merged["command"], merged["host"], merged["started"],
    )  # fmt: skip
    assert run["command"].startswith("policybench report merge ")
    assert run["settings"]["merged_from"] == merged["settings"]["merged_from"]
    assert run["settings"]["merge"] == merged["settings"]["merge"]
    resumed = run["settings"]["resumed"]
    assert len(resumed) == 2 and all(f"--resume {out}" in r["command"] for r in resumed)
    assert {"command", "host", "started"} == set(resumed[0])
    assert len((out / "results.jsonl").read_text().splitlines()) == 4
    # A merge into it would drop what its resumes ran.
    with pytest.raises(SystemExit) as refused:
        main(["report", "merge", *parts, "--out", str(out)])
    assert "was resumed since" in str(refused.value.code)
