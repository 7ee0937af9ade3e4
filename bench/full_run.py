"""The headline command at full size: `pytest benchmarks/ -n N --policy=openpi` on every installed
suite, one rollout per task, against `policybench serve --policy=random`, at -n 2 and -n 8; items,
worker crashes, peak memory and envs built per worker, wall time.

Run from the repository root:  python bench/full_run.py  (hours on 2 cores: a LIBERO step renders
in software, ~0.4 s; -k EXPR for a smaller run, e.g. -k "not libero or task10").
Peak RSS is each worker's own (ru_maxrss), as its last rollout record gives it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from served_runs import (
    REPO,
    PolicyServer,
    child_env,
    final_records,
    item_counts,
    pytest_command,
    restore_ctrl_c,
    run_dir_in,
    shown,
)

from policybench import keys

RSS_TARGET_MB = 2048.0
CRASH_TARGET_WORKERS = 8  # the worker count at which 0 crashes is the target
FIRST_TASKS = 3  # of an Eval in a worker: enough to fill the env cache (2 live envs) and warm up
ACROSS_RUNS_TARGET = 1.25  # largest worker peak at the fewest workers / at the most workers
CRASHED = ("crashed while running", "ended by the watchdog")


@dataclass(frozen=True)
class WorkerUse:
    """One worker's rollouts in a run, in the order they finished."""

    worker: str
    records: tuple[dict[str, Any], ...]

    @property
    def peak_rss_mb(self) -> float:
        return max(r[keys.PEAK_RSS_MB] for r in self.records)

    @property
    def envs_built(self) -> int:
        return max(r[keys.ENVS_BUILT] for r in self.records)

    @property
    def tasks(self) -> int:
        return len({(r[keys.EVAL], r[keys.TASK]) for r in self.records})

    def first_eval_growth(self) -> tuple[str, int, float] | None:
        """(eval, its tasks, peak RSS MB added from its FIRST_TASKS-th task to its last) over
        the worker's first Eval, while it ran nothing else (so the peak is that Eval's alone);
        None when that stretch has fewer than 2 x FIRST_TASKS tasks."""
        eval = self.records[0][keys.EVAL]
        rss_at: dict[str, float] = {}  # task -> peak RSS after its last rollout in the stretch
        for record in self.records:
            if record[keys.EVAL] != eval:
                break
            rss_at[record[keys.TASK]] = record[keys.PEAK_RSS_MB]
        if len(rss_at) < 2 * FIRST_TASKS:
            return None
        peaks = list(rss_at.values())
        return eval, len(peaks), peaks[-1] - peaks[FIRST_TASKS - 1]


@dataclass(frozen=True)
class Run:
    workers: int
    command: list[str]
    exit_code: int
    wall_s: float
    counts: dict[str, int]
    records: dict[str, dict[str, Any]]
    node_down: int  # xdist's "node down" lines: workers that ended mid-run

    @property
    def crashes(self) -> list[str]:
        """Every crashed or watchdog-ended attempt, from the records (their retries too)."""
        found = []
        for record in self.records.values():
            for why in [record.get(keys.REASON) or "", *record.get(keys.RETRIED, ())]:
                if any(phrase in why for phrase in CRASHED):
                    found.append(why)
        return found

    def by_worker(self) -> list[WorkerUse]:
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in self.records.values():
            if keys.PEAK_RSS_MB in record:  # a crash's record says nothing of a process
                grouped[record[keys.WORKER]].append(record)
        order = sorted(grouped, key=lambda name: (len(name), name))
        return [WorkerUse(name, tuple(grouped[name])) for name in order]


def run_suites(
    workers: int, server: PolicyServer, report_dir: Path, args: argparse.Namespace
) -> Run:
    command = pytest_command(
        "benchmarks/",
        *("-m", "not golden", "-q", "-n", str(workers)),
        *("--policy=openpi", f"--policy-url={server.url}", "--rollouts", str(args.rollouts)),
        *("--report-dir", str(report_dir)),
        *(("-k", args.k) if args.k else ()),
    )
    log = report_dir.with_suffix(".log")
    started = time.monotonic()
    with log.open("wb") as output:
        done = subprocess.run(
            command, cwd=REPO, env=child_env(), stdout=output, stderr=subprocess.STDOUT
        )
    wall = time.monotonic() - started
    text = log.read_text(errors="replace")
    if done.returncode not in (0, 1):  # 1: some items failed or errored, which the table says
        print(text[-4000:], file=sys.stderr)
        raise SystemExit(f"`{shown(command, {})}` exited {done.returncode}; output above")
    return Run(
        workers=workers,
        command=command,
        exit_code=done.returncode,
        wall_s=wall,
        counts=item_counts(text),
        records=final_records(run_dir_in(report_dir)),
        node_down=text.count("node down"),
    )


# --- report ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    measure: str
    value: str
    target: str = ""
    passed: bool | None = None


def run_rows(run: Run) -> list[Row]:
    users = run.by_worker()
    counts = ", ".join(f"{n} {noun}" for noun, n in run.counts.items()) or "no summary line"
    peak = max((u.peak_rss_mb for u in users), default=0.0)
    growth = [(u.worker, *g) for u in users if (g := u.first_eval_growth()) is not None]
    rows = [
        Row("items", f"{counts} (exit {run.exit_code})"),
        Row(
            "worker crashes (crashed or watchdog-ended attempts)",
            f"{len(run.crashes)} ({run.node_down} 'node down' lines)",
            "0" if run.workers == CRASH_TARGET_WORKERS else "",
            (not run.crashes) if run.workers == CRASH_TARGET_WORKERS else None,
        ),
        Row(
            "peak RSS per worker, largest",
            f"{peak:,.0f} MB",
            f"< {RSS_TARGET_MB:,.0f} MB",
            bool(users) and peak < RSS_TARGET_MB,
        ),
        Row(
            "peak RSS per worker (MB)",
            ", ".join(f"{u.worker} {u.peak_rss_mb:,.0f}" for u in users),
        ),
        Row("envs built per worker", ", ".join(f"{u.worker} {u.envs_built}" for u in users)),
        Row("tasks run per worker", ", ".join(f"{u.worker} {u.tasks}" for u in users)),
    ]
    if growth:
        worker, eval, tasks, added = max(growth, key=lambda g: g[3])
        rows.append(
            Row(
                f"peak RSS added over a worker's first Eval, from its task {FIRST_TASKS} to its "
                f"last (worst of {len(growth)} workers)",
                f"{added:+.0f} MB over {tasks - FIRST_TASKS} tasks ({worker}, {eval})",
            )
        )
    rows.append(Row("wall time", f"{run.wall_s / 60:.1f} min ({run.wall_s:.0f} s)"))
    return rows


def across_runs_row(runs: Sequence[Run]) -> Row | None:
    """The largest worker peak with few workers (each meets many tasks) against many workers."""
    fewest, most = min(runs, key=lambda r: r.workers), max(runs, key=lambda r: r.workers)
    if fewest.workers == most.workers or not fewest.by_worker() or not most.by_worker():
        return None

    def peak_and_tasks(run: Run) -> tuple[float, float]:
        users = run.by_worker()
        return max(u.peak_rss_mb for u in users), statistics.mean(u.tasks for u in users)

    (few_peak, few_tasks), (most_peak, most_tasks) = peak_and_tasks(fewest), peak_and_tasks(most)
    ratio = few_peak / most_peak
    return Row(
        f"largest worker peak RSS, -n {fewest.workers} / -n {most.workers}",
        f"{ratio:.2f} ({few_peak:,.0f} MB with {few_tasks:.0f} tasks per worker on average, "
        f"{most_peak:,.0f} MB with {most_tasks:.0f})",
        f"<= {ACROSS_RUNS_TARGET:g}",
        ratio <= ACROSS_RUNS_TARGET,
    )


def table(rows: list[Row]) -> str:
    lines = ["| measure | value | target | result |", "|---|---|---|---|"]
    for row in rows:
        verdict = "" if row.passed is None else ("pass" if row.passed else "FAIL")
        lines.append(f"| {row.measure} | {row.value} | {row.target} | {verdict} |")
    return "\n".join(lines)


def resolved_command(args: argparse.Namespace) -> str:
    flags = [
        f"--workers={','.join(map(str, args.workers))}",
        f"--rollouts={args.rollouts}",
        *([f"-k={args.k}"] if args.k else []),
    ]
    return shown(["python", "bench/full_run.py", *flags], {})


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[2, 8],
        help="-n of each run, comma-separated (default 2,8)",
    )
    parser.add_argument("--rollouts", type=int, default=1, help="--rollouts (default 1)")
    parser.add_argument("-k", default=None, help="pytest -k expression, for a quick try")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the runs (reports, logs) under DIR and keep them",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    restore_ctrl_c()
    with tempfile.TemporaryDirectory(prefix="policybench-full-run-") as temporary:
        root = Path(args.keep or temporary)
        root.mkdir(parents=True, exist_ok=True)
        server = PolicyServer("random", root / "server.log", env=child_env())
        server.start()
        runs: list[Run] = []
        try:
            for workers in args.workers:
                runs.append(run_suites(workers, server, root / f"n{workers}", args))
                print(f"-n {workers}: {runs[-1].wall_s:.0f} s", file=sys.stderr, flush=True)
        finally:
            server.stop()
        names = {str(root): "$DIR", server.url: "$URL"}
        print(f"$ {resolved_command(args)}")
        print(
            "policy: `policybench serve --policy=random --port PORT`, $URL its address; "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end"
        )
        for run in runs:
            print(f"\n-n {run.workers}: $ {shown(run.command, names)}\n")
            print(table(run_rows(run)))
        across = across_runs_row(runs)
        if across is not None:
            print("\n" + table([across]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
