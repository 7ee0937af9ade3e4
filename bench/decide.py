"""How many rollouts `--decide` saves: MetaWorld MT10 (state) under its scripted expert (a rate
near 1) and a random policy (a rate near 0), each with `--decide RATE` and `--rollouts N` over
several base seeds, counting the rollouts each run recorded against the N x 10 it planned.

Run from the repository root:  python bench/decide.py  (about a minute at the defaults; -n 0, so
that no rollout is in flight when a decision falls: `-n 2` records a few more, never another
decision). It prints a markdown table and the command that made it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = 10  # MT10


def run(policy: str, seed: int, rate: str, rollouts: int, report_dir: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks/test_metaworld.py",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--policy={policy}",
        f"--seed={seed}",
        f"--decide={rate}",
        f"--rollouts={rollouts}",
        f"--report-dir={report_dir}",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    summary_path = report_dir / "latest" / "summary.json"
    if not summary_path.is_file():
        sys.exit(f"{shlex.join(command)} wrote no summary:\n{done.stdout[-2000:]}{done.stderr}")
    summary = json.loads(summary_path.read_text())
    decision = summary["decisions"][0]
    recorded = summary["overall"]["rollouts"]
    return {"verdict": decision["verdict"], "at": decision["rollouts"], "ran": recorded, "s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="base seeds 0..S-1 (default 3)")
    parser.add_argument("--rate", default="0.8", help="--decide's value (default 0.8)")
    parser.add_argument("--rollouts", type=int, default=10, help="--rollouts (default 10)")
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    planned = args.rollouts * TASKS
    given = f"--seeds={args.seeds} --rate={args.rate} --rollouts={args.rollouts}"
    print(f"$ python bench/decide.py {given}")
    print()
    print(
        "| policy | seeds | verdicts | decided at (mean) | rollouts recorded (mean) | of planned "
        "| wall s (mean) |"
    )
    print("|---|---:|---|---:|---:|---:|---:|")
    for policy in ("scripted", "random"):
        rows = []
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as folder:
                rows.append(run(policy, seed, args.rate, args.rollouts, Path(folder)))
        verdicts = ", ".join(sorted({row["verdict"] for row in rows}))
        at = statistics.mean(row["at"] for row in rows)
        ran = statistics.mean(row["ran"] for row in rows)
        wall = statistics.mean(row["s"] for row in rows)
        cells = [policy, args.seeds, verdicts, f"{at:.1f}", f"{ran:.1f}", planned, f"{wall:.1f}"]
        print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
