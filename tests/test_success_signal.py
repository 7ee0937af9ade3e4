"""An env that never says whether its task was achieved (no `success`, `is_success` or
`task_success` in its step info) reads as 0% solved: the run says so, in the terminal, in
summary.json (per Eval) and in the HTML report, instead of reporting a silent 0%."""

from __future__ import annotations

import json

from policybench import keys
from tests.test_plugin import ENVS

BENCHMARK = """
import dataclasses
import policybench
from envs import GreedyPointModel, PointEnv, point_eval


class Silent(PointEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {}  # says nothing of success


POINT = point_eval("point", scripted=GreedyPointModel)
SILENT = dataclasses.replace(
    point_eval("silent", tasks={"quiet": "reach the goal"}, scripted=GreedyPointModel),
    make_env=lambda task: Silent(),
)


@policybench.parametrize(POINT, SILENT)
def test_point(rollout, harness):
    harness(rollout)
"""


def test_an_env_that_never_reports_success_is_named_in_terminal_summary_and_report(pytester):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    result = pytester.runpytest("--rollouts", "2")
    assert result.ret == 0  # unsolved rollouts do not fail the run; the warning says why
    result.stdout.fnmatch_lines(
        ["warning: silent: the env never reported success in 2 rollout(s)*`is_success`*"]
    )
    assert "warning: point:" not in result.stdout.str()
    run_dir = pytester.path / "reports" / "latest"
    records = [json.loads(line) for line in (run_dir / "results.jsonl").open()]
    said = {(r[keys.EVAL], r[keys.SUCCESS_REPORTED]) for r in records}
    assert said == {("point", True), ("silent", False)}
    summary = json.loads((run_dir / "summary.json").read_text())
    flags = {row[keys.EVAL]: row[keys.SUCCESS_REPORTED] for row in summary["evals"]}
    assert flags == {"point": True, "silent": False}
    index = (run_dir / "index.html").read_text()
    notice = index[index.index('id="success-unreported"') :].split("</section>")[0]
    assert "silent: the env never reported success" in notice and "point:" not in notice
