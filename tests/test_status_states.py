"""status.json tells a run that runs, finished or stopped early (with the count not run) apart,
and after --resume counts the whole run; on a terminal the status line leaves nothing of a longer
one behind and ends saying finished; a SIGTERM after the run has ended exits in one line;
`policybench report status` reads a wrapped loop's run and says when a path does not exist."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym

import policybench
from policybench.run.status import STATUS, RunState, read_status
from tests.test_progress import ENVS, checkout, environment, on_a_terminal, pytest_command  # noqa: F401
from tests.test_resume import bench_in, interrupted, run

CLI = [sys.executable, "-m", "policybench.cli"]


def report_status(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "report", "status", *map(str, paths)], capture_output=True, text=True, timeout=60
    )


def overall(run_dir: Path) -> tuple[int, int, int, int]:
    row = json.loads((run_dir / "summary.json").read_text())["overall"]
    return row["rollouts"], row["solved"], row["unsolved"], row["errors"]


def test_a_stopped_run_is_stopped_not_finished_and_its_resumes_count_the_whole_run(tmp_path):
    bench = bench_in(tmp_path / "stopped")
    interrupted(bench, signal.SIGTERM, 2, "--status-every", "0")
    run_dir = (bench / "reports" / "latest").resolve()
    stopped = json.loads((run_dir / STATUS).read_text())
    assert stopped["state"] == "stopped" and stopped["finished"] is False, stopped
    assert stopped["total"] == 12 and 2 <= stopped["done"] < 12
    assert stopped["not_run"] == 12 - stopped["done"]
    assert "stopped with" in report_status(run_dir).stdout

    resumed = run(bench, "--resume", "latest")
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    status = read_status(run_dir)
    assert status.state is RunState.FINISHED and status.finished
    assert status.done == status.total == 12 and status.carried >= 2
    assert (status.tally.rollouts, status.solved, status.unsolved, status.errors) == overall(
        run_dir
    )
    line = report_status(run_dir).stdout
    assert f"12/12 done · {status.solved} solved" in line and line.rstrip().endswith("finished")

    again = run(bench, "--resume", "latest")  # everything carried over: nothing runs
    assert again.returncode == 0, again.stdout[-3000:]
    after = read_status(run_dir)
    assert (after.done, after.total, after.carried, after.solved) == (12, 12, 12, status.solved)
    assert after.finished


def test_status_json_has_the_mode_of_the_other_run_files(checkout):  # noqa: F811
    old = os.umask(0o022)
    try:
        done = subprocess.run(
            pytest_command("--rollouts", "1", "-k", "not far"),
            cwd=checkout,
            env=environment(),
            capture_output=True,
            text=True,
        )
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stdout[-3000:]
    run_dir = checkout / "reports" / "latest"
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in run_dir.iterdir()}
    assert modes[STATUS] == modes["results.jsonl"] == 0o644, modes


def screen(output: str) -> list[str]:
    """The lines a terminal shows after `output`: a carriage return goes back to the start of the
    line, ESC[K clears the rest of it, other escapes (colours) show nothing."""
    lines, col = [""], 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", output):
        if token == "\r":
            col = 0
        elif token == "\n":
            lines.append("")
            col = 0
        elif token == "\x1b[K":
            lines[-1] = lines[-1][:col]
        elif not token.startswith("\x1b"):
            line = lines[-1].ljust(col)
            lines[-1] = line[:col] + token + line[col + len(token) :]
            col += len(token)
    return lines


def test_on_a_narrow_terminal_the_status_line_leaves_nothing_behind_and_ends_finished(
    checkout,  # noqa: F811
):
    status, output = on_a_terminal(checkout, columns=80, workers=0)
    assert status == 0, output[-3000:]
    drawn = re.findall(r"\rpolicybench: [^\r\n\x1b]*", output)
    assert len(drawn) >= 9, output[-3000:]
    assert all(len(line) <= 80 for line in drawn), drawn  # never wraps: \r could not undo it
    shown = [line for line in screen(output) if line.startswith("policybench: ")]
    assert shown[-1] == "policybench: PASS"  # the run's verdict, its last line
    shown = shown[:-1]
    assert len(shown) == 1, shown  # kept in place
    assert re.fullmatch(r"policybench: 9/9 done · 6 solved \(66\.7%\) · 0 errors · [\d.]+/min "
                        r"· finished", shown[0]), shown  # fmt: skip


def test_a_sigterm_after_the_run_has_ended_exits_in_one_line_with_the_runs_status(
    checkout,  # noqa: F811
):
    ended = checkout / "ended"
    (checkout / "conftest.py").write_text(
        "import pathlib, time\n\n\n"
        "def pytest_unconfigure(config):  # a slow end, after the run's results are written\n"
        f"    pathlib.Path({str(ended)!r}).touch()\n"
        "    time.sleep(30)\n"
    )
    process = subprocess.Popen(
        pytest_command("--rollouts", "1", "-k", "not far"),
        cwd=checkout,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ended.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert time.monotonic() - sent < 10  # not the 30 s the end would have taken
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, err
    assert err.strip().splitlines() == [
        "policybench: SIGTERM after the run had ended (its results and report are complete): "
        "exiting with the run's status 0"
    ], err
    assert process.returncode == 0
    assert read_status(checkout / "reports" / "latest").finished


def test_report_status_of_a_missing_path_says_there_is_no_such_directory(tmp_path):
    done = report_status(tmp_path / "nonexist")
    assert done.returncode == 2
    assert done.stdout.startswith(f"no such directory: {tmp_path / 'nonexist'}"), done.stdout


def test_report_status_reads_a_wrapped_loops_run_from_its_results(tmp_path):
    env = policybench.wrap(gym.make("CartPole-v1"), "cartpole", "balance", run_dir=tmp_path)
    for seed in range(3):
        env.reset(seed=seed)
        while not any(env.step(0)[2:4]):
            pass
    running = report_status(tmp_path)
    assert running.returncode == 0, running.stdout
    assert "3/3 done · 0 solved" in running.stdout and "finished" not in running.stdout
    assert "ago)" in running.stdout  # the loop goes on: when its last episode ended
    env.close()
    closed = report_status(tmp_path)
    assert closed.stdout.rstrip() == f"{tmp_path}: {read_status(tmp_path).line()}"
    assert closed.stdout.rstrip().endswith("· finished"), closed.stdout
    assert not (tmp_path / STATUS).exists()  # read from results.jsonl
