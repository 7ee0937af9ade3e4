"""Fidelity and speed against lerobot-eval: one random-init checkpoint on one suite, the same
seeds, no latency; prints per-seed equality of sum reward and success, both tools' success rate,
mean sum reward and wall time.

    python bench/vs_lerobot_eval.py [--env pusht|aloha|metaworld|libero]
                                    [--policy-type act|diffusion] [--episodes 20]
                                    [--seed 1000] [--checkpoint DIR]
                                    [--batch-sizes 1,2,5,10] [--async-batch-sizes 2]
                                    [--threads 1]
                                    [--policybench-runs n0,shared,per-worker,lockstep,
                                                        lockstep-onednn,n0-onednn]

Run it where LeRobot and the suite are installed (`tox -e lerobot` builds such an env). Suites,
as both tools run them:
- pusht: gym-pusht, 300 steps; env i seeded S + i by both.
- aloha: gym-aloha TransferCube, 400 steps, top camera 480x640; env i seeded S + i by both.
- metaworld: LeRobot's MetaWorld env (reach-v3, corner2 480x480 flipped, 500 steps) and
  policybench's `metaworld-mt10-lerobot-0.4` protocol (LeRobot 0.4.4's, the LeRobot installed
  here); lerobot-eval seeds numpy's global generator with S and each reset draws the next
  placement, which policybench's draw i reproduces (equal
  only with --batch-sizes 1 and while no episode succeeds: a success resets LeRobot's env once
  more).
- libero: libero_spatial task 0 under policybench's `libero_spatial-lerobot` protocol; needs
  LIBERO's assets in both envs.
Both tools end an episode at the first success or at the step limit and sum the env's rewards.
lerobot-eval in a batch that runs on after an episode ends also counts the reward of the step
after the end (its mask keeps `done_index + 1`); the table flags runs where that can apply.
Diffusion Policy samples: lerobot-eval draws its noise from torch's global generator, shared by
the batch, policybench from a generator per rollout, so their sampled rollouts differ (equal
answers for equal generator state are shown by tests/test_lerobot_history.py).
policybench runs torch's native CPU kernels, lerobot-eval oneDNN's, whose results differ in the
5th digit and depend on batch size and thread count; the `n0-onednn` run uses oneDNN too
(`--policy-device=cpu-onednn`) and equals lerobot-eval's batch_size=1 run at the same --threads.
Wall time is the whole command (start-up included) for both; CPU time is its whole process
tree's, user + system, so more than the wall where a tool keeps several cores busy. lerobot-eval
also renders the mp4s of up to 10 episodes, which it always does. It steps a batch's envs in its
one process (`--eval.use_async_envs=true`, a process per env, fails in LeRobot 0.4.4: its env
check reads `AsyncVectorEnv.envs`); the last line is policybench -n 2's best wall time over
lerobot-eval's best, the issue's speed target (<= 0.5).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE_STATS = {
    "mean": [[[0.5]]] * 3,
    "std": [[[0.25]]] * 3,
    "min": [[[0.0]]] * 3,
    "max": [[[1]]] * 3,
}


def vector_stats(width: int, mean: float, std: float) -> dict[str, list[float]]:
    return {
        "mean": [mean] * width,
        "std": [std] * width,
        "min": [mean - 2 * std] * width,
        "max": [mean + 2 * std] * width,
    }


@dataclass(frozen=True)
class Suite:
    """One suite as both tools run it."""

    lerobot_env: tuple[str, ...]  # lerobot-eval's --env.* arguments
    module: str  # the policybench benchmark module (declares `evaluate`)
    select: str  # -k expression choosing the task
    image: str
    image_shape: tuple[int, int, int]
    state: int
    action: int
    scale: float  # the actions' scale (state and action stats)


SUITES = {
    "pusht": Suite(
        ("--env.type=pusht",),
        "from policybench.suites.pusht import PUSHT as EVAL",
        "push-t",
        "observation.image",
        (3, 96, 96),
        2,
        2,
        100.0,
    ),
    "aloha": Suite(
        ("--env.type=aloha", "--env.task=AlohaTransferCube-v0"),
        "from policybench.suites.aloha import ALOHA as EVAL",
        "transfer_cube",
        "observation.images.top",
        (3, 480, 640),
        14,
        14,
        0.5,
    ),
    "metaworld": Suite(
        ("--env.type=metaworld", "--env.task=reach-v3"),
        "from policybench.suites.metaworld import MT10_LEROBOT_04 as EVAL",
        "reach-v3",
        "observation.image",
        (3, 480, 480),
        4,
        4,
        0.5,
    ),
    "libero": Suite(
        ("--env.type=libero", "--env.task=libero_spatial", "--env.task_ids=[0]"),
        "from policybench.suites.libero import LIBERO_SPATIAL_LEROBOT as EVAL",
        "task0/",
        "observation.images.image",
        (3, 256, 256),
        8,
        7,
        0.5,
    ),
}
BENCHMARK = """import policybench
{module}


@policybench.parametrize(EVAL)
def test_suite(rollout, harness):
    harness(rollout)
"""


def build_checkpoint(directory: Path, suite: Suite, policy_type: str) -> Path:
    from policybench.policy.lerobot_checkpoints import save_random_checkpoint

    images = {suite.image: suite.image_shape}
    if suite.image == "observation.images.image":  # LIBERO: both cameras
        images["observation.images.image2"] = suite.image_shape
    stats = {name: IMAGE_STATS for name in images}
    stats["observation.state"] = vector_stats(suite.state, 0.0, suite.scale)
    stats["action"] = vector_stats(suite.action, 0.0, suite.scale)
    if suite.state == 2:  # PushT: positions in [0, 512]
        stats["observation.state"] = stats["action"] = vector_stats(2, 256.0, 100.0)
    return save_random_checkpoint(
        directory, images, suite.state, suite.action, stats, policy_type=policy_type
    )


class RunFailed(Exception):
    """A tool's run exited with an error; the other runs go on and the table says so."""


def cpu_of_children() -> float:
    """CPU seconds (user + system) of the waited-for child processes and their descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The command's wall time and the CPU time of its whole process tree, in seconds."""
    started, cpu = time.perf_counter(), cpu_of_children()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout[-3000:] + done.stderr[-3000:]).strip()
        raise RunFailed(f"{' '.join(command)} exited {done.returncode}:\n{tail}")
    return time.perf_counter() - started, cpu_of_children() - cpu


def lerobot_eval(
    suite: Suite, checkpoint: Path, out: Path, n: int, seed: int, batch: int, env, many: bool
):
    """lerobot-eval at `batch` envs, stepped in one process or (`many`) one process each."""
    command = [
        str(Path(sys.executable).with_name("lerobot-eval")),
        f"--policy.path={checkpoint}",
        *suite.lerobot_env,
        f"--eval.batch_size={batch}",
        f"--eval.use_async_envs={'true' if many else 'false'}",
        f"--eval.n_episodes={n}",
        f"--seed={seed}",
        "--policy.device=cpu",
        "--policy.use_amp=false",
        f"--output_dir={out}",
    ]
    wall, cpu = timed(command, env)
    metrics = json.loads((out / "eval_info.json").read_text())["per_task"][0]["metrics"]
    return {
        "command": " ".join(command),
        "wall_s": wall,
        "cpu_s": cpu,
        "success": [bool(s) for s in metrics["successes"]],
        "sum_reward": metrics["sum_rewards"],
    }


def policybench(suite: Suite, checkpoint: Path, out: Path, n: int, seed: int, args, env):
    out.mkdir(parents=True)
    module = out / "test_vs_lerobot_eval.py"
    module.write_text(BENCHMARK.format(module=suite.module))
    command = [sys.executable, "-m", "pytest", str(module), "-q", "-k", suite.select]
    # hypothesis (in the env for policybench's own tests, not a dependency of a run) loads its
    # pytest plugin in every process: 0.9 s each here.
    command += ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    command += [f"--policy=lerobot:{checkpoint}"]
    command += [f"--rollouts={n}", f"--seed={seed}", f"--report-dir={out}", *args]
    wall, cpu = timed(command, env)
    lines = (out / "latest" / "results.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["scene"]["seed"])
    return {
        "command": " ".join(command[2:]),
        "wall_s": wall,
        "cpu_s": cpu,
        "success": [r["outcome"] == "solved" for r in records],
        "sum_reward": [r["sum_reward"] for r in records],
        "steps": [r["steps"] for r in records],
    }


RUNS = {
    "n0": ("policybench -n 0", ["-n", "0"]),
    "shared": ("policybench -n 2 (shared server)", ["-n", "2"]),
    "per-worker": (
        "policybench -n 2 (model per worker)",
        ["-n", "2", "--policy-sharing=per-worker"],
    ),
    # Batched inference in each worker, as lerobot-eval batches its vector env's: K rollouts side
    # by side, K = {slots} (up to 8, and no more than half the episodes, so both workers get some).
    "lockstep": (
        "policybench -n 2 (K={slots} side by side)",
        ["-n", "2", "--policy-sharing=per-worker", "--envs-per-worker={slots}"],
    ),
    # ... with lerobot-eval's kernels, which batch better on CPU (2-3x per sample at batch 8 on
    # this ACT) but answer a rollout by what it is batched with.
    "lockstep-onednn": (
        "policybench -n 2 (K={slots} side by side, oneDNN)",
        [
            "-n",
            "2",
            "--policy-sharing=per-worker",
            "--envs-per-worker={slots}",
            "--policy-device=cpu-onednn",
        ],
    ),
    # lerobot-eval's kernels: equal to its batch_size=1 run at the same --threads.
    "n0-onednn": ("policybench -n 0 (cpu-onednn)", ["-n", "0", "--policy-device=cpu-onednn"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=sorted(SUITES), default="pusht")
    parser.add_argument("--policy-type", choices=("act", "diffusion"), default="act")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--checkpoint", type=Path, default=None, help="default: a random one")
    parser.add_argument("--batch-sizes", default="1,2,5,10", help="lerobot-eval batch sizes")
    parser.add_argument(
        "--async-batch-sizes",
        default="",
        help="lerobot-eval batch sizes with --eval.use_async_envs=true, a process per env "
        "(lerobot-eval 0.4.4 fails there: its env check reads AsyncVectorEnv.envs)",
    )
    parser.add_argument("--threads", default="1", help="OMP_NUM_THREADS for both tools")
    parser.add_argument(
        "--policybench-runs", default="n0,shared,per-worker", help=f"of {', '.join(RUNS)}"
    )
    args = parser.parse_args()
    suite = SUITES[args.env]
    work = Path(tempfile.mkdtemp(prefix="vs-lerobot-eval-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": args.threads}
    env["PYTHONPATH"] = str(REPO)
    checkpoint = args.checkpoint or build_checkpoint(work / "checkpoint", suite, args.policy_type)
    n, seed = args.episodes, args.seed

    runs: list[tuple[str, dict]] = []
    failed: list[tuple[str, str]] = []

    def attempt(name: str, run: Callable[[], dict]) -> None:
        try:
            runs.append((name, run()))
        except RunFailed as error:
            failed.append((name, str(error).splitlines()[-1]))
            print(f"{name} failed: {error}", file=sys.stderr)
        else:
            print(f"ran {name}", file=sys.stderr)

    batches = [(int(b), False) for b in args.batch_sizes.split(",") if b]
    batches += [(int(b), True) for b in args.async_batch_sizes.split(",") if b]
    for batch, many in batches:
        name = f"lerobot-eval batch_size={batch}{' async' if many else ''}"
        out = work / f"le-{batch}{'-async' if many else ''}"
        attempt(name, partial(lerobot_eval, suite, checkpoint, out, n, seed, batch, env, many))
    slots = str(max(1, min(8, n // 2)))
    for run in args.policybench_runs.split(","):
        name, extra = RUNS[run]
        name, extra = name.format(slots=slots), [arg.format(slots=slots) for arg in extra]
        out = work / f"pb-{run}"
        attempt(name, partial(policybench, suite, checkpoint, out, n, seed, extra, env))

    if not runs:
        raise SystemExit("no run finished: " + "; ".join(f"{n}: {why}" for n, why in failed))
    # Compared with the first run: lerobot-eval's first batch size (policybench's first run when
    # lerobot-eval was not run).
    reference = runs[0][1]
    print(
        f"\n{args.env}, random-init {args.policy_type} {checkpoint}, {n} episodes, "
        f"seeds {seed}..{seed + n - 1}"
    )
    print(
        f"{'run':44} {'wall s':>7} {'cpu s':>7} {'eps/s':>6} {'success':>8} "
        f"{'mean sum reward':>16} "
        f"{'max |diff| vs 1st run':>21} {'per-seed equal (1e-6)':>22}"
    )
    for name, run in runs:
        pairs = list(zip(run["sum_reward"], reference["sum_reward"], strict=True))
        diff = max(abs(a - b) for a, b in pairs)
        # lerobot-eval sums the rewards in its own order: sums agree to rounding, not bits.
        close = all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) for a, b in pairs)
        equal = run["success"] == reference["success"] and close
        print(
            f"{name:44} {run['wall_s']:7.1f} {run['cpu_s']:7.1f} {n / run['wall_s']:6.2f} "
            f"{sum(run['success']) / n:8.1%} {sum(run['sum_reward']) / n:16.6f} "
            f"{diff:21.2e} {'yes' if equal else 'no':>22}"
        )
    for name, why in failed:
        print(f"{name:44} failed: {why}")
    walls = {
        tool: min((run["wall_s"] for name, run in runs if name.startswith(tool)), default=None)
        for tool in ("lerobot-eval", "policybench -n 2")
    }
    if None not in walls.values():
        print(
            f"speed: policybench -n 2's best wall / lerobot-eval's best = "
            f"{walls['policybench -n 2']:.1f} / {walls['lerobot-eval']:.1f} s = "
            f"{walls['policybench -n 2'] / walls['lerobot-eval']:.2f} (target <= 0.5)"
        )
    if any(any(run["success"]) for _, run in runs):
        print(
            "note: an episode succeeded; lerobot-eval's batches > 1 may add one more step's reward"
        )
    print("\ncommands:")
    for _, run in runs:
        print(f"  {run['command']}")
    print(f"  made by: python bench/vs_lerobot_eval.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
