"""MetaWorld's experts on MT50, ten rollouts a task (LeRobot's episodes per task): each task's
success, its difficulty group (LeRobot's), and the pooled rate, from state observations
(`metaworld-mt50`; the same physics and placements rule as `metaworld-mt10`).

Run from the repository root:  python bench/mt50_experts.py [--rollouts 10] [-n 2]
(about two minutes on 2 cores). It prints a markdown table and the command that made it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10)
    parser.add_argument("-n", default="2", help="pytest-xdist workers")
    args = parser.parse_args()
    from policybench.suites.metaworld_lerobot_tasks import LEROBOT_DIFFICULTY

    group_of = {task: group for group, tasks in LEROBOT_DIFFICULTY.items() for task in tasks}
    with tempfile.TemporaryDirectory() as reports:
        command = [
            sys.executable, "-m", "pytest",
            "benchmarks/test_metaworld_mt50.py::test_metaworld_mt50", "-p", "no:cacheprovider",
            "-q", "-n", args.n, f"--rollouts={args.rollouts}", f"--report-dir={reports}",
        ]  # fmt: skip
        subprocess.run(command, cwd=ROOT, capture_output=True, check=False)
        lines = (Path(reports) / "latest" / "results.jsonl").read_text().splitlines()
    solved: dict[str, list[bool]] = defaultdict(list)
    for record in map(json.loads, lines):
        solved[record["task"]].append(record["outcome"] == "solved")
    print("| task | group | solved | rate |\n|---|---|---|---|")
    for task in sorted(solved, key=lambda t: (list(LEROBOT_DIFFICULTY).index(group_of[t]), t)):
        won = solved[task]
        print(f"| {task} | {group_of[task]} | {sum(won)}/{len(won)} | {sum(won) / len(won):.0%} |")
    everything = [one for won in solved.values() for one in won]
    print(
        f"| all | | {sum(everything)}/{len(everything)} | {sum(everything) / len(everything):.1%} |"
    )
    print(f"\ncommand: python bench/mt50_experts.py {shlex.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
