"""`policybench leaderboard [REPORTS ...]`: policies x Evals from the newest comparable run of each
policy, ranked with ties where the data cannot separate them; a page and its Markdown."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from policybench.report.leaderboard import leaderboard, write_board
from policybench.run.files import Refused


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "leaderboard", help="rank the policies of your runs on each Eval, with published results"
    )
    parser.add_argument(
        "reports",
        nargs="*",
        type=Path,
        default=[Path("reports")],
        help="folders of runs (--report-dir; default reports)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where to write leaderboard.html and .md (default: the first folder)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for root in args.reports:
        if not root.is_dir():
            print(f"policybench leaderboard: {root} is not a folder of runs (a --report-dir)",
                  file=sys.stderr)  # fmt: skip
            return 2
    try:
        board = leaderboard(args.reports)
        out = args.out or args.reports[0]
        out.mkdir(parents=True, exist_ok=True)
        page, text = write_board(board, args.reports, out)
    except Refused as refused:
        print(f"policybench leaderboard: {refused}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as error:
        print(f"policybench leaderboard: a history.sqlite could not be read: {error}; delete it "
              "to rebuild it from the runs", file=sys.stderr)  # fmt: skip
        return 2
    if not board.cells:
        folders = ", ".join(map(str, args.reports))
        print(f"policybench leaderboard: no runs with results under {folders}")
        return 0
    print(board.markdown(), end="")
    print(f"leaderboard: {page} ({text})")
    return 0
