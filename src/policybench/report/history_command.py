"""`policybench history [REPORTS...]`: reads every run under the folders given (default
`reports/`), new and changed runs only, into each folder's `history.sqlite`, and writes its
`index.html`: success per Eval over runs. `--fail-on-regression` exits 1 when an Eval's newest
run is significantly worse than its line's reference run (history_gate: a stated chance of a
false alarm per call and over a sequence of calls), for a CI job that runs after each
evaluation."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from policybench.report.compare import ALPHA
from policybench.report.history import RecordsOf, open_store, read_history, update
from policybench.report.history_gate import CALLS, gate
from policybench.report.history_page import write_page
from policybench.run.files import Refused, collector_paused


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "history",
        help="success per Eval over every run in a folder of runs: an index page, a SQLite "
        "store, and a gate on the newest run",
    )
    parser.add_argument(
        "reports",
        nargs="*",
        type=Path,
        default=[Path("reports")],
        metavar="REPORTS",
        help="folders of runs, each a --report-dir (default: reports)",
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when an Eval's newest run is significantly worse than its reference run "
        "(paired by scene; each call at level ALPHA/CALLS), or the --reference given is not "
        "on the newest run's line",
    )
    parser.add_argument(
        "--reference",
        metavar="RUN",
        help="the run (its folder's name) each Eval's newest run is compared with; it must have "
        "run the newest's protocol (default: the first run of the newest's line, which a "
        "protocol change starts anew)",
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=CALLS,
        metavar="N",
        help=f"the gate's calls after a reference that ALPHA is spread over: each tests at "
        f"ALPHA/N, so over N calls of an unchanged policy the chance of any false alarm is at "
        f"most ALPHA (default {CALLS})",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=ALPHA,
        help=f"significance level of the page's run-to-run comparisons, and the gate's chance "
        f"of a false alarm over --calls calls (default {ALPHA})",
    )
    parser.add_argument("--window", type=int, help=argparse.SUPPRESS)  # removed: see run()
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.window is not None:
        raise SystemExit(
            "policybench history: --window is gone: comparing the newest run with the best of "
            "the last N raised false alarms in most long sequences. The gate now compares it "
            "with a reference run (--reference RUN, default the line's first) at ALPHA/--calls "
            "a call; see docs/guides/history.md"
        )
    if args.calls < 1 or not 0 < args.alpha < 1:
        raise SystemExit("policybench history: --calls must be >= 1 and --alpha in (0, 1)")
    failed = False
    for root in args.reports:
        if not root.is_dir():
            print(f"policybench history: {root} is not a folder of runs (a --report-dir)",
                  file=sys.stderr)  # fmt: skip
            return 2
        try:
            # The runs read and paired, and the page, build many objects and no cycles: the
            # collector waits for the end of the folder (see collector_paused)
            with collector_paused(), closing(open_store(root)) as store:
                records = RecordsOf(store)
                updated = update(store, root, records)
                history = read_history(store, root, args.alpha, records)
                gated = gate(history, records, args.alpha, args.calls, args.reference)
                store.commit()  # the steps' and the gate's tests, kept for the next call
                for line in updated.skipped:
                    print(f"policybench history: {root}/{line}", file=sys.stderr)
                page = write_page(root, history, gated)
        except Refused as refused:
            print(f"policybench history: {refused}", file=sys.stderr)
            return 2
        except sqlite3.DatabaseError as error:
            print(f"policybench history: {root / 'history.sqlite'}: {error}; delete it to "
                  "rebuild it from the runs", file=sys.stderr)  # fmt: skip
            return 2
        print(f"{root}: {len(history.runs)} runs ({updated.read} read, {updated.kept} "
              f"unchanged{_skipped(updated.skipped)}); {page}")  # fmt: skip
        if args.fail_on_regression or gated.regressions:
            print("\n".join(gated.lines()))
        failed = failed or gated.failed
    return 1 if failed and args.fail_on_regression else 0


def _skipped(lines: tuple[str, ...]) -> str:
    runs = {line.split("/", 1)[0].split(":", 1)[0] for line in lines}
    return f", {len(runs)} with lines or files skipped (above)" if lines else ""
