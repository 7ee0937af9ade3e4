"""A run in Markdown, where reviewers read results (a pull request, a CI job's page): the verdict
first, then each Eval's success with its interval (each arm's in an A/B run), what regressed
against a baseline, and how the unsolved rollouts failed. Written as `summary.md` beside the
report; a front appends it to `$GITHUB_STEP_SUMMARY` where a GitHub Actions job sets it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from policybench.report.compare import Comparison
from policybench.report.failures import clusters_lines
from policybench.report.html import percent
from policybench.report.rows import Row
from policybench.report.summary import Summary
from policybench.run.files import open_append, write_file
from policybench.run.info import RunInfo
from policybench.run.run_verdict import RunVerdict

SUMMARY_MD = "summary.md"
STEP_SUMMARY = "GITHUB_STEP_SUMMARY"  # the file a GitHub Actions step appends Markdown to


def markdown(
    summary: Summary,
    verdict: RunVerdict | None,
    run: RunInfo | None,
    comparison: Comparison | None = None,
) -> str:
    """The run's Markdown: its verdict, its table, its regressions, its failure clusters."""
    title = run.run_id if run else "policybench run"
    said = "no verdict recorded"
    if verdict is not None:  # PASS, FAIL, NO RESULT or ABORTED; its reasons listed below
        said = verdict.last_line().removeprefix("policybench: ").split(" — ")[0]
    lines = [f"## policybench {title}: {escaped(said)}", ""]
    if verdict is not None and verdict.reasons:
        lines += [f"- {escaped(reason)}" for reason in verdict.reasons] + [""]
    rows = summary.arms or [*summary.evals, summary.overall]
    lines += _table(rows, arms=bool(summary.arms))
    if comparison is not None:
        lines += [
            "",
            f"**Against {escaped(comparison.before)}:** {escaped(comparison.verdict())}",
        ]
        worse = [*comparison.pooled_regressions, *comparison.regressions]
        lines += [
            f"- {escaped(row.where)} / {escaped(row.label)}: {percent(row.before.rate)} -> "
            f"{percent(row.after.rate)} (adjusted p = {row.adjusted_p:.3g})"
            for row in worse
            if row.adjusted_p is not None
        ]
    if summary.published:
        entry = summary.published[0].entry
        lines += ["", f"**Beside the published results of {escaped(entry.name)}** "
                  f"([{escaped(entry.where)}]({entry.source})):"]  # fmt: skip
        lines += [f"- {escaped(c.line())}" for c in summary.published]
    clusters = clusters_lines(summary.failures)
    if clusters:
        lines += ["", f"**{clusters[1]}**", *(f"- {escaped(c.strip())}" for c in clusters[2:])]
    if run is not None:
        lines += ["", f"{escaped(run.command)} at {escaped(run.git_revision)}"]
    return "\n".join(lines) + "\n"


def _table(rows: Sequence[Row], arms: bool) -> list[str]:
    head = "| Eval | arm | rollouts | solved | errors | success | 95% CI |" if arms else (
        "| Eval | rollouts | solved | errors | success | 95% CI |"
    )  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        tally, interval = row.stats.tally, row.interval()
        measured = tally.measured and interval is not None
        rate = percent(tally.rate) if tally.measured else "no result"
        band = f"{percent(interval[0])} to {percent(interval[1])}" if measured else "-"
        cells = [escaped(row.label), *([escaped(str(row.arm))] if arms else []),
                 str(tally.rollouts), str(tally.solved), str(tally.errors), rate, band]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def escaped(text: str) -> str:
    """Text safe in a Markdown table cell or line: no pipe ends a cell, no markup is made."""
    return "".join("\\" + c if c in "|*_`<>[]#" else c for c in " ".join(str(text).split()))


def write_markdown(run_dir: Path, text: str) -> Path:
    path = run_dir / SUMMARY_MD
    write_file(path, text)
    return path


def to_step_summary(text: str) -> Path | None:
    """Appends `text` to the job's step summary where `$GITHUB_STEP_SUMMARY` names one."""
    named = os.environ.get(STEP_SUMMARY)
    if not named:
        return None
    with open_append(Path(named)) as file:
        file.write(text + "\n")
    return Path(named)
