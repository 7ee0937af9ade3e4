"""`policybench score RUN`: serve the scoring page for a run on loopback until interrupted, then
bring its summary.json and HTML report up to date with the verdicts given."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path

from policybench.pages.server import LOOPBACK
from policybench.report.agreement import Agreement
from policybench.report.cli import rebuild_report
from policybench.run.results import RESULTS, read_results, resolve_run
from policybench.run.verdicts import read_verdicts
from policybench.scoring.app import ScoringApp, unfilmed_line


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Registers `score`."""
    parser = subparsers.add_parser(
        "score",
        help="score a run's rollouts from their recordings on a local web page (verdicts go to "
        "the run's verdicts.jsonl)",
    )
    parser.add_argument("run", help="a run directory, its results.jsonl, or a run id (or latest)")
    parser.add_argument(
        "--scorer", default=None, help="your name (by default the page asks each scorer)"
    )
    parser.add_argument("--host", default=LOOPBACK, help=f"default {LOOPBACK} (this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="default 8765 (0: any free port)")
    parser.add_argument("--report-dir", type=Path, default=Path("reports"))
    parser.set_defaults(func=run_score)


def run_score(args: argparse.Namespace) -> int:
    try:
        run_dir = resolve_run(args.run, args.report_dir).resolve()
    except FileNotFoundError as error:
        sys.exit(f"policybench score: {error}")
    app = ScoringApp(run_dir, args.scorer)
    try:
        server = app.server(args.host, args.port)
    except OSError as error:
        sys.exit(
            f"policybench score: cannot listen on {args.host}:{args.port} ({error}); pick "
            "another --port (0 for any free one)"
        )
    if args.host != LOOPBACK:
        print(f"warning: serving on {args.host}: anyone who can reach it can record verdicts")
    for problem in read_verdicts(run_dir).problems:
        print(f"warning: {problem}", file=sys.stderr)
    rollouts = app.rollouts()
    unfilmed = unfilmed_line(list(rollouts.values()))
    if unfilmed is not None:
        print(f"note: {unfilmed}")
    # Ctrl-C or SIGTERM end the page (a shell's background job inherits an ignored SIGINT),
    # from the moment it is announced: one pressed as the lines print ends it without a trace.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with contextlib.suppress(KeyboardInterrupt):
        print(f"scoring {len(rollouts)} rollouts of {app.run_id}: open {server.url}", flush=True)
        print("Ctrl-C when done: the report is then rewritten with the verdicts", flush=True)
        server.serve()
    verdicts = read_verdicts(run_dir)
    if not (verdicts.given or verdicts.problems):  # else the report's rebuild says them
        records = read_results(run_dir / RESULTS).records
        print("\n".join(Agreement.of(records, verdicts).lines()))
    rebuild_report(run_dir)
    return 0
