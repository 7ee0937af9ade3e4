"""How big a run report is and how long writing it takes: a real PushT run (random policy,
one 96x96 image per step, 300 steps a rollout) with and without --record-video.

    python bench/report_size.py [--rollouts 100] [--workers 2]

Prints one row per run: rollouts, the run's wall time, the time the controller spent writing
summary.json and the HTML pages, the size of the report with and without its videos and of its
rollout traces, and the report without videos scaled to 1,000 rollouts, against BUDGET_MIB.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The report of a 1,000-rollout run of 300-step rollouts, videos aside: results, summary, pages
# (each embedding its rollout's trace) and traces.
BUDGET_MIB = 64


def size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def run(rollouts: int, workers: int, video: bool, report_dir: Path) -> dict:
    command = [
        sys.executable, "-m", "pytest", "benchmarks/test_pusht.py", "-q", "-p", "no:cacheprovider",
        "-n", str(workers), "--policy", "random", "--rollouts", str(rollouts),
        "--report-dir", str(report_dir),
    ] + (["--record-video"] if video else [])  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    written = re.search(r"report: (\S+) \(written in ([\d.]+) s\)", done.stdout)
    if written is None:
        sys.exit(
            f"no report line in the run's output:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
        )
    run_dir = Path(written.group(1)).parent
    videos = run_dir / "videos"
    traces = run_dir / "traces"
    rollouts = sum(1 for _ in (run_dir / "results.jsonl").open())
    without_videos = size(run_dir) - (size(videos) if videos.exists() else 0)
    return {
        "video": video,
        "rollouts": rollouts,
        "run_s": wall,
        "report_s": float(written.group(2)),
        "total_kb": size(run_dir) / 1024,
        "videos_kb": size(videos) / 1024 if videos.exists() else 0.0,
        "html_kb": (size(run_dir / "rollouts") + (run_dir / "index.html").stat().st_size) / 1024,
        "traces_kb": size(traces) / 1024 if traces.exists() else 0.0,
        "per_1000_mib": without_videos / rollouts * 1000 / 2**20,
        "command": " ".join(command[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = [
            run(args.rollouts, args.workers, video, Path(scratch) / "reports")
            for video in (False, True)
        ]
    print(f"{'video':<6}{'rollouts':>9}{'run s':>8}{'report s':>10}{'report %':>10}"
          f"{'total KiB':>11}{'videos KiB':>12}{'html KiB':>10}{'traces KiB':>12}"
          f"{'1000 MiB':>10}")  # fmt: skip
    for row in rows:
        print(
            f"{row['video']!s:<6}{row['rollouts']:>9}{row['run_s']:>8.1f}{row['report_s']:>10.2f}"
            f"{100 * row['report_s'] / row['run_s']:>9.1f}%{row['total_kb']:>11.0f}"
            f"{row['videos_kb']:>12.0f}{row['html_kb']:>10.0f}{row['traces_kb']:>12.0f}"
            f"{row['per_1000_mib']:>10.1f}"
        )
    print(
        f"1000 MiB: the report without videos scaled to 1,000 rollouts; budget {BUDGET_MIB} MiB: "
        + ("ok" if all(row["per_1000_mib"] <= BUDGET_MIB for row in rows) else "OVER")
    )
    print("commands:", *(f"  python {row['command']}" for row in rows), sep="\n")


if __name__ == "__main__":
    main()
