"""PushT runs for the LeRobot tests: a whole pytest run of PushT (tests/pusht_short.py's 60-step
episodes unless told otherwise) and its records,
and both sides of a comparison with lerobot-eval: its own `eval_policy` loop (its vectorized env,
seeds start_seed + i) and policybench's rollouts of the same seeds, each episode as (success,
sum reward, max reward)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from policybench import keys
from policybench.harness import run_rollout
from policybench.policy.lerobot import LeRobotModel
from policybench.registry import PolicySettings, build_policy
from policybench.suites.pusht import PUSHT
from policybench.world import World

REPO = Path(__file__).resolve().parents[1]
SHORT = "tests/pusht_short.py"
Episode = tuple[bool, float, float]


def run_pusht(
    report_dir: Path, *args: str, rollouts: int = 2, timeout_s: float = 300, suite: str = SHORT
) -> list[dict]:
    """The records of `pytest SUITE` (a PushT benchmark file) run with `args`, by node id."""
    command = [sys.executable, "-m", "pytest", suite, "-p", "no:cacheprovider"]
    command += ["-q", "--rollouts", str(rollouts), "--report-dir", str(report_dir), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (report_dir / "latest" / "results.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda record: record[keys.NODEID])


def outcomes(records: list[dict]) -> list[tuple]:
    """What two runs of the same rollouts must agree on, per rollout."""
    return [
        (r[keys.NODEID], r[keys.OUTCOME], r[keys.STEPS], r[keys.SUM_REWARD], r[keys.MAX_REWARD])
        for r in records
    ]


def lerobot_evals_episodes(checkpoint: Path, episodes: int, start_seed: int, steps: int = 300):
    """What lerobot-eval's loop gives the checkpoint on PushT, `steps` at most per episode."""
    import torch
    from lerobot.envs.configs import PushtEnv
    from lerobot.envs.factory import make_env, make_env_pre_post_processors
    from lerobot.scripts.lerobot_eval import eval_policy

    model = LeRobotModel(checkpoint)
    env_config = PushtEnv(episode_length=steps)
    vector_env = make_env(env_config, n_envs=2)["pusht"][0]
    env_pre, env_post = make_env_pre_post_processors(env_config, model._policy.config)
    try:
        with torch.no_grad():
            info = eval_policy(
                vector_env,
                model._policy,
                env_pre,
                env_post,
                model._pre,
                model._post,
                n_episodes=episodes,
                start_seed=start_seed,
            )
    finally:
        vector_env.close()
    return [(e["success"], e["sum_reward"], e["max_reward"]) for e in info["per_episode"]]


def policybenchs_episodes(checkpoint: Path, episodes: int, start_seed: int, steps: int = 300):
    """What policybench gives the checkpoint on PushT's seeds start_seed + i."""
    world = World(PUSHT)
    policy = build_policy(
        f"lerobot:{checkpoint}", PUSHT, PolicySettings(), lambda: world.action_space
    )
    found: list[Episode] = []
    for rollout in PUSHT.rollouts(episodes, start_seed):
        short = rollout.__class__(**{**vars(rollout), "timeout_s": steps / PUSHT.control_hz})
        record = run_rollout(short, world, policy).record()
        solved = record[keys.OUTCOME] == "solved"
        found.append((solved, record[keys.SUM_REWARD], record[keys.MAX_REWARD]))
    world.close()
    return found
