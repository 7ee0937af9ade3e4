"""`policybench report`: rebuild a run's summary and HTML from its results.jsonl, compare two
runs task by task, merge shards and resumed parts into one run, or unblind a `--blind` run."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import UndefinedError

from policybench.lifetime import INTERRUPTED
from policybench.record.protocol import FORMER_OVERRIDE, OVERRIDE, Protocol
from policybench.report import status as status_command
from policybench.report.compare import (
    ALPHA,
    compare_arms,
    nothing_compared,
    picked,
    still_blinded,
)
from policybench.report.html import Findings, write_html
from policybench.report.markdown import markdown, write_markdown
from policybench.report.merge import MergeRefused, merge_runs
from policybench.report.paired import Adjustment
from policybench.report.published import entry_named, published_lines
from policybench.report.rollout_table import PAGES_ALL, PAGES_LARGE
from policybench.report.summary import Summary
from policybench.run.arms import UNBLINDED, Unsealed, unblind_lines
from policybench.run.files import held_apart, make_folders
from policybench.run.info import RunInfo
from policybench.run.layout import verdict_in
from policybench.run.results import RESULTS, read_results, resolve_run
from policybench.run.unfinished import seal_named, seal_unfinished
from policybench.run.verdicts import SOURCE_HELP, VERDICTS, judged_records


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Registers `report`."""
    parser = subparsers.add_parser("report", help="rebuild a run's report, or compare two runs")
    commands = parser.add_subparsers(dest="report_command", required=True)

    html = commands.add_parser("html", help="rewrite summary.json and index.html from results")
    html.add_argument("run", help="a run directory, its results.jsonl, or a run id (or latest)")
    html.add_argument("--report-dir", type=Path, default=Path("reports"))
    html.add_argument(
        "--all-pages",
        action="store_true",
        help=f"a page for every rollout (a run of over {PAGES_ALL:,} rollouts gets pages for its "
        f"errors, unsolved and spec-breaking rollouts, then a sample, {PAGES_LARGE:,} in all)",
    )
    html.add_argument(
        "--published",
        metavar="NAME",
        help="show the run beside these published results (`policybench published` lists "
        "them), instead of those its policy or run names",
    )
    html.set_defaults(func=run_html)

    _add_compare(commands)

    merge = commands.add_parser(
        "merge",
        help="one run (results, summary, run.json listing its parts, HTML) from shards or "
        "resumed parts of a run",
    )
    merge.add_argument("runs", nargs="+", metavar="RUN", help="the parts (directories or run ids)")
    merge.add_argument(
        "--out", type=Path, required=True, help="the merged run's directory (new, or a merge's)"
    )
    merge.add_argument("--report-dir", type=Path, default=Path("reports"))
    _allow_protocol_change(
        merge, "merge parts whose protocol or policy differs; the report lists the differences"
    )
    merge.set_defaults(func=run_merge)

    unblind = commands.add_parser(
        "unblind",
        help="name the arms of a run started with --blind: rewrite its results, summary and "
        "report with the policies' names (for good: the run cannot be resumed blind after)",
    )
    unblind.add_argument("run", help="a run directory, its results.jsonl, or a run id")
    unblind.add_argument("--report-dir", type=Path, default=Path("reports"))
    unblind.set_defaults(func=run_unblind)
    status_command.add_parser(commands)


def _add_compare(commands: argparse._SubParsersAction) -> None:
    """Registers `report compare`."""
    compare = commands.add_parser(
        "compare",
        help="per task: both success rates, the change with its interval and an exact p-value "
        "(McNemar on rollouts paired by scene, else Fisher)",
    )
    compare.add_argument("before", help="the baseline run (directory, results.jsonl or run id)")
    compare.add_argument("after", help="the run to judge against it")
    compare.add_argument("--report-dir", type=Path, default=Path("reports"))
    compare.add_argument("--alpha", type=float, default=ALPHA, help=f"default {ALPHA}")
    compare.add_argument(
        "--adjust",
        choices=[method.value for method in Adjustment],
        default=Adjustment.BH.value,
        help="adjust p-values across tasks by Benjamini-Hochberg (bh, the default) or Holm",
    )
    _allow_protocol_change(
        compare, "compare runs whose protocol differs; the differences are listed with it"
    )
    compare.add_argument(
        "--out", type=Path, default=None, help="where compare.txt/json go (default: AFTER's dir)"
    )
    compare.add_argument("--outcome-source", default="automatic", help=SOURCE_HELP)
    compare.add_argument(
        "--arm",
        default=None,
        metavar="NAME",
        help="compare arm NAME of each run that is an A/B run (A/B runs are otherwise compared "
        "arm by arm, an arm against the other run's arm of its name)",
    )
    compare.add_argument("--before-arm", default=None, metavar="NAME", help="BEFORE's arm NAME")
    compare.add_argument("--after-arm", default=None, metavar="NAME", help="AFTER's arm NAME")
    compare.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 if any task is significantly worse in AFTER",
    )
    compare.set_defaults(func=run_compare)


def _allow_protocol_change(parser: argparse.ArgumentParser, help: str) -> None:
    """The override of a protocol check, spelled as the pytest option is; its former name is
    accepted, unlisted."""
    parser.add_argument(OVERRIDE, action="store_true", help=help)
    parser.add_argument(
        FORMER_OVERRIDE,
        dest="allow_protocol_change",
        action="store_true",
        help=argparse.SUPPRESS,
    )


def interrupted_line(run_dir: Path, what: str) -> str:
    """What a run's report writing ended by Ctrl-C says, in one line: what was interrupted, that
    its results are whole (each record is appended and flushed as it ends), and how to finish."""
    again = shlex.join(["policybench", "report", "html", str(run_dir)])
    return (
        f"policybench: interrupted while {what}; its {RESULTS} is intact; write the report "
        f"again with: {again}"
    )


def one_line(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`command`, with a field of a kind no run writes (a record edited by hand, a part from a
    stranger) refused in one line instead of a traceback."""

    @functools.wraps(command)
    def refusing(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (KeyError, TypeError, AttributeError, ValueError, UndefinedError) as error:
            sys.exit(
                f"policybench report: a file of the run holds a field of a kind no run writes "
                f"({type(error).__name__}: {str(error)[:300]}); the report was not finished"
            )

    return refusing


@one_line
def run_html(args: argparse.Namespace) -> int:
    run_dir = Path(args.run)
    try:
        if args.published is not None:
            entry_named(args.published)
    except ValueError as error:
        print(f"policybench report html: --published: {error}", file=sys.stderr)
        return 2
    try:
        seal_named(args.run, args.report_dir)  # a loop killed in its first episode: no results
        run_dir = _run_dir(args.run, args.report_dir)
        rebuild_report(run_dir, args.all_pages, args.published)
    except KeyboardInterrupt:
        print(interrupted_line(run_dir, f"writing the report of {run_dir}"), file=sys.stderr)
        return INTERRUPTED
    return 0


def rebuild_report(run_dir: Path, all_pages: bool = False, published: str | None = None) -> Path:
    """summary.json and the HTML report of `run_dir`, written anew from its results (and its
    operators' verdicts); says what it wrote. Returns the report's index page. Episodes a
    wrapped loop died in (run.unfinished) become their error records first."""
    for line in seal_unfinished(run_dir):
        print(line)
    results = read_results(run_dir / RESULTS)
    _warn(results.problems)
    run = RunInfo.load(run_dir)
    with held_apart():  # the records, kept to the end: not scanned at each collection
        summary = Summary.of_run(run_dir, results, published)
        summary.write(run_dir, run)
        findings = Findings(summary, results.records, run, verdict=verdict_in(run_dir))
        index = write_html(run_dir, findings, all_pages)
    write_markdown(run_dir, markdown(summary, findings.verdict, run))
    if summary.operator is not None:
        print("\n".join(summary.operator.lines()))
    for line in published_lines(summary.published):
        print(line)
    print(f"{len(results.records)} rollouts; report: {index}")
    return index


def run_compare(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1:
        sys.exit(f"policybench report compare: --alpha must lie in (0, 1), got {args.alpha}")
    before, after = (_run_dir(run, args.report_dir) for run in (args.before, args.after))
    runs = [read_results(run_dir / RESULTS) for run_dir in (before, after)]
    for run_dir, results in zip((before, after), runs, strict=True):
        _warn([f"{run_dir.name}: {problem}" for problem in results.problems])
    judged = []
    for run_dir, results in zip((before, after), runs, strict=True):
        try:
            records, notes = judged_records(
                results.records, run_dir, args.outcome_source, run_dir.name
            )
        except ValueError as error:
            sys.exit(f"policybench report compare: {error}")
        _warn(notes)
        judged.append(records)
    protocols = [
        _protocol(run_dir, results.records)
        for run_dir, results in zip((before, after), runs, strict=True)
    ]
    try:
        pick = picked(args.arm, args.before_arm, args.after_arm, judged[0], judged[1])
    except ValueError as error:
        sys.exit(f"policybench report compare: {error}")
    comparison = compare_arms(
        judged[0],
        judged[1],
        (before.name, after.name),
        args.alpha,
        Adjustment(args.adjust),
        protocols=(protocols[0], protocols[1]),
        pick=pick,
        letters=(_blinded(before), _blinded(after)),
    )
    if not comparison.tasks:
        sys.exit(f"policybench report compare: {nothing_compared(comparison)}")
    if comparison.protocol and not args.allow_protocol_change:
        differences = "\n".join(f"  {line}" for line in comparison.protocol_lines())
        sys.exit(
            f"policybench report compare: {before.name} and {after.name} ran different "
            f"protocols, so their success rates measure different things:\n{differences}\n"
            f"Rerun one of them with the other's settings, or pass {OVERRIDE} to "
            "compare anyway (the differences are then listed with the comparison)."
        )
    out = args.out or after
    make_folders(out)
    text, _ = comparison.write(out, f"compare-{before.name}")
    print("\n".join(comparison.lines()))
    print(f"written: {text} (and .json)")
    regressed = comparison.regressions or comparison.pooled_regressions
    return 1 if args.fail_on_regression and regressed else 0


@one_line
def run_merge(args: argparse.Namespace) -> int:
    run_dirs = [_run_dir(run, args.report_dir) for run in args.runs]
    flags = [OVERRIDE] if args.allow_protocol_change else []
    command = ["policybench", "report", "merge", *args.runs, "--out", str(args.out), *flags]
    try:
        done = merge_runs(run_dirs, args.out, args.allow_protocol_change, shlex.join(command))
    except MergeRefused as error:
        sys.exit(f"policybench report merge: {error}")
    for part in done.parts:
        _warn([f"{part.name}: {problem}" for problem in part.problems])
    merged = done.merged
    print(f"merged {len(done.parts)} parts: {len(merged.records)} rollouts")
    summary = done.summary  # an A/B run's rows per arm: a rate pooled over arms mixes policies
    for row in summary.arms or [*summary.evals, summary.overall]:
        tally = row.stats.tally
        rate = "-" if tally.rate is None else f"{tally.rate:.1%}"
        arm = "" if row.arm is None else f", arm {row.arm}"
        print(
            f"  {row.eval}{arm}: {tally.solved}/{tally.rollouts} solved ({rate}), "
            f"{tally.errors} errors"
        )
    for line in [*(f"protocol change allowed: {m}" for m in done.changes), *merged.notes()]:
        print(f"note: {line}")
    print(f"report: {done.index}")
    if merged.conflicts or merged.missing:
        print(
            "the merged run is incomplete or inconsistent (see the notes above); rerun what is "
            "missing and merge again",
            file=sys.stderr,
        )
        return 1
    return 0


def run_unblind(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run, args.report_dir)
    run = RunInfo.load(run_dir)
    if run is not None and run.settings.get(UNBLINDED):
        sys.exit(f"policybench report unblind: {run_dir.name} is unblinded already")
    try:
        unsealed = Unsealed.read(run_dir)
    except FileNotFoundError as error:
        sys.exit(f"policybench report unblind: {error}")
    unblind_lines(run_dir / RESULTS, unsealed)
    unblind_lines(run_dir / VERDICTS, unsealed, verdicts=True)
    if run is not None:
        settings = unsealed.settings(run.settings)
        run = dataclasses.replace(run, command=unsealed.command, settings=settings)
        run.write(run_dir)
    results = read_results(run_dir / RESULTS)
    _warn(results.problems)
    summary = Summary.of_run(run_dir, results)
    summary.write(run_dir, run)
    index = write_html(run_dir, Findings(summary, results.records, run, verdict_in(run_dir)))
    named = ", ".join(f"{letter} = {unsealed.label(letter)}" for letter in unsealed.letters)
    print(f"unblinded {run_dir.name}: {named}")
    for versus in summary.versus:
        print("\n".join(versus.lines()))
    print(f"report: {index}")
    return 0


def _blinded(run_dir: Path) -> str | None:
    run = RunInfo.load(run_dir)
    return still_blinded(None if run is None else run.settings)


def _protocol(run_dir: Path, records: Sequence[Mapping[str, Any]]) -> Protocol:
    """A run's protocol from its records and run.json (from the records alone without one)."""
    run = RunInfo.load(run_dir)
    return Protocol.of(records, None if run is None else run.settings)


def _run_dir(run: str, report_dir: Path) -> Path:
    try:
        return resolve_run(run, report_dir).resolve()
    except FileNotFoundError as error:
        sys.exit(f"policybench report: {error}")


def _warn(problems: object) -> None:
    for problem in problems:  # type: ignore[attr-defined]
        print(f"warning: {problem}", file=sys.stderr)
