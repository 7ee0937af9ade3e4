"""The history gate's error rates, simulated with the project's own store and comparison code
(tests/history_sim.py: MT10's shape, task rates 0.1 to 0.95, the same scenes every night): the
gate as it is (the newest run against the line's reference at ALPHA/50 a call) beside the one it
replaced (against the best of the last 5 runs at ALPHA), for an unchanged policy (false alarms
per call and in sequences of 10, 20 and 50 nightly calls) and for a drop of 0.2 on every task
(power: caught at the first call after the drop, and the power the gate states).

Run from the repository root:  python bench/history_gate.py  (a few minutes at the defaults).
It prints a markdown table and the command that made it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policybench.report.history_gate import CALLS, DROP
from tests.history_sim import Line, records_of

ALPHA = 0.05
WINDOW = 5  # the replaced gate's: the best of the last 5 comparable runs
SEQUENCE = 50


def sequences(line: Line, rng: np.random.Generator, per_task: int, count: int) -> dict:
    """`count` sequences of SEQUENCE nightly calls of an unchanged policy, under both gates: the
    index of each sequence's first false alarm (None: none) and the alarms per call."""
    first = {"reference": [], "best of 5": []}
    alarms = {"reference": 0, "best of 5": 0}
    for _ in range(count):
        runs = [line.add(records_of(rng, per_task))]
        seen = {"reference": None, "best of 5": None}
        for k in range(1, SEQUENCE + 1):
            newest = line.add(records_of(rng, per_task))
            best = max(runs[-WINDOW:], key=lambda p: (p.rate, p.rollouts))
            for design, against, level in (
                ("reference", runs[0], ALPHA / CALLS),
                ("best of 5", best, ALPHA),
            ):
                if line.call(against, newest, k, level).regressed:
                    alarms[design] += 1
                    seen[design] = seen[design] or k
            runs.append(newest)
        for design in first:
            first[design].append(seen[design])
    return {"first": first, "per_call": {d: a / (count * SEQUENCE) for d, a in alarms.items()}}


def power(line: Line, rng: np.random.Generator, per_task: int, count: int) -> dict:
    caught = {"reference": 0, "best of 5": 0}
    stated = []
    for _ in range(count):
        runs = [line.add(records_of(rng, per_task)) for _ in range(WINDOW)]
        newest = line.add(records_of(rng, per_task, DROP))
        call = line.call(runs[0], newest, WINDOW, ALPHA / CALLS)
        caught["reference"] += call.regressed
        stated.append(call.power)
        best = max(runs, key=lambda p: (p.rate, p.rollouts))
        caught["best of 5"] += line.call(best, newest, WINDOW, ALPHA).regressed
    return {"caught": {d: c / count for d, c in caught.items()}, "stated": float(np.mean(stated))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=150)
    parser.add_argument("--power-trials", type=int, default=200)
    parser.add_argument("--sizes", default="3,5,10", help="rollouts per task (MT10)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        line = Line(Path(folder))
        for per_task in (int(s) for s in args.sizes.split(",")):
            seq = sequences(line, rng, per_task, args.sequences)
            pw = power(line, rng, per_task, args.power_trials)
            for design in ("reference", "best of 5"):
                first = seq["first"][design]

                def within(n: int, first: list = first) -> str:
                    return f"{sum(f is not None and f <= n for f in first) / len(first):.1%}"

                stated = f"{pw['stated']:.2f}" if design == "reference" else "-"
                rows.append(
                    f"| MT10 x {per_task} | {design} | {seq['per_call'][design]:.2%} | "
                    f"{within(10)} | {within(20)} | {within(50)} | {pw['caught'][design]:.2f} | "
                    f"{stated} |"
                )
    print(
        "| plan | gate | false alarms a call | any in 10 calls | any in 20 | any in 50 | "
        f"{DROP:.0%} drop caught | power stated |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        f"\n{args.sequences} sequences of {SEQUENCE} calls and {args.power_trials} drops per plan; "
        f"reference: level {ALPHA}/{CALLS}; best of 5: level {ALPHA}"
    )
    print(f"command: python bench/history_gate.py {shlex.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
