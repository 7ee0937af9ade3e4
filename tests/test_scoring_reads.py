"""The scoring page's server reads a run's results.jsonl once, not on each of a video's range
requests, and again only when the file changed: a rollout the run appends still becomes
servable, and a file the page does not show still is not."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

import gymnasium as gym
import pytest

import policybench
from policybench import keys
from policybench.run.results import RESULTS, read_results
from policybench.scoring.app import ScoringApp

# The files the interpreter opened whose path is being watched (an audit hook, which stays
# for the process once added: it only looks while a test set WATCHED).
WATCHED: list[Path] = []
OPENED: list[str] = []


def _audit(event: str, args: tuple) -> None:
    watched = event == "open" and WATCHED and isinstance(args[0], str | Path)
    if watched and Path(args[0]) in WATCHED:
        OPENED.append(str(args[0]))


sys.addaudithook(_audit)


def record_episode(run_dir: Path, seed: int) -> None:
    env = gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=5)
    with policybench.wrap(env, "cartpole", "balance", run_dir=run_dir) as env:
        env.reset(seed=seed)
        while not any(env.step(0)[2:4]):
            pass


def get(url: str, range_header: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Range": range_header} if range_header else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_video_requests_read_results_once_and_a_newly_appended_rollout_becomes_servable(
    tmp_path,
):
    pytest.importorskip("av", reason="needs pip install 'policybench[video]'")
    record_episode(tmp_path, 0)
    [first] = read_results(tmp_path / RESULTS).records
    app = ScoringApp(tmp_path, scorer="ann")
    WATCHED.append(tmp_path / RESULTS)
    try:
        with app.server("127.0.0.1", 0) as server:
            assert get(server.url) == 200
            OPENED.clear()
            for start in range(0, 200, 10):  # a browser's range requests of a playing video
                assert get(f"{server.url}files/{first[keys.VIDEO]}", f"bytes={start}-") == 206
            assert OPENED == []  # the unchanged file was not read again
            record_episode(tmp_path, 1)  # the run appends a rollout while the page is open
            second = read_results(tmp_path / RESULTS).records[-1]
            assert second[keys.VIDEO] != first[keys.VIDEO]
            OPENED.clear()
            assert get(f"{server.url}files/{second[keys.VIDEO]}") == 200
            assert len(OPENED) == 1  # read again, once, as the file changed
            assert get(f"{server.url}files/{first[keys.VIDEO]}") == 200
            assert len(OPENED) == 1
            for hidden in (RESULTS, "run.json", "summary.json"):  # not on the page: not served
                assert get(f"{server.url}files/{hidden}") == 404
    finally:
        WATCHED.clear()
