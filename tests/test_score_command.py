"""`policybench score RUN` says, as it starts, how many rollouts have no video and what the page
shows of them instead; run as a user runs it (a process on a real run, ended with Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from policybench import keys
from policybench.scoring.app import unfilmed_line
from tests.test_verdicts import point_run, records


def test_score_says_first_how_many_rollouts_have_no_video_and_what_scores_them(pytester):
    run_dir = point_run(pytester)
    count = len(records(run_dir))
    command = [sys.executable, "-m", "policybench.cli", "score", str(run_dir), "--port", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert server.stdout is not None
        said = [server.stdout.readline() for _ in range(3)]
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, out + err
    assert said[0] == (
        f"note: {count} of {count} rollouts have no video: the run recorded no video (run it "
        "with --record-video). The page shows their instruction and scene only: score them from "
        "those, or skip them\n"
    )
    assert said[1].startswith(f"scoring {count} rollouts of ")
    assert "report:" in out


def test_only_the_rollouts_without_a_video_are_counted_with_each_reason_once():
    filmed = {keys.VIDEO: "videos/a.mp4"}
    failed = {keys.VIDEO: None, keys.VIDEO_MISSING: "the renderer failed"}
    unfilmed = {keys.VIDEO: None}
    assert unfilmed_line([filmed, filmed]) is None
    line = unfilmed_line([filmed, failed, unfilmed, dict(unfilmed)])
    assert line is not None and "\n" not in line
    assert line.startswith(
        "3 of 4 rollouts have no video: the renderer failed; the run recorded no video (run it "
        "with --record-video). The page"
    )
