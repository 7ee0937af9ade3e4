"""Results at the scale teams keep them: `policybench history` over a year-like folder of runs
(first call, unchanged, one run added) and `policybench report html` of 2,000 and 20,000
rollouts, each timed as a ratio to parsing the same results (`json.loads` of every line) in the
same process, with that process's peak memory.

The folders are synthetic in their counts only: every rollout is a copy of a real MetaWorld
rollout's record (its trace too), made by a short real run first (or taken from --from RUN), with
its task, scene, outcome and steps varied (seeded). Each measurement runs in a process of its own.

Each row is measured --repeat times (5), each in a fresh process; the table shows the medians
and the ratios' spread (this machine's run-to-run noise is 10-20% on a 50 ms call).

Run from the repository root:  python bench/results_scale.py  (a few minutes at the defaults).
It prints a markdown table and the command that made it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = "history.sqlite"
TASKS = ("reach", "push", "pick-place", "door-open", "drawer-open", "drawer-close",
         "button-press-topdown", "peg-insert-side", "window-open", "window-close")  # fmt: skip
NODE = "benchmarks/test_metaworld.py::test_metaworld"
TARGETS = {  # the issue's: each ratio to parsing the same results, at most
    "history, unchanged folder": 0.5,
    "history, one run added": 3.0,
    "report html, 20,000 rollouts": 5.0,
}


def real_run(folder: Path) -> Path:
    """A real MetaWorld run of one rollout (reach), with its trace."""
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    command = [sys.executable, "-m", "pytest", "benchmarks/test_metaworld.py", "-k",
               "test_metaworld and reach and not golden", "--rollouts", "1", "-q", "-p",
               "no:cacheprovider", "--report-dir", str(folder)]  # fmt: skip
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    return (folder / "latest").resolve()


def synthetic_run(source: Path, out: Path, rollouts: int, seed: int, started: str) -> None:
    """A run folder of `rollouts` copies of `source`'s first record, varied."""
    record = json.loads((source / "results.jsonl").read_text().splitlines()[0])
    rng = random.Random(seed)
    rates = {task: 0.1 + 0.85 * i / (len(TASKS) - 1) for i, task in enumerate(TASKS)}
    out.mkdir(parents=True)
    trace = record.get("rollout_trace")
    if trace:
        (out / trace).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / trace, out / trace)
    with (out / "results.jsonl").open("w") as results:
        for i in range(rollouts):
            task, k = TASKS[i % len(TASKS)], i // len(TASKS)
            solved = rng.random() < rates[task]
            steps = rng.randrange(20, 150) if solved else 500
            results.write(json.dumps({
                **record, "task": task, "rollout_index": k,
                "nodeid": f"{NODE}[metaworld-mt10-{task}-{k}]",
                "scene": {**record.get("scene", {}), "task": task, "seed": k},
                "outcome": "solved" if solved else "unsolved", "steps": steps,
                "success_step": steps - 1 if solved else None,
            }, sort_keys=True) + "\n")  # fmt: skip
    info = json.loads((source / "run.json").read_text())
    info.update(run_id=out.name, started=started)
    (out / "run.json").write_text(json.dumps(info, indent=1))
    if (source / "summary.json").is_file():
        shutil.copyfile(source / "summary.json", out / "summary.json")


def measure(kind: str, target: str, parsed: list[str]) -> None:
    """In a process of its own: parse `parsed` results files, then run `kind` on `target`;
    prints both times and the peak memory as JSON."""
    from policybench.cli import main

    started = time.perf_counter()
    for path in parsed:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                json.loads(line)
    parse_s = time.perf_counter() - started
    started = time.perf_counter()
    command = ["history", target] if kind == "history" else ["report", "html", target]
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            code = main(command)
        finally:
            sys.stdout = stdout
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "parse_s": parse_s, "peak_mib": peak, "code": code}))


def timed(kind: str, target: Path, parsed: list[Path], repeat: int, before=None) -> dict:
    """`repeat` measurements, each in a fresh process (`before` run ahead of each): the median
    of each figure, the ratios' spread, and the highest peak."""
    found = []
    for _ in range(repeat):
        if before is not None:
            before()
        command = [sys.executable, __file__, "--measure", kind, str(target), *map(str, parsed)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    ratios = [f["seconds"] / f["parse_s"] for f in found]
    return {
        "seconds": statistics.median(f["seconds"] for f in found),
        "parse_s": statistics.median(f["parse_s"] for f in found),
        "ratio": statistics.median(ratios),
        "spread": (min(ratios), max(ratios)),
        "peak_mib": max(f["peak_mib"] for f in found),
    }


def row(what: str, found: dict, largest_mb: float, extra: str = "") -> str:
    ratio, (low, high) = found["ratio"], found["spread"]
    target = TARGETS.get(what)
    verdict = "-" if target is None else ("yes" if ratio <= target else "NO")
    memory_ok = "yes" if found["peak_mib"] <= 2 * largest_mb + 200 else "NO"
    return (
        f"| {what} | {found['seconds']:.3f} s | {found['parse_s']:.3f} s | {ratio:.2f}x "
        f"({low:.2f}-{high:.2f}) | {'-' if target is None else f'{target:g}x'} {verdict} | "
        f"{found['peak_mib']:.0f} MiB ({memory_ok}) | {extra} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs in the history folder")
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts a run")
    parser.add_argument("--large", type=int, default=20000, help="rollouts of the large report")
    parser.add_argument("--from", dest="source", type=Path, help="a real run to copy records of")
    parser.add_argument("--repeat", type=int, default=5,
                        help="measurements of each row, each in a process of its own: their "
                        "medians are shown, and the ratios' spread")  # fmt: skip
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure[0], args.measure[1], args.measure[2:])
        return
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        source = args.source or real_run(work / "real")
        folder = work / "history"
        for k in range(args.runs):
            night = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=k)
            synthetic_run(source, folder / f"run-{k:04d}", args.rollouts, k, night.isoformat())
        files = sorted(folder.glob("*/results.jsonl"))
        largest = max(f.stat().st_size for f in files) / 2**20
        total = sum(f.stat().st_size for f in files) / 2**20
        store = folder / STORE
        first = timed("history", folder, files, args.repeat, lambda: store.unlink(missing_ok=True))
        lines = [
            row(f"history, first call ({args.runs} runs x {args.rollouts:,})", first, largest,
                f"{total:.0f} MB of results"),
            row("history, unchanged folder", timed("history", folder, files, args.repeat),
                largest),
        ]  # fmt: skip
        kept = work / "store-before-the-run-added"
        shutil.copyfile(store, kept)  # each measurement adds the run to this store
        added = folder / f"run-{args.runs:04d}"
        synthetic_run(source, added, args.rollouts, args.runs, "2027-12-31T00:00:00+00:00")
        found = timed("history", folder, [added / "results.jsonl"], args.repeat,
                      lambda: shutil.copyfile(kept, store))  # fmt: skip
        lines.append(row("history, one run added", found, largest))
        for count in (2000, args.large):
            run = work / f"report-{count}"
            synthetic_run(source, run, count, 7, "2026-06-01T00:00:00+00:00")
            found = timed("report", run, [run / "results.jsonl"], args.repeat)
            size = (run / "index.html").stat().st_size / 2**20
            pages = len(list((run / "rollouts").glob("*.html")))
            mb = (run / "results.jsonl").stat().st_size / 2**20
            lines.append(row(f"report html, {count:,} rollouts", found, mb,
                             f"index.html {size:.2f} MB, {pages:,} rollout pages"))  # fmt: skip
    print(
        f"| what | policybench (median of {args.repeat}) | parsing the same results | ratio "
        "(spread) | target | peak memory (within 2x the largest results file + 200 MB) | |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print(f"command: python bench/results_scale.py {shlex.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
