"""`policybench history [REPORTS...]`: reads every run under the folders given (default
`reports/`), new and changed runs only, into each folder's `history.sqlite`, and writes its
`index.html`: success per Eval over runs. `--fail-on-regression` exits 1 when an Eval's newest
run is significantly worse than the best of the comparable runs before it, for a CI job that
runs after each evaluation."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from policybench.report.compare import ALPHA
from policybench.report.history import open_store, read_history, update
from policybench.report.history_page import write_page

WINDOW = 5  # comparable runs before the newest that --fail-on-regression compares it with


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
        help="exit 1 when an Eval's newest run is significantly worse than the best of the "
        "comparable runs before it (paired by scene where the scenes match)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=WINDOW,
        metavar="N",
        help=f"with --fail-on-regression: how many comparable runs before the newest to take the "
        f"best of (default {WINDOW})",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=ALPHA,
        help=f"significance level of each comparison (default {ALPHA})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.window < 1 or not 0 < args.alpha < 1:
        raise SystemExit("policybench history: --window must be >= 1 and --alpha in (0, 1)")
    failed = False
    for root in args.reports:
        if not root.is_dir():
            print(f"policybench history: {root} is not a folder of runs (a --report-dir)",
                  file=sys.stderr)  # fmt: skip
            return 2
        try:
            with open_store(root) as store:
                read, kept = update(store, root)
                history = read_history(store, root, args.alpha, args.window)
        except sqlite3.DatabaseError as error:
            print(f"policybench history: {root / 'history.sqlite'}: {error}; delete it to "
                  "rebuild it from the runs", file=sys.stderr)  # fmt: skip
            return 2
        page = write_page(root, history)
        print(f"{root}: {len(history.runs)} runs ({read} read, {kept} unchanged); {page}")
        for line in history.regressions:
            print(f"regression: {line}")
        failed = failed or bool(history.regressions)
    return 1 if failed and args.fail_on_regression else 0
