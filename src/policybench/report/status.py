"""`policybench report status DIR...`: how far runs and shards have got, one line each and
together (status.json, or a wrapped loop's results)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from policybench.run.results import RESULTS
from policybench.run.status import STATUS, RunState, combined, duration, read_status, status_dirs


def add_parser(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser(
        "status", help="how far runs have got (their status.json), one line each and together"
    )
    status.add_argument("runs", nargs="+", type=Path, help="run directories, or folders of them")
    status.set_defaults(func=run_status)


def run_status(args: argparse.Namespace) -> int:
    missing = [path for path in args.runs if not path.exists()]
    if missing:
        shown = ", ".join(str(path) for path in missing)
        print(f"no such directory: {shown}: give run directories, or folders of them")
        return 2
    dirs = status_dirs(args.runs)
    if not dirs:
        shown = " ".join(str(path) for path in args.runs)
        print(
            f"no {STATUS} or {RESULTS} in {shown} or the directories directly inside: "
            "give run directories"
        )
        return 2
    statuses = [read_status(run_dir) for run_dir in dirs]
    now = time.time()
    for run_dir, status in zip(dirs, statuses, strict=True):
        age = (
            f" (updated {duration(now - status.updated_at)} ago)"
            if status.state is RunState.RUNNING
            else ""
        )
        print(f"{run_dir}: {status.line()}{age}")
    if len(statuses) > 1:
        print(f"together: {combined(statuses).line()}")
    return 0
