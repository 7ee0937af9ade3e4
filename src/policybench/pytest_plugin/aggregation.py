"""Aggregation on the controller: collects rollout records from item reports (with xdist, the
workers' reports), appends them to results.jsonl and prints the per-Eval table."""

from __future__ import annotations

from typing import Any

import pytest

from policybench import keys
from policybench.pytest_plugin.fixtures import settings_of
from policybench.pytest_plugin.options import RunSettings
from policybench.pytest_plugin.outcomes import record_of
from policybench.report.results import ResultsWriter
from policybench.report.stats import Tally, tally_by


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) aggregates
        config.pluginmanager.register(Aggregator(settings_of(config)), "policybench-aggregator")


class Aggregator:
    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.records: list[dict[str, Any]] = []
        self.writer = ResultsWriter(settings.report_dir)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = record_of(report)
        if record is not None and report.when == "call":
            self.records.append(record)
            self.writer.write(record)

    def pytest_sessionfinish(self) -> None:
        self.writer.close()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records:
            return
        write = terminalreporter.write_line
        terminalreporter.section(f"policybench: policy {self.settings.policy}")
        tallies = tally_by(self.records, keys.EVAL)
        rows = [(name, tally) for (name,), tally in sorted(tallies.items())]
        if len(rows) > 1:
            total = Tally()
            for record in self.records:
                total = total.add(record[keys.OUTCOME])
            rows.append(("all", total))
        for line in format_table(rows):
            write(line)
        write(f"results: {self.writer.path}")


def format_table(rows: list[tuple[str, Tally]]) -> list[str]:
    header = ("eval", "rollouts", "solved", "unsolved", "errors", "success", "95% CI")
    cells = [header]
    for name, tally in rows:
        interval = tally.interval()
        cells.append(
            (
                name,
                str(tally.rollouts),
                str(tally.solved),
                str(tally.unsolved),
                str(tally.errors),
                "-" if tally.rate is None else f"{tally.rate:.1%}",
                "-" if interval is None else f"[{interval[0]:.1%}, {interval[1]:.1%}]",
            )
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
