"""A process never holds more live envs than docs/guides/options.md says: at most max(N, K) for
`--max-envs-per-worker N --envs-per-worker K`, whatever the mode; lockstep slots draw from the
process's one env cache, so a group's envs are closed before the next Eval's are built."""

from __future__ import annotations

import json

import pytest

from tests.test_plugin import ENVS

COUNTED = """
import dataclasses, os
from pathlib import Path
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class Counted(PointEnv):
    \"\"\"Counts this process's live envs (built, not yet closed) and keeps the most it held.\"\"\"

    live = peak = 0

    def __init__(self):
        super().__init__()
        Counted.live += 1
        Counted.peak = max(Counted.peak, Counted.live)
        Path(f"peak-{os.getpid()}.txt").write_text(str(Counted.peak))

    def close(self):
        Counted.live -= 1


def counted(name):
    eval = point_eval(name, tasks={name: f"reach {name}"}, scripted=GreedyPointModel)
    return dataclasses.replace(eval, make_env=lambda task: Counted())


@policybench.parametrize(counted("first"), counted("second"), counted("third"))
def test_point(rollout, harness):
    harness(rollout)
"""


@pytest.mark.parametrize(
    ("slots", "workers"), [(1, "0"), (3, "0"), (3, "2")], ids=["K=1", "K=3", "K=3,-n2"]
)
def test_a_process_holds_at_most_max_of_n_and_k_live_envs_over_three_evals(
    pytester: pytest.Pytester, slots: int, workers: str
):
    pytester.makepyfile(envs=ENVS, test_point=COUNTED)
    result = pytester.runpytest_subprocess(
        "-n", workers, "--rollouts", "3", "--max-envs-per-worker", "1",
        "--envs-per-worker", str(slots),
    )  # fmt: skip
    result.assert_outcomes(passed=9)
    peaks = [int(path.read_text()) for path in pytester.path.glob("peak-*.txt")]
    assert peaks and max(peaks) == max(1, slots), f"live envs per process: {peaks}"
    path = pytester.path / "reports" / "latest" / "results.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 9 and all(r["outcome"] == "solved" for r in records)
