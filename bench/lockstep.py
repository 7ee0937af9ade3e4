"""Batched-first rollouts in one process: PushT with a random-init ACT checkpoint, rollouts/s with
`--envs-per-worker K` (K rollouts side by side, one batched forward per step) at K = 1, 4, 8 on
`-n 0`, against `-n 2` with a model per worker; and whether every run's outcomes equal K = 1's.

    python bench/lockstep.py [--rollouts 16] [--slots 1,4,8] [--size small|default]
                             [--n-action-steps 10] [--threads 1] [--policy-device cpu]

Run it where LeRobot is installed (`tox -e lerobot` builds such an env). `--size default` is
LeRobot's own ACT (ResNet-18, 512 wide; random weights), `small` the tests' one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PUSHT_STATS = {
    "observation.image": {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3},
    "observation.state": {"mean": [256.0, 256.0], "std": [100.0, 100.0]},
    "action": {"mean": [256.0, 256.0], "std": [100.0, 100.0]},
}
# LeRobot's ACT defaults, spelled out so that `--size default` does not take the tests' sizes.
DEFAULT_ACT = {
    "dim_model": 512,
    "n_heads": 8,
    "dim_feedforward": 3200,
    "n_encoder_layers": 4,
    "n_decoder_layers": 1,
    "n_vae_encoder_layers": 4,
}


def build_checkpoint(directory: Path, size: str, n_action_steps: int) -> Path:
    from policybench.policy.lerobot_checkpoints import save_random_checkpoint

    sizes = DEFAULT_ACT if size == "default" else {}
    return save_random_checkpoint(
        directory,
        {"observation.image": (3, 96, 96)},
        2,
        2,
        PUSHT_STATS,
        chunk_size=max(20, n_action_steps),
        n_action_steps=n_action_steps,
        **sizes,
    )


def run(checkpoint: Path, out: Path, rollouts: int, args: list[str], env: dict) -> dict:
    command = [sys.executable, "-m", "pytest", "benchmarks/test_pusht.py", "-q"]
    command += ["-p", "no:cacheprovider", f"--policy=lerobot:{checkpoint}"]
    command += [f"--rollouts={rollouts}", f"--report-dir={out}", *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    lines = (out / "latest" / "results.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["scene"]["seed"])
    return {
        "command": " ".join(command[2:]),
        "wall_s": wall,
        "outcomes": [(r["outcome"], r["steps"]) for r in records],
        "sum_rewards": [r["sum_reward"] for r in records],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--slots", default="1,4,8", help="values of --envs-per-worker at -n 0")
    parser.add_argument("--size", choices=("small", "default"), default="default")
    parser.add_argument("--n-action-steps", type=int, default=10)
    parser.add_argument("--threads", default="1", help="torch threads (OMP_NUM_THREADS)")
    parser.add_argument(
        "--policy-device",
        default="cpu",
        help="every run's --policy-device: cpu (native kernels, answers independent of the "
        "batch) or cpu-onednn (lerobot-eval's, faster at batch > 1)",
    )
    args = parser.parse_args()
    device = [f"--policy-device={args.policy_device}"]
    work = Path(tempfile.mkdtemp(prefix="bench-lockstep-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": args.threads}
    env["PYTHONPATH"] = str(REPO)
    checkpoint = build_checkpoint(work / "act-pusht", args.size, args.n_action_steps)

    runs: list[tuple[str, dict]] = []
    for slots in (int(k) for k in args.slots.split(",")):
        name = f"-n 0 --envs-per-worker {slots}"
        extra = ["-n", "0", f"--envs-per-worker={slots}", *device]
        runs.append((name, run(checkpoint, work / f"k{slots}", args.rollouts, extra, env)))
        print(f"ran {name}", file=sys.stderr)
    name = "-n 2 (a model per worker)"
    extra = ["-n", "2", "--policy-sharing=per-worker", *device]
    runs.append((name, run(checkpoint, work / "n2", args.rollouts, extra, env)))
    print(f"ran {name}", file=sys.stderr)

    reference = runs[0][1]
    print(
        f"\nPushT, random-init ACT ({args.size} size, n_action_steps {args.n_action_steps}), "
        f"{args.rollouts} rollouts, torch threads {args.threads}, {args.policy_device}, wall "
        "time of the whole command"
    )
    print(
        "| run | wall s | rollouts/s | vs first row | outcomes and steps equal to the first "
        "row's | largest sum-reward difference |"
    )
    print("|---|---|---|---|---|---|")
    for name, found in runs:
        rate = args.rollouts / found["wall_s"]
        ratio = reference["wall_s"] / found["wall_s"]
        same = "yes" if found["outcomes"] == reference["outcomes"] else "NO"
        pairs = zip(found["sum_rewards"], reference["sum_rewards"], strict=True)
        worst = max(abs(a - b) for a, b in pairs)
        wall = found["wall_s"]
        print(f"| {name} | {wall:.1f} | {rate:.2f} | {ratio:.2f}x | {same} | {worst:.1e} |")
    print("\ncommands:")
    for name, found in runs:
        print(f"  {name}: {found['command']}")
    print(f"\nmade by: python bench/lockstep.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
