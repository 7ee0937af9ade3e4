"""Trains a small LeRobot ACT on a PushT dataset recorded with policybench, evaluating the policy
in memory with `policybench.evaluate` between training steps. Offline; CPU is enough.

    python examples/training/train_act_pusht.py --steps 20 --eval-every 10 --out /tmp/act-pusht

1. `pytest benchmarks/test_pusht.py --policy=scripted --record-dataset DIR` records the scripted
   expert's rollouts as a LeRobot dataset (the features of LeRobot's own PushT env).
2. LeRobot's own factory builds ACT and its processors from the dataset's metadata and stats.
3. Every `--eval-every` steps, `evaluate(LeRobotModel.in_memory(policy, pre, post), ...)` runs
   PushT rollouts against the policy as it is now (no checkpoint written) and prints the rate.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local: no hub, no downloads

import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.factory import make_policy, make_pre_post_processors

from policybench import evaluate
from policybench.policy.lerobot import LeRobotModel

REPO = Path(__file__).resolve().parents[2]
EVAL = "pusht"


def record(dataset_dir: Path, rollouts: int, report_dir: Path) -> LeRobotDataset:
    """The scripted expert's PushT rollouts, recorded by policybench as a LeRobot dataset."""
    command = [sys.executable, "-m", "pytest", "benchmarks/test_pusht.py", "-q"]
    command += ["-p", "no:cacheprovider", "--policy=scripted", f"--rollouts={rollouts}"]
    command += [f"--record-dataset={dataset_dir}", f"--report-dir={report_dir}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(command, cwd=REPO, env=env, check=True)
    return dataset_dir / EVAL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a new directory for everything")
    parser.add_argument("--steps", type=int, default=20, help="training steps")
    parser.add_argument("--eval-every", type=int, default=10, help="steps between evaluations")
    parser.add_argument("--record-rollouts", type=int, default=2, help="expert rollouts to learn")
    parser.add_argument("--rollouts", type=int, default=1, help="rollouts per evaluation")
    parser.add_argument("--workers", type=int, default=2, help="pytest workers per evaluation")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    root = record(args.out / "datasets", args.record_rollouts, args.out / "recording")
    fps = 10  # PushT's control rate, which the dataset keeps
    chunk = 10
    dataset = LeRobotDataset(
        f"policybench/{EVAL}",
        root=root,
        video_backend="pyav",  # LeRobot's default decoder (torchcodec) needs the system's FFmpeg
        delta_timestamps={"action": [i / fps for i in range(chunk)]},
    )
    torch.manual_seed(0)
    config = ACTConfig(
        chunk_size=chunk,
        n_action_steps=chunk,
        dim_model=64,
        n_heads=2,
        dim_feedforward=128,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        pretrained_backbone_weights=None,  # the ImageNet weights are a download
        device="cpu",
    )
    policy = make_policy(config, ds_meta=dataset.meta)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=dataset.meta.stats)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    batches = iter(loader)

    policy.train()
    for step in range(1, args.steps + 1):
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            batch = next(batches)
        loss, _ = policy.forward(preprocessor(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.3f}", flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            found = evaluate(
                LeRobotModel.in_memory(policy, preprocessor, postprocessor),
                evals=[EVAL],
                rollouts=args.rollouts,
                workers=args.workers,
                report_dir=args.out / "evaluations",
            )
            tally = found.summary.overall.stats.tally
            print(
                f"step {step}: evaluated {tally.solved}/{tally.rollouts} solved "
                f"(success rate {tally.rate:.2f}, {tally.errors} errors) in {found.run_dir}",
                flush=True,
            )


if __name__ == "__main__":
    main()
