"""A run stopped by ^C says so and how to go on: its status line ends "stopped with N not run"
(not "finished"), and its terminal summary ends with the command that resumes it."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time

from tests.test_resume import REPO, bench_in, pytest_command


def test_a_run_stopped_by_ctrl_c_says_how_many_did_not_run_and_how_to_resume(tmp_path):
    bench = bench_in(tmp_path / "stopped")
    process = subprocess.Popen(
        pytest_command("--status-every", "0"),
        cwd=bench,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A run started in the background inherits an ignored SIGINT; a controller is not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    results = bench / "reports" / "latest" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if results.exists() and len(results.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2, output[-3000:]  # pytest's "interrupted"

    said = [line for line in output.splitlines() if line.startswith("policybench: ")]
    # The run's last line is its verdict: failed, for a run interrupted before its end.
    assert said[-1].startswith("policybench: FAIL — ") and "interrupted" in said[-1], said[-1]
    last_status = said[-2]
    done, total = (int(n) for n in last_status.split()[1].split("/"))
    assert done < total == 12
    assert last_status.endswith(f"stopped with {total - done} not run"), last_status

    run_dir = (bench / "reports" / "latest").resolve()
    hint = [line for line in output.splitlines() if line.startswith("interrupted: ")]
    assert hint, output[-3000:]
    command = shlex.split(hint[-1].split("continue the run with: ", 1)[1])
    assert command[-2:] == ["--resume", str(run_dir)], command
    assert "--status-every" in command  # the run's own options, given again
