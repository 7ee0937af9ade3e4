"""Ctrl-C while a wrapped loop's run writes its report at close (or while `policybench report
html` writes it) ends in one line saying what was interrupted, that results.jsonl is intact and
how to write the report again, with exit status 130; every recorded episode is kept."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

import policybench
from policybench.report.html import INDEX, ROLLOUTS
from policybench.run.results import RESULTS, read_results

CLI = Path(sys.executable).with_name("policybench")
# A command started in the background (a CI job, `cmd &`) inherits an ignored SIGINT, and Python
# then installs no handler for it; the loop under test is started as a terminal would start it.
CTRL_C_AS_IN_A_TERMINAL = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
EPISODES = 40  # enough that the report's rollout pages take a second or so to write

# Records its episodes, then ends its run as argv[2] says: by a with block, or at the exit.
LOOP = """
import sys
import gymnasium as gym
import policybench
env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=sys.argv[1])
def run():
    for seed in range(int(sys.argv[3])):
        env.reset(seed=seed)
        while not any(env.step(0)[2:4]):
            pass
if sys.argv[2] == "with":
    with env:
        run()
    print("not reached after Ctrl-C at close", flush=True)
else:  # the exit closes it
    run()
"""


def interrupt_as_pages_are_written(process: subprocess.Popen, run_dir: Path) -> tuple[str, str]:
    """Sends SIGINT once the report's first rollout page appears (its index and summary are
    being or were written; the other pages are still to come); returns stdout and stderr."""
    deadline = time.monotonic() + 60
    pages = run_dir / ROLLOUTS
    while not (pages.is_dir() and any(pages.iterdir())):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no report page was written"
        time.sleep(0.002)
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=60)


def said_interrupted(err: str, run_dir: Path) -> str:
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    again = shlex.join(["policybench", "report", "html", str(run_dir)])
    assert f"its {RESULTS} is intact; write the report again with: {again}" in last
    return last


@pytest.mark.parametrize("ending", ["with", "exit"])  # close() ends a with block
def test_ctrl_c_while_a_loops_run_writes_its_report_ends_in_one_line_and_status_130(
    tmp_path, ending
):
    run_dir = tmp_path / "run"
    loop = subprocess.Popen(
        [sys.executable, "-c", LOOP, run_dir, ending, str(EPISODES)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=CTRL_C_AS_IN_A_TERMINAL,
    )
    out, err = interrupt_as_pages_are_written(loop, run_dir)
    assert loop.returncode == 130, err
    last = said_interrupted(err, run_dir)
    assert f"interrupted while closing the wrapped loop's run in {run_dir}" in last
    assert "not reached" not in out
    results = read_results(run_dir / RESULTS)
    assert not results.problems and len(results.records) == EPISODES


def test_ctrl_c_while_report_html_writes_ends_in_one_line_and_status_130(tmp_path):
    run_dir = tmp_path / "run"
    with policybench.wrap(gym.make("CartPole-v1"), "c", "b", run_dir=run_dir) as env:
        for seed in range(EPISODES):
            env.reset(seed=seed)
            while not any(env.step(0)[2:4]):
                pass
    before = (run_dir / RESULTS).read_bytes()
    shutil.rmtree(run_dir / ROLLOUTS)
    (run_dir / INDEX).unlink()
    report = subprocess.Popen(
        [CLI, "report", "html", run_dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=CTRL_C_AS_IN_A_TERMINAL,
    )
    _, err = interrupt_as_pages_are_written(report, run_dir)
    assert report.returncode == 130, err
    last = said_interrupted(err, run_dir)
    assert f"interrupted while writing the report of {run_dir}" in last
    assert err.strip() == last  # the one line
    assert (run_dir / RESULTS).read_bytes() == before
    again = subprocess.run([CLI, "report", "html", run_dir], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"{EPISODES} rollouts; report:" in again.stdout
    assert len(list((run_dir / ROLLOUTS).glob("*.html"))) == EPISODES
