"""A run's Markdown summary (`summary.md`, and `$GITHUB_STEP_SUMMARY` where a GitHub Actions job
sets it): a gated run that failed leads with the failure and its reasons, then each Eval's
success with its interval; a passing run says so; a name with Markdown in it makes no markup."""

from __future__ import annotations

from pathlib import Path

import pytest

from policybench.report.markdown import escaped
from tests.test_shards import BENCHMARK, ENVS

RUN = ("--rollouts", "3", "--report-dir", "runs", "-p", "no:randomly")


def test_a_failed_gate_leads_the_summary_and_reaches_the_step_summary(pytester, monkeypatch):
    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    step = pytester.path / "step-summary.md"
    step.write_text("# earlier steps\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    assert pytester.runpytest(*RUN, "--policy=random", "--success-fail-under", "0.9").ret == 1
    text = (pytester.path / "runs" / "latest" / "summary.md").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("## policybench ") and lines[0].endswith(": FAIL"), lines[0]
    assert lines[2].startswith("- overall: success 0.0%"), lines[2]
    assert "| Eval | rollouts | solved | errors | success | 95% CI |" in lines
    assert "| reach | 9 | 0 | 0 | 0.0% | 0.0% to 29.9% |" in lines
    assert step.read_text() == "# earlier steps\n" + text + "\n"  # appended, not replaced
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert pytester.runpytest(*RUN).ret == 0
    passed = (pytester.path / "runs" / "latest" / "summary.md").read_text().splitlines()
    assert passed[0].endswith(": PASS"), passed[0]


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("a|b", "a\\|b"),
        ("**bold** `x`", "\\*\\*bold\\*\\* \\`x\\`"),
        ("<img src=x>", "\\<img src=x\\>"),
    ],
)
def test_names_make_no_markup(given, shown):
    assert escaped(given) == shown


def test_report_html_writes_the_summary_again(pytester):
    from policybench.cli import main

    pytester.makepyfile(envs=ENVS, test_point=BENCHMARK)
    assert pytester.runpytest(*RUN).ret == 0
    run = (pytester.path / "runs" / "latest").resolve()
    (run / "summary.md").unlink()
    assert main(["report", "html", str(run)]) == 0
    assert (run / "summary.md").read_text().startswith(f"## policybench {Path(run).name}: PASS")
