"""Aggregation on the controller: collects rollout records from item reports (with xdist, the
workers' reports), appends them to results.jsonl, and at the end writes summary.json and the
HTML report, applies the success gates and prints the per-Eval table (in an A/B run, per Eval
and arm, with the arms compared; under --blind, records are sealed before they are written)."""

from __future__ import annotations

import dataclasses
import re
import shlex
import time
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from policybench import keys
from policybench.decide import ORDER_RULE
from policybench.pytest_plugin import decide, gates
from policybench.pytest_plugin.arms import sealed_fields
from policybench.pytest_plugin.collection import not_installed
from policybench.pytest_plugin.options import RunSettings, protocol_settings
from policybench.pytest_plugin.outcomes import failed_a_check, no_policy_of, record_of
from policybench.pytest_plugin.preflights import preflight_lines
from policybench.pytest_plugin.resume import (
    compact,
    resume_command,
    resumed_of,
)
from policybench.pytest_plugin.rollout_trace import expert_finder
from policybench.pytest_plugin.rundir import baseline_dir, run_context
from policybench.pytest_plugin.shards import shard_setting
from policybench.pytest_plugin.watchdog import HUNG
from policybench.pytest_plugin.workers import is_worker
from policybench.record.protocol import Protocol
from policybench.record.realtime import Realtime
from policybench.report.aborted import Witness
from policybench.report.compare import Comparison, compare_arms, still_blinded
from policybench.report.drift import drift_lines
from policybench.report.failures import clusters_lines
from policybench.report.html import Findings, write_html
from policybench.report.markdown import markdown, to_step_summary, write_markdown
from policybench.report.merge import resumed_run_info
from policybench.report.published import published_lines
from policybench.report.robustness import robustness
from policybench.report.rows import Row
from policybench.report.specs import HEADER as SPEC_HEADER
from policybench.report.specs import SpecRow
from policybench.report.summary import OVERALL, Summary
from policybench.run.arms import Sealer
from policybench.run.command_line import redacted_command
from policybench.run.info import RunInfo
from policybench.run.records import Tally, latest_per_rollout, tally_of
from policybench.run.results import RESULTS, ResultsWriter, read_results
from policybench.run.run_verdict import RunVerdict
from policybench.run.verdicts import read_verdicts
from policybench.text import listed


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):  # the controller (or a run without xdist) aggregates
        settings = run_context(config).settings
        aggregator = Aggregator(config, settings, gates.read_gate_settings(config))
        config.pluginmanager.register(aggregator, "policybench-aggregator")
        # Where this process dies before the run ends, the witness records the run as aborted.
        aggregator.witness = Witness(aggregator.run_dir, resume_command(config))


class Aggregator:
    def __init__(
        self, config: pytest.Config, settings: RunSettings, gate_settings: gates.GateSettings
    ) -> None:
        self.settings = settings
        self.gate_settings = gate_settings
        context = run_context(config)
        self.run_dir = context.run_dir
        self.baseline = baseline_dir(config)
        self.run_info = RunInfo.now(
            self.run_dir.name,
            context.command,
            config.invocation_params.dir,
            run_settings(config, settings),
        )
        if context.resumed is not None:  # run.json keeps how the run started, and its resumes
            self.run_info = resumed_run_info(RunInfo.load(self.run_dir), self.run_info)
        # As typed but for secrets, kept aside under --blind.
        self.command = shlex.join(["pytest", *redacted_command(config.invocation_params.args)])
        servers = [(arm.endpoint.shown, arm.label) for arm in settings.arms if arm.endpoint]
        kept = sealed_fields(settings.arms)
        self.sealer = Sealer(self.run_dir, servers, kept) if settings.blinding else None
        self.config = config
        self.records: list[dict[str, Any]] = []
        self.not_run: dict[tuple[str, str], int] = {}  # (eval, why) -> items skipped
        self.no_policy: set[str] = set()  # Evals whose rollouts were skipped for want of a policy
        self.policy_given = bool(config.getoption("policy", None))
        self.writer = ResultsWriter(self.run_dir)
        self.findings: Findings | None = None
        self.unreported: tuple[str, ...] = ()  # gate breaches of a run that recorded nothing
        self.report_s = 0.0
        self.interrupted = False  # set at the session's end: stopped by ^C or SIGTERM
        # Items that failed outside a rollout's outcome, by id: "failed" (a trajectory spec, a
        # golden) or "error" (setup or teardown); a later passing try of the item clears it.
        self.item_faults: dict[str, str] = {}
        self.verdict: RunVerdict | None = None  # the run's, once it has ended
        self.witness: Witness | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        no_policy = no_policy_of(report)
        if no_policy is not None:
            self.no_policy.add(no_policy[0])
        missing = not_installed(report) or no_policy or decide.decided_skip(report)
        if missing is not None:
            self.not_run.setdefault(missing, 0)
            self.not_run[missing] += 1
        record = record_of(report)
        self._note_fault(report, record)
        if record is not None:
            if not self.records:  # a run that records something says how it was run, at once
                self.run_info.write(self.run_dir)
                if self.settings.blinding is not None:
                    self.settings.blinding.write(self.run_dir, self.command)
            if self.sealer is not None:
                record = self.sealer.seal(record)
            self.records.append(record)
            self.writer.write(record)

    def _note_fault(self, report: pytest.TestReport, record: dict[str, Any] | None) -> None:
        """Keeps what the verdict counts besides rollout outcomes: an item that failed with an
        outcome other than an error (a violated trajectory spec; a test that is no rollout) or
        errored outside its call."""
        if failed_a_check(report, record):
            self.item_faults[report.nodeid] = "failed"
        elif report.failed and report.when != "call":
            self.item_faults.setdefault(report.nodeid, "error")
        elif report.passed and report.when == "call":
            self.item_faults.pop(report.nodeid, None)

    def _verdict(self, breaches: Sequence[str], exitstatus: int) -> RunVerdict:
        """The run's one verdict (run_verdict.RunVerdict), and the exit status it implies."""
        tally = tally_of(self.records)
        faults = list(self.item_faults.values())
        status = int(exitstatus)
        if status == pytest.ExitCode.NO_TESTS_COLLECTED:
            # Nothing selected, or every rollout carried over by a resume: no failure by itself
            # (pytest keeps its own exit status for the first).
            status = pytest.ExitCode.OK
        verdict = RunVerdict.of(
            breaches,
            tally.solved,
            tally.unsolved,
            tally.errors,
            failed_items=faults.count("failed"),
            other_errors=faults.count("error"),
            interrupted=self.interrupted,
            exit_status=status,
        )
        if not verdict.passed and status in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,
        ):
            verdict = dataclasses.replace(verdict, exit_status=int(pytest.ExitCode.TESTS_FAILED))
        return verdict

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._selected(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._selected(ids)

    def _selected(self, nodeids: Iterable[str]) -> None:
        """run.json names the items this run selected (and those a resume carried over): merge
        counts only these as missing when no part ran them."""
        resumed = resumed_of(self.config)
        selected = sorted({*nodeids, *(resumed.carried if resumed else ())})
        settings = {**self.run_info.settings, keys.SELECTED: selected}
        self.run_info = dataclasses.replace(self.run_info, settings=settings)

    @pytest.hookimpl(tryfirst=True)  # before --junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        self.writer.close()
        if self.sealer is not None:
            self.sealer.close()
        started = time.perf_counter()
        resumed = resumed_of(self.config)
        if resumed is not None:  # the run's records: carried over, then this session's
            self.records = latest_per_rollout([*resumed.all_records, *self.records])
            compact(self.writer.path, self.records)
        summary = Summary.of(
            self.records,
            arms=[arm.label for arm in self.settings.arms],
            verdicts=read_verdicts(self.run_dir),
            decide=decide.test_of(self.config),
            baseline=decide.baseline_of(self.config),
            run_dir=self.run_dir,
            published=self.config.getoption("published", None),
            expert_of=expert_finder(self.config),
        )
        breaches, notes = self._breaches(summary)
        if not self.records and self.no_policy:  # nothing ran for want of a policy
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if not self.records:  # no report to write; a gate over nothing still fails the run
            self.unreported = tuple(breach.line() for breach in breaches)
            self.verdict = self._verdict(self.unreported, session.exitstatus)
            self.config.stash[gates.BREACHED] = not self.verdict.passed
            self._ended()
            return
        comparison = None
        if self.baseline is not None:
            comparison = self._compare(notes)
            if self.gate_settings.fail_on_regression:
                breaches += gates.regression_breaches(comparison, self.gate_settings)
        protocol = Protocol.of(self.records, self.run_info.settings)
        self.run_info = dataclasses.replace(self.run_info, fingerprint=protocol.as_json())
        self.run_info.write(self.run_dir)
        self.verdict = self._verdict([breach.line() for breach in breaches], session.exitstatus)
        summary.write(self.run_dir, self.run_info, self.verdict)
        if comparison is not None:
            comparison.write(self.run_dir)
        self.findings = Findings(
            summary,
            tuple(self.records),
            self.run_info,
            self.verdict,
            tuple(notes),
            comparison,
            tuple(breach.line() for breach in breaches),
        )
        write_html(self.run_dir, self.findings)
        said = markdown(summary, self.verdict, self.run_info, comparison)
        write_markdown(self.run_dir, said)
        to_step_summary(said)  # a GitHub Actions job's page, where it sets one
        _junit_suite_properties(self.config, summary)
        self.report_s = time.perf_counter() - started
        self.config.stash[gates.BREACHED] = not self.verdict.passed
        self._ended()

    def _breaches(self, summary: Summary) -> tuple[list[Any], list[str]]:
        """What fails the run before any baseline is read (its floors, its decisions, its drift
        under --fail-on-drift), and the notes on the floors it did not check."""
        declared = gates.declared_floors(self.config)
        judged, notes = gates.judged_summary(
            summary, self.records, self.run_dir, self.gate_settings
        )
        breaches, more = gates.floor_breaches(judged, self.gate_settings, declared, summary)
        breaches += gates.decision_breaches(summary)
        if self.config.getoption("fail_on_drift"):
            breaches += gates.drift_breaches(summary)
        return breaches, [*notes, *more]

    def _ended(self) -> None:
        """The run has ended, its verdict written: its witness has nothing to record."""
        if self.witness is not None:
            self.witness.ended()
            self.witness = None

    def _compare(self, notes: list[str]) -> Comparison:
        assert self.baseline is not None
        baseline = read_results(self.baseline / RESULTS)
        notes += [f"baseline {problem}" for problem in baseline.problems]
        baseline_run = RunInfo.load(self.baseline)
        return compare_arms(
            baseline.records,
            self.records,
            (self.baseline.name, self.run_dir.name),
            self.gate_settings.alpha,
            protocols=(
                Protocol.of(baseline.records, baseline_run.settings if baseline_run else None),
                Protocol.of(self.records, self.run_info.settings),
            ),
            pick=self.gate_settings.arm_pick,
            letters=(
                still_blinded(baseline_run.settings if baseline_run else None),
                still_blinded(self.run_info.settings),
            ),
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        if self.not_run or self.unreported or self.findings is not None:
            named = "arms" if self.settings.ab else "policy"
            terminalreporter.section(f"policybench: {named} {self.settings.policy_shown}")
        for line, failed in preflight_lines(self.config):
            write(line, red=failed)
        for line in not_run_lines(self.not_run, each=self.config.option.verbose > 0):
            write(line)
        if self.no_policy and (self.policy_given or not self.records):  # else said just above
            write(self._no_policy_line(), red=not self.records, bold=True)
        for line in self.unreported:
            write(line, red=True, bold=True)
        resumed = resumed_of(self.config)
        if resumed is not None:
            write(f"carried over from the interrupted run: {len(resumed.carried)} rollouts")
        if self.findings is None:
            return
        findings = self.findings
        summary = findings.summary
        if summary.arms:  # per Eval and arm; the totals per arm when there are several Evals
            rows = [row for row in summary.arms if len(summary.evals) > 1 or row.eval != OVERALL]
        else:
            rows = [*summary.evals, *([summary.overall] if len(summary.evals) > 1 else [])]
        for line in format_table(rows):
            write(line)
        if summary.specs:
            write("")
            for line in spec_table(summary.specs):
                write(line)
        for side in summary.decisions:
            write(f"decide: {side.line()}", bold=True)
        for versus in findings.summary.versus:
            write("")
            for line in versus.lines():
                write(line)
        self._why_lines(write, findings)
        if findings.comparison is not None:
            write("")
            write(f"compared with baseline {findings.comparison.before}:")
            for line in findings.comparison.lines():
                write(line)
        for line in summary.success_lines():
            write(f"warning: {line}", yellow=True, bold=True)
        for note in findings.notes:
            write(f"note: {note}")
        for line in findings.breaches:
            write(line, red=True, bold=True)
        write(f"results: {self.writer.path}")
        write(f"report: {self.run_dir / 'index.html'} (written in {self.report_s:.2f} s)")
        if self.interrupted and HUNG not in self.config.stash:  # a hang says it itself
            write(f"interrupted: continue the run with: {resume_command(self.config)}", bold=True)

    def _why_lines(self, write: Any, findings: Findings) -> None:
        """Where failures concentrate, how they cluster, the drift under candidate pins, and the
        diagnoses."""
        summary = findings.summary
        concentrated = robustness(summary, findings.run)
        for line in [] if concentrated is None else ["", *concentrated.lines()]:
            write(line, bold=line.startswith("where"))
        for line in clusters_lines(summary.failures):
            write(line, bold=line.startswith("how"))
        for line in drift_lines(summary.drift):
            write(line, bold=line.startswith("drift"))
        for line in published_lines(summary.published):
            write(line, bold=line.startswith("published"), yellow="BELOW" in line)
        for diagnosis in summary.diagnoses:
            write("")
            for line in diagnosis.lines():
                write(line, bold=line.startswith("diagnosis"), yellow=bool(diagnosis.findings))

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The run's last line, after pytest's own summary: its verdict."""
        self._ended()  # a session that ended before its finish (a usage error, say)
        if self.verdict is None or not (self.records or self.unreported or self.no_policy):
            return  # no rollout was selected (an empty shard, a session of other tests)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            line = self.verdict.last_line()
            reporter.write_line(
                line, red=not self.verdict.passed, green=self.verdict.passed, bold=True
            )

    def _no_policy_line(self) -> str:
        evals = ", ".join(sorted(self.no_policy))
        nothing = "" if self.records else "nothing ran: "
        if self.policy_given:
            return f"{nothing}the policy given cannot run on {evals} (see above)"
        return (
            f"{nothing}no policy was given, and the default (--policy=scripted, an Eval's own "
            f"expert) cannot run on {evals}: give one with --policy=random, --policy=openpi "
            "(a served model), --policy=lerobot:PATH or --policy=module:attr (your own)"
        )


def not_run_lines(not_run: dict[tuple[str, str], int], each: bool = False) -> list[str]:
    """The items not run, a line per reason with the Evals it holds for (`each`: a line per
    Eval), so that a run over many suites not installed says so in a few lines."""
    if each:
        return [
            f"{eval}: {count} item{'s' * (count != 1)} not run: {why}"
            for (eval, why), count in sorted(not_run.items())
        ]
    reasons: dict[str, dict[str, tuple[int, str]]] = {}  # reason -> Eval -> (count, its why)
    for (eval, why), count in sorted(not_run.items()):
        named = rf"eval {re.escape(repr(eval))}|(?<![\w-]){re.escape(eval)}(?![\w-])"
        reason = re.sub(named, "the Eval", why)
        reasons.setdefault(reason, {})[eval] = (count, why)
    lines = []
    for reason, evals in reasons.items():
        names = sorted(evals)
        if len(names) == 1:
            count, why = evals[names[0]]
            lines.append(f"{names[0]}: {count} item{'s' * (count != 1)} not run: {why}")
            continue
        count = sum(count for count, _ in evals.values())
        lines.append(f"{count} item{'s' * (count != 1)} not run ({listed(names)}): {reason}")
    if len(lines) > 1 or len(not_run) > 1:
        lines.append("(-v lists them by Eval)")
    return lines


def _junit_suite_properties(config: pytest.Config, summary: Summary) -> None:
    """With --junitxml: each Eval's (and the run's) success rate and 95% interval as testsuite
    properties, so CI dashboards see them beside the rollouts' testcases. In an A/B run, each
    arm's (`policybench.ARM.EVAL.…`) and those pooled over arms (`policybench.pooled.EVAL.…`)."""
    from _pytest.junitxml import xml_key  # pytest's own LogXML, as record_testsuite_property uses

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    for row in [*summary.arms, *summary.evals, summary.overall]:
        tally, interval = row.stats.tally, row.interval()
        named = row.arm if row.arm is not None else "pooled" if summary.arms else None
        prefix = f"policybench.{row.eval}" if named is None else f"policybench.{named}.{row.eval}"
        xml.add_global_property(f"{prefix}.rollouts", tally.rollouts)
        xml.add_global_property(f"{prefix}.solved", tally.solved)
        xml.add_global_property(f"{prefix}.errors", tally.errors)
        if tally.rate is not None and interval is not None:
            xml.add_global_property(f"{prefix}.success_rate", round(tally.rate, 6))
            xml.add_global_property(
                f"{prefix}.success_ci95", f"{interval[0]:.6f},{interval[1]:.6f}"
            )


def run_settings(config: pytest.Config, settings: RunSettings) -> dict[str, Any]:
    return {
        **protocol_settings(settings),
        "rollouts_per_task": settings.rollouts,
        "suites": list(settings.suites),
        keys.SHARD: shard_setting(config),
        "record_video": bool(config.getoption("record_video", False)),
        "xdist_workers": config.getoption("numprocesses", None),
        **(
            {keys.DECIDE: decide_given, keys.DECIDE_ORDER: ORDER_RULE}
            if (decide_given := config.getoption("decide"))
            else {}
        ),
        **decide.baseline_dir_setting(config),
        **({keys.PUBLISHED: named} if (named := config.getoption("published", None)) else {}),
    }


REALTIME_COLUMNS = ("delay", "latency p50/p95/p99 ms", "stale", "fresh Hz")


def realtime_cells(realtime: Realtime | None) -> tuple[str, ...]:
    """A row's real-time cells: mean delay in steps, latency percentiles, stale share, fresh
    rate ('-' where the row has none)."""
    if realtime is None:
        return ("-",) * len(REALTIME_COLUMNS)
    ms = "/".join("-" if v is None else f"{v:.1f}" for v in realtime.latency_ms)
    delay, stale, fresh = (
        realtime.delay_steps_mean,
        realtime.stale_action_share,
        realtime.fresh_action_hz,
    )
    return (
        "-" if delay is None else f"{delay:.2f}",
        ms,
        "-" if stale is None else f"{stale:.1%}",
        "-" if fresh is None else f"{fresh:.1f}",
    )


def format_table(rows: list[Row]) -> list[str]:
    """The per-Eval table; with an `arm` column when the rows are an A/B run's, and real-time
    columns (record.realtime) in a run with latency."""
    arms = any(row.arm is not None for row in rows)
    timed = any(row.stats.realtime is not None for row in rows)
    header = ("eval", "rollouts", "solved", "unsolved", "errors", "success", "95% CI")
    header = ("eval", "arm", *header[1:]) if arms else header
    header = (*header, *REALTIME_COLUMNS) if timed else header
    cells = [header]
    for row in rows:
        tally = row.stats.tally
        interval = row.interval()
        early = STOPPED_MARK if row.stopped_early else ""
        cells.append(
            (
                row.eval,
                *((str(row.arm),) if arms else ()),
                str(tally.rollouts),
                str(tally.solved),
                str(tally.unsolved),
                str(tally.errors),
                *(
                    ("no result", "(every rollout errored)")
                    if tally.rollouts and not tally.measured
                    else (
                        "-" if tally.rate is None else f"{tally.rate:.1%}{early}",
                        "-"
                        if interval is None
                        else f"[{interval[0]:.1%}, {interval[1]:.1%}]{early}",
                    )
                ),
                *(realtime_cells(row.stats.realtime) if timed else ()),
            )
        )
    lines = aligned(cells, left=2 if arms else 1)
    if any(row.stopped_early for row in rows):
        lines.append(STOPPED_NOTE)
    return lines


STOPPED_MARK = "*"
STOPPED_NOTE = (
    "* stopped early by --decide: the rate is biased (a run stops when its outcomes so far are "
    "extreme); the interval is the anytime-valid one, which holds however it stopped"
)


def _rate_cells(tally: Tally, interval: tuple[float, float] | None, early: str) -> tuple[str, str]:
    """A row's success and interval cells; no result where every rollout errored."""
    if tally.rollouts and not tally.measured:
        return "no result", "(every rollout errored)"
    return (
        "-" if tally.rate is None else f"{tally.rate:.1%}{early}",
        "-" if interval is None else f"[{interval[0]:.1%}, {interval[1]:.1%}]{early}",
    )


def spec_table(rows: Sequence[SpecRow]) -> list[str]:
    """The trajectory specs' table: per Eval and spec, its violations and margins."""
    return aligned([SPEC_HEADER, *(row.cells() for row in rows)], left=2)


def aligned(cells: Sequence[Sequence[str]], left: int) -> list[str]:
    """Rows of cells as lines of columns: the first `left` columns flush left, the rest right."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
