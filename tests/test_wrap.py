"""policybench.wrap: a loop policybench does not drive leaves results.jsonl records the report
reads; an episode the loop leaves unfinished is recorded as an error, not lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym

from policybench.wrap import wrap


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_each_ended_episode_is_one_record_an_unfinished_one_an_error_and_close_writes_the_report(
    tmp_path: Path,
) -> None:
    env = wrap(gym.make("CartPole-v1"), eval="cartpole", task="balance", run_dir=tmp_path)
    for seed in range(2):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(0)
            done = terminated or truncated
    env.reset(seed=9)
    env.step(0)
    env.close()
    records = _records(tmp_path)
    assert [r["outcome"] for r in records] == ["unsolved", "unsolved", "error"]
    assert all(r["sum_reward"] == r["steps"] for r in records)  # CartPole: 1 per step
    assert records[2]["reason"].startswith("the loop ended mid-episode")
    assert records[0]["scene"] == {"undeclared": True}
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "index.html").is_file()


def test_the_report_renders_a_wrapped_run(tmp_path: Path) -> None:
    env = wrap(gym.make("CartPole-v1"), eval="cartpole", task="balance", run_dir=tmp_path)
    env.reset(seed=0)
    while not any(env.step(1)[2:4]):
        pass
    env.close()
    cli = Path(sys.executable).with_name("policybench")
    subprocess.run([cli, "report", "html", tmp_path], check=True, capture_output=True)
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "index.html").is_file()


LOOP = """
import os, signal, sys
import gymnasium as gym
from policybench.wrap import wrap
env = wrap(gym.make("CartPole-v1"), eval="cartpole", task="balance", run_dir=sys.argv[1])
for seed in range(2):
    env.reset(seed=seed)
    while not any(env.step(0)[2:4]):
        pass
env.reset(seed=9)
env.step(0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_loop_killed_mid_episode_keeps_finished_episodes_and_marks_the_open_one(
    tmp_path: Path,
) -> None:
    done = subprocess.run([sys.executable, "-c", LOOP, tmp_path], capture_output=True)
    assert done.returncode == -9
    assert [r["outcome"] for r in _records(tmp_path)] == ["unsolved", "unsolved"]
    assert (tmp_path / ".episode-in-progress").read_text() == "2"
