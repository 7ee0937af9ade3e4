"""Whether a dependency change moves the numbers: each family run with its envs as installed and
under candidate pins (`--env-pins`, an arm of one run: the same scenes, the same policy; the
candidate's interpreter built on first use), with its experts where it has them and a seeded
random policy where it has none. A row per family and candidate: whether it loads (and why not),
how many scenes' trajectories part and from which step, the largest difference in an observation,
success under each and the paired exact McNemar test, and the verdict.

Run from the repository root in the test env (it needs the suites' extras):
    python bench/drift.py                       # every row below (20-40 minutes, most of it pip)
    python bench/drift.py --only metaworld       # the rows whose family contains the text
It prints a markdown table and the command that made it: docs/guides/drift.md holds its output.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (family, benchmark file and pytest arguments, candidate pin sets)
ROWS: tuple[tuple[str, list[str], tuple[str, ...]], ...] = (
    (
        "MetaWorld MT10, experts, 3 a task",
        ["benchmarks/test_metaworld.py", "--rollouts", "3"],
        (
            "mujoco==3.3.7",
            "mujoco==3.5.0",
            "mujoco==3.8.1",
            "mujoco==3.12.0",
            "mujoco==3.17.0",
            "mujoco==4.0.1",
            "numpy==1.26.4",
        ),
    ),
    (
        "gym-hil (state), seeded random, 5 a task",
        ["benchmarks/test_gym_hil.py", "-k", "not pixels", "--policy=random", "--rollouts", "5"],
        ("mujoco==3.3.7", "mujoco==3.5.0", "mujoco==4.0.1"),
    ),
    (
        "Franka Kitchen, seeded random, 1 a task",
        [
            "benchmarks/test_gymnasium_robotics.py",
            "-k",
            "kitchen",
            "--policy=random",
            "--rollouts",
            "1",
        ],
        ("mujoco==3.3.7", "mujoco==3.5.0", "mujoco==4.0.1"),
    ),
    (
        "ALOHA, seeded random, 1 a task",
        ["benchmarks/test_aloha.py", "--policy=random", "--rollouts", "1"],
        ("mujoco==3.3.7", "mujoco==4.0.1"),
    ),
    (
        "ManiSkill (state), its experts, 3 a task",
        [
            "benchmarks/test_maniskill.py",
            "-k",
            "(pick_cube or push_cube or stack_cube) and not rgb",
            "--rollouts",
            "3",
        ],
        ("sapien==3.0.2",),
    ),
    (
        "robosuite 1.5 (Lift, Door, Stack), seeded random, 2 a task",
        [
            "benchmarks/test_robosuite.py",
            "-k",
            "not golden and (lift or door or stack)",
            "--policy=random",
            "--rollouts",
            "2",
        ],
        ("mujoco==3.3.7", "mujoco==3.5.0", "mujoco==4.0.1"),
    ),
    (
        "LIBERO-Spatial on robosuite 1.4, seeded random, 1 a task",
        [
            "benchmarks/test_libero.py",
            "-k",
            "spatial and not lerobot",
            "--policy=random",
            "--rollouts",
            "1",
        ],
        ("mujoco==3.3.7", "mujoco==4.0.1"),
    ),
    (
        "LIBERO-PRO (spatial, objects perturbed, tasks 0-1), seeded random, 1 a task",
        [
            "benchmarks/test_libero_pro.py",
            "-k",
            "spatial_object and not golden and (task0 or task1)",
            "--policy=random",
            "--rollouts",
            "1",
        ],
        ("mujoco==3.3.7", "mujoco==4.0.1"),
    ),
    (
        "PushT, its heuristic, 10",
        ["benchmarks/test_pusht.py", "-k", "not dp", "--rollouts", "10"],
        ("pymunk==6.8.1", "pymunk==7.3.1"),
    ),
)


def run(arguments: list[str], pins: str, report_dir: Path) -> tuple[dict | None, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.setdefault("MUJOCO_GL", "egl")
    command = [sys.executable, "-m", "pytest", *arguments, "-n", "2", "-q", "-p",
               "no:cacheprovider", "--env-pins", pins, "--report-dir", str(report_dir)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    summary = report_dir / "latest" / "summary.json"
    if not summary.is_file():
        printed = (done.stdout + done.stderr).strip().splitlines() or ["nothing printed"]
        return None, printed[-1][:200]
    return json.loads(summary.read_text()), ""


def _why(said: str) -> str:
    """The error's message, not where it came from; for one without a message (a bare
    assert), the line that failed and its file."""
    text = " ".join(said.split())
    head, _, frames = text.partition(" [File")
    why = head.rpartition(": ")[2].strip()
    if (why and not why.endswith(":")) or not frames:
        return why[-160:]
    last = frames.rstrip("]").split(" | File ")[-1]
    where, _, code = last.partition(", in ")
    line = code.partition(" ")[2].split(" ^")[0].strip()
    source = where.split("/site-packages/")[-1].replace('"', "")
    return f"fails `{line}` in {source}"[-200:]


def row(family: str, pins: str, summary: dict | None, problem: str) -> str:
    if summary is None or not summary.get("drift"):
        return f"| {family} | {pins} | no: {problem or 'nothing ran'} | - | - | - | - | - |"
    cells = []
    for drift in summary["drift"]:
        if drift["verdict"] == "does not load":
            why = _why(str(drift["not_loaded"]))
            cells.append(f"| {family} | {pins} | no: {why} | - | - | - | - | does not load |")
            continue
        steps = drift["first_differing_steps"]
        scenes = drift["scenes"]
        largest = max(
            (max(s["largest_difference"].values(), default=0.0) for s in scenes), default=0.0
        )
        first = (
            f"{len(steps)}/{len(scenes)} from step {min(steps)}" if steps else f"0/{len(scenes)}"
        )
        moved = sum(s["success_steps"][0] != s["success_steps"][1] for s in scenes)
        p = "-" if drift["p_value"] is None else f"{drift['p_value']:.3g}"
        cells.append(
            f"| {family}: {drift['eval']} | {pins} | yes | {first} | {largest:.3g} | "
            f"{drift['solved'][0]}/{drift['pairs']} -> {drift['solved'][1]}/{drift['pairs']} "
            f"(step moved in {moved}) | {drift['lost']}/{drift['gained']}, p {p} | "
            f"{drift['verdict']} |"
        )
    return "\n".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="rows whose family contains this text")
    args = parser.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        for family, arguments, candidates in ROWS:
            if args.only.lower() not in family.lower():
                continue
            for index, pins in enumerate(candidates):
                summary, problem = run(arguments, pins, Path(folder) / f"{family[:8]}{index}")
                lines.append(row(family, pins, summary, problem))
                print(lines[-1], file=sys.stderr, flush=True)
    print(
        "| family (Eval) | candidate | loads | scenes that part | largest difference | success "
        "current -> candidate | lost/gained, McNemar | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print(f"command: python bench/drift.py {shlex.join(sys.argv[1:])}".rstrip())


if __name__ == "__main__":
    main()
