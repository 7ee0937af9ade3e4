"""A shard dealt no rollout (an Eval with fewer task-cards than shards) keeps a run directory
that `report merge` counts as that shard, and exits 0 saying it had nothing to run."""

from __future__ import annotations

import json

from policybench.cli import main
from tests.test_shards import ENVS

ONE_TASK = """
import policybench
from envs import GreedyPointModel, point_eval

REACH = point_eval("reach", tasks={"a": "reach a"}, scripted=GreedyPointModel)


@policybench.parametrize(REACH)
def test_point(rollout, harness):
    harness(rollout)
"""


# A gate of the run: a shard dealt nothing has none of its own to judge (the merged run has).
GATED = ("--rollouts", "2", "--success-fail-under", "0.5")


def test_an_empty_shard_keeps_a_run_that_merge_counts_and_exits_zero(pytester, capsys):
    pytester.makepyfile(envs=ENVS, test_point=ONE_TASK)
    ran = [
        pytester.runpytest(*GATED, "--shard", f"{k}/3", "--report-dir", "shards") for k in (1, 2, 3)
    ]
    parts = sorted((pytester.path / "shards").glob("*-shard*of3"))
    assert [result.ret for result in ran] == [0, 0, 0]
    assert [part.name[-9:] for part in parts] == ["shard1of3", "shard2of3", "shard3of3"]
    empty = [part for part in parts if not (part / "results.jsonl").read_text()]
    assert len(empty) == 1, parts  # two rollouts of one task over three shards
    k = empty[0].name[-4]
    ran[int(k) - 1].stdout.fnmatch_lines([f"policybench: shard {k}/3 had nothing to run*"])
    assert "FAIL" not in ran[int(k) - 1].stdout.str()
    settings = json.loads((empty[0] / "run.json").read_text())["settings"]
    assert settings["shard"].startswith(f"{k}/3") and settings["selected"] == []
    out = pytester.path / "merged"
    capsys.readouterr()

    assert main(["report", "merge", *map(str, parts), "--out", str(out)]) == 0

    said = capsys.readouterr().out
    assert said.startswith("merged 3 parts: 2 rollouts\n") and "missing" not in said, said
