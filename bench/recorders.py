"""What a run keeps for later, and what it costs each rollout: one Eval of each kind (state:
MetaWorld MT10's reach; image: PushT; isolated: robomimic's Lift in its own interpreter, where
`policybench env install robomimic` built it) run under a policy that is not the expert, with each
recorder on and off, the settings interleaved round by round in one run of this script. A
setting's cost is the sum of its rollouts' test times (pytest's per-item setup, call and
teardown, from --junitxml: the rollout, its recorders and its trace written), the run's start
left out; each recorder's cost is printed as a ratio to the same run without it.

Recorders: traces (per step: actions, rewards, model calls, small state vectors, each image's
motion; `--no-rollout-traces` turns them off), the observations the Eval's expert reads, kept for
a diagnosis to replay it on after the run (the first rollout of each task, the default;
`--expert-shadow all`, every rollout; `0`, none), videos when asked (`--record-video`). The
expert itself runs only in a diagnosis, after the rollouts: not in these times. The preflight's
image probes are once per Eval and run, not per rollout.

`--interleaved` measures the traces the other way, in one run an Eval: its rollouts take bare and
traces in turn, item by item (bench/interleave.py), so both settings meet the same machine at the
same moment; the run's first rollout warms up and is not counted.

Run from the repository root:  python bench/recorders.py  (about ten minutes at the defaults).
It prints a markdown table and the command that made it.
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
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVALS = {  # kind -> (benchmark file, -k selection, label, rollouts: the plan users run)
    "state": ("benchmarks/test_metaworld.py", "test_metaworld and reach and not golden",
              "metaworld-mt10 reach-v3", 10),
    "image": ("benchmarks/test_pusht.py", "test_pusht and not golden", "pusht", 50),
    "isolated": ("benchmarks/test_robomimic.py", "lift and not golden", "robomimic-lift", 1),
}  # fmt: skip
SETTINGS = {  # name -> the options that make it
    "bare": ["--no-rollout-traces", "--expert-shadow", "0"],
    "traces": ["--expert-shadow", "0"],
    "default": [],
    "shadow-all": ["--expert-shadow", "all"],
    "video": ["--record-video"],
}
ISOLATED = ("bare", "traces", "default")  # a rollout is ~40 s of software rendering: one a task
COSTS = (  # what a row says: (recorder, setting with it, setting without it)
    ("traces (states, motion, calls)", "traces", "bare"),
    ("observations kept for the expert, first rollout a task (default)", "default", "traces"),
    ("the default set (traces + kept observations)", "default", "bare"),
    ("observations kept for the expert, every rollout", "shadow-all", "traces"),
    ("video (--record-video, when asked)", "video", "default"),
)


def timed(
    kind: str, setting: str, rollouts: int | None, policy: str, work: Path
) -> tuple[float, float]:
    """Seconds the rollouts of one run took, summed over its test items: wall (pytest's
    durations) and the pytest process's CPU time (bench/item_cpu.py)."""
    path, select, _, planned = EVALS[kind]
    rollouts = rollouts or planned
    stem = f"{kind}-{setting.replace(' ', '_').replace(',', '')}"
    report, cpu = work / f"{stem}.xml", work / f"{stem}.cpu.jsonl"
    cpu.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", path, "-k", select, "--rollouts", str(rollouts),
               f"--policy={policy}", "--report-dir", str(work / "reports"), "-q",
               "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "item_cpu",
               "--junitxml", str(report), *SETTINGS[setting]]  # fmt: skip
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
           "POLICYBENCH_ITEM_CPU": str(cpu),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"),
                                                       os.environ.get("PYTHONPATH")]))}  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    cases = ET.parse(report).getroot().iter("testcase")
    wall = sum(float(case.get("time", 0.0)) for case in cases)
    lines = cpu.read_text().splitlines() if cpu.exists() else []
    return wall, sum(json.loads(line)["cpu_s"] for line in lines)


INTERLEAVED = {"state": 41, "image": 61, "isolated": 11}  # rollouts in one interleaved run
INTERLEAVED_SETTINGS = ("bare", "traces")  # what a rollout pays each time; keeping, once a task


def interleaved(kind: str, policy: str, work: Path) -> dict[str, tuple[float, float, int]]:
    """One run of the Eval of `kind`, its rollouts taking bare and traces in turn after the
    first (bench/interleave.py): per setting, the mean wall and CPU seconds of a rollout, and
    how many ran it."""
    path, select, _, _ = EVALS[kind]
    cpu = work / f"{kind}-interleaved.jsonl"
    cpu.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", path, "-k", select, "--rollouts",
               str(INTERLEAVED[kind]), f"--policy={policy}", "--report-dir",
               str(work / "reports"), "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "-p", "interleave"]  # fmt: skip
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
           "POLICYBENCH_ITEM_CPU": str(cpu),
           "POLICYBENCH_INTERLEAVE": ",".join(INTERLEAVED_SETTINGS),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"),
                                                       os.environ.get("PYTHONPATH")]))}  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    items = [json.loads(line) for line in cpu.read_text().splitlines()]
    found = {}
    for setting in INTERLEAVED_SETTINGS:
        mine = [i for i in items if i["setting"] == setting]
        found[setting] = (
            statistics.fmean(i["wall_s"] for i in mine),
            statistics.fmean(i["cpu_s"] for i in mine),
            len(mine),
        )
    return found


def print_interleaved(kinds: list[str], policy: str, work: Path) -> None:
    print("| Eval | recorder | rollouts with, without | with | without | cost, share of a "
          "rollout's wall time | CPU time: with, without, share | within 5% |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        found = interleaved(kind, policy, work)
        for recorder, with_it, without in COSTS[:1]:
            (on, cpu_on, n_on), (off, cpu_off, n_off) = found[with_it], found[without]
            share, cpu_share = on / off - 1.0, cpu_on / cpu_off - 1.0
            verdict = "yes" if share <= 0.05 else "NO"
            print(f"| {EVALS[kind][2]} | {recorder} | {n_on}, {n_off} | {1e3 * on:.0f} ms | "
                  f"{1e3 * off:.0f} ms | {100 * share:+.1f}% | {1e3 * cpu_on:.0f} ms, "
                  f"{1e3 * cpu_off:.0f} ms, {100 * cpu_share:+.1f}% | {verdict} |")  # fmt: skip


def installed(kind: str) -> bool:
    """Whether the Eval of `kind` can run here (the isolated one needs its interpreter built)."""
    if kind != "isolated":
        return True
    from policybench.envserver.command import isolated_interpreter
    from policybench.envserver.interpreters import InterpreterMissing, python_of
    from policybench.suites import eval_named

    try:
        python_of(isolated_interpreter(eval_named("robomimic-lift")))
    except InterpreterMissing:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, help="rollouts a task (default: each Eval's, "
                        "10, 50 and 1: LeRobot evaluates PushT on 50)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every setting")
    parser.add_argument("--policy", default="random", help="the policy driving (not the expert)")
    parser.add_argument("--kinds", default="state,image,isolated")
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help="of those below, comma-separated"
    )
    parser.add_argument("--interleaved", action="store_true",
                        help="traces against bare, rollout by rollout, in one run")  # fmt: skip
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if installed(k)]
    if args.interleaved:
        with tempfile.TemporaryDirectory() as scratch:
            print_interleaved(kinds, args.policy, Path(scratch))
        print(f"command: python bench/recorders.py {shlex.join(sys.argv[1:])}".rstrip())
        return
    found: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            for kind in kinds:
                for setting in [s for s in args.settings.split(",") if s in SETTINGS]:
                    if kind == "isolated" and setting not in ISOLATED:
                        continue
                    seconds = timed(kind, setting, args.rollouts, args.policy, Path(scratch))
                    found.setdefault((kind, setting), []).append(seconds)
    print("| Eval | recorder | with | without | cost, share of the rollouts' wall time | "
          "CPU time: with, without, share | within 5% |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for kind in kinds:
        for recorder, with_it, without in COSTS:
            if (kind, with_it) not in found or (kind, without) not in found:
                continue
            runs_on, runs_off = found[(kind, with_it)], found[(kind, without)]
            on, off = (
                statistics.median(w for w, _ in runs_on),
                statistics.median(w for w, _ in runs_off),
            )
            cpu_on = statistics.median(c for _, c in runs_on)
            cpu_off = statistics.median(c for _, c in runs_off)
            share = on / off - 1.0
            cpu_share = cpu_on / cpu_off - 1.0 if cpu_off else float("nan")
            verdict = "-" if "every" in recorder or "video" in recorder else (
                "yes" if share <= 0.05 else "NO"
            )  # fmt: skip
            print(f"| {EVALS[kind][2]} | {recorder} | {on:.2f} s | {off:.2f} s | "
                  f"{100 * share:+.1f}% | {cpu_on:.2f} s, {cpu_off:.2f} s, "
                  f"{100 * cpu_share:+.1f}% | {verdict} |")  # fmt: skip
    skipped = sorted(set(args.kinds.split(",")) - set(kinds))
    if skipped:
        print(f"not run: {', '.join(skipped)} (policybench env install robomimic builds it)")
    print(f"command: python bench/recorders.py {shlex.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
