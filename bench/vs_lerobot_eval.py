"""Fidelity and speed against lerobot-eval: one random-init ACT checkpoint on PushT, the same seeds
S..S+N-1, no latency; prints both tools' success rate, mean sum reward and wall time.

    python bench/vs_lerobot_eval.py [--episodes 20] [--seed 1000] [--checkpoint DIR]
                                    [--batch-sizes 1,2,5,10] [--threads 1]

Run it where LeRobot is installed (`tox -e lerobot` builds such an env, or
`pip install -e '.[lerobot,pusht,test]'`). Both tools end an episode at the first success or after
300 steps (LeRobot's PushT `episode_length`, gym-pusht's limit), seed env i with S + i, and sum
the env's rewards up to the end of the episode. One difference in lerobot-eval's accounting: in a
batch that keeps running after an episode ends, it also counts the reward of the step after the
end (its mask keeps `done_index + 1`, which is the auto-reset episode's first step); the table
flags runs where that can apply (a success before the batch's last step).
Wall time is the whole command (start-up included) for both; lerobot-eval also renders the mp4s
of up to 10 episodes, which it always does.
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


def build_checkpoint(directory: Path) -> Path:
    from policybench.policy.lerobot import save_random_act

    return save_random_act(directory, (3, 96, 96), 2, 2, PUSHT_STATS)


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.perf_counter() - started


def lerobot_eval(checkpoint: Path, out: Path, episodes: int, seed: int, batch: int, env) -> dict:
    command = [
        str(Path(sys.executable).with_name("lerobot-eval")),
        f"--policy.path={checkpoint}",
        "--env.type=pusht",
        f"--eval.batch_size={batch}",
        f"--eval.n_episodes={episodes}",
        f"--seed={seed}",
        "--policy.device=cpu",
        "--policy.use_amp=false",
        f"--output_dir={out}",
    ]
    wall = timed(command, env)
    metrics = json.loads((out / "eval_info.json").read_text())["per_task"][0]["metrics"]
    return {
        "command": " ".join(command),
        "wall_s": wall,
        "success": [bool(s) for s in metrics["successes"]],
        "sum_reward": metrics["sum_rewards"],
    }


def policybench(checkpoint: Path, out: Path, episodes: int, seed: int, args: list[str], env):
    command = [sys.executable, "-m", "pytest", "benchmarks/test_pusht.py", "-q"]
    command += ["-p", "no:cacheprovider", f"--policy=lerobot:{checkpoint}"]
    command += [f"--rollouts={episodes}", f"--seed={seed}", f"--report-dir={out}", *args]
    wall = timed(command, env)
    lines = (out / "latest" / "results.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["scene"]["seed"])
    return {
        "command": " ".join(command[2:]),
        "wall_s": wall,
        "success": [r["outcome"] == "solved" for r in records],
        "sum_reward": [r["sum_reward"] for r in records],
        "steps": [r["steps"] for r in records],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--checkpoint", type=Path, default=None, help="default: a random ACT")
    parser.add_argument("--batch-sizes", default="1,2,5,10", help="lerobot-eval batch sizes")
    parser.add_argument("--threads", default="1", help="OMP_NUM_THREADS for both tools")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vs-lerobot-eval-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": args.threads}
    env["PYTHONPATH"] = str(REPO)
    checkpoint = args.checkpoint or build_checkpoint(work / "act-pusht")
    n, seed = args.episodes, args.seed

    runs: list[tuple[str, dict]] = []
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        name = f"lerobot-eval batch_size={batch}"
        runs.append((name, lerobot_eval(checkpoint, work / f"le-{batch}", n, seed, batch, env)))
        print(f"ran {name}", file=sys.stderr)
    for name, extra in (
        ("policybench -n 0", ["-n", "0"]),
        ("policybench -n 2 (shared server)", ["-n", "2"]),
        ("policybench -n 2 (model per worker)", ["-n", "2", "--policy-sharing=per-worker"]),
    ):
        out = work / f"pb-{len(runs)}"
        runs.append((name, policybench(checkpoint, out, n, seed, extra, env)))
        print(f"ran {name}", file=sys.stderr)

    reference = runs[-3][1]
    print(f"\nPushT, random-init ACT {checkpoint}, {n} episodes, seeds {seed}..{seed + n - 1}")
    print(
        f"{'run':38} {'wall s':>7} {'eps/s':>6} {'success':>8} {'mean sum reward':>16} "
        f"{'max |diff| vs pb -n 0':>22}"
    )
    for name, run in runs:
        diff = max(
            abs(a - b) for a, b in zip(run["sum_reward"], reference["sum_reward"], strict=True)
        )
        same = run["success"] == reference["success"]
        print(
            f"{name:38} {run['wall_s']:7.1f} {n / run['wall_s']:6.2f} "
            f"{sum(run['success']) / n:8.1%} {sum(run['sum_reward']) / n:16.6f} "
            f"{diff:16.2e} {'same' if same else 'DIFF'}"
        )
    best = min(run["wall_s"] for name, run in runs if name.startswith("lerobot-eval"))
    pb2 = runs[-2][1]["wall_s"]
    print(f"\npolicybench -n 2 (shared) / best lerobot-eval wall time: {pb2 / best:.2f}")
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
