"""A long run you can watch: the status line off a terminal (plain lines, every --status-every
seconds) and on one (a pty: kept in place, no character per rollout), status.json valid JSON at
every moment and equal to the summary at the end, under -n 0 and -n 2, and `policybench report
status` over a sharded run's directories."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from policybench.run.status import STATUS, RunState, Status, combined, read_status

ENVS = (Path(__file__).parent / "envs.py").read_text()
BENCHMARK = """
import policybench
from envs import GreedyPointModel, point_eval

REACH = point_eval("reach", tasks={"a": "reach a", "b": "reach b"}, scripted=GreedyPointModel)
SLOW = point_eval("slow", tasks={"far": "reach slowly"}, timeout_s=0.2, scripted=GreedyPointModel)


@policybench.parametrize(REACH, SLOW)
def test_point(rollout, harness):
    harness(rollout)
"""
ROLLOUTS = 3  # per task: 6 solvable reach rollouts, 3 slow ones that time out unsolved


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "envs.py").write_text(ENVS)
    (tmp_path / "test_point.py").write_text(BENCHMARK)
    return tmp_path


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "test_point.py", "--policy=scripted", "-p",
            "no:cacheprovider", "--rollouts", str(ROLLOUTS), *args]  # fmt: skip


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def run(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        pytest_command(*args), cwd=checkout, env=environment(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def summary_counts(run_dir: Path) -> tuple[int, int, int, int]:
    overall = json.loads((run_dir / "summary.json").read_text())["overall"]
    return overall["rollouts"], overall["solved"], overall["unsolved"], overall["errors"]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_off_a_terminal_the_status_line_is_printed_plainly_and_status_json_ends_as_the_summary(
    checkout, workers
):
    done = run(checkout, "-n", workers, "--status-every", "0")
    lines = re.findall(r"^policybench: (\d+)/(\d+) done · (\d+) solved.*$", done.stdout, re.M)
    assert len(lines) >= ROLLOUTS * 3, done.stdout[-3000:]  # one per rollout, then the last
    assert [int(d) for d, _, _ in lines] == sorted(int(d) for d, _, _ in lines)
    assert all(total == str(ROLLOUTS * 3) for _, total, _ in lines)
    assert "\r" not in done.stdout
    run_dir = checkout / "reports" / "latest"
    status = read_status(run_dir)
    assert status.finished and status.done == status.total == ROLLOUTS * 3
    tally = status.tally
    assert (tally.rollouts, tally.solved, tally.unsolved, tally.errors) == summary_counts(run_dir)
    assert (status.solved, status.unsolved) == (2 * ROLLOUTS, ROLLOUTS)
    *_, pytests, verdict = done.stdout.rstrip().splitlines()
    assert pytests.count("passed") == 1  # pytest's own summary, then the run's verdict
    assert verdict == "policybench: PASS"


def test_status_lines_are_spaced_by_status_every(checkout):
    done = run(checkout, "--status-every", "3600")
    lines = re.findall(r"^policybench: .*$", done.stdout, re.M)
    assert lines[-1] == "policybench: PASS"  # the run's verdict, its last line
    lines = lines[:-1]
    assert len(lines) == 1 and "finished" in lines[0], lines  # only the closing one


def on_a_terminal(checkout: Path, columns: int, workers: int) -> tuple[int, str]:
    """The exit status and all a run printed, run with its output on a pseudo-terminal of
    `columns` columns."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        pytest_command("-n", str(workers)),
        cwd=checkout,
        env={**environment(), "COLUMNS": str(columns)},
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the pty closed: the process ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    return process.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_on_a_terminal_the_status_line_is_kept_in_place_instead_of_a_character_per_rollout(
    checkout,
):
    status, output = on_a_terminal(checkout, columns=200, workers=2)
    assert status == 0
    rewrites = re.findall(r"\rpolicybench: (\d+)/9 done", output)
    assert len(rewrites) >= ROLLOUTS * 3, output[-3000:]
    assert "policybench: 9/9 done" in output
    # No progress characters for rollouts: the test file's line holds no dots or u's.
    assert not re.search(r"test_point\.py [.uE]+", output), output[-3000:]


def read_while_running(checkout: Path, *args: str) -> list[str]:
    """status.json as read over and over while a run of `args` goes on."""
    reads: list[str] = []
    stop = threading.Event()
    path = checkout / "reports" / "latest" / STATUS

    def read_all_the_time() -> None:
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                reads.append(path.resolve().read_text())

    reader = threading.Thread(target=read_all_the_time)
    reader.start()
    try:
        run(checkout, *args)
    finally:
        stop.set()
        reader.join()
    return reads


def test_status_json_is_valid_json_at_every_moment_of_a_run(checkout):
    reads = read_while_running(checkout, "--status-every", "0")
    assert len(reads) > 10
    parsed = [json.loads(text) for text in reads]  # raises on a torn file
    assert [p["done"] for p in parsed] == sorted(p["done"] for p in parsed)


def test_status_json_is_rewritten_at_most_once_a_second_and_when_the_run_ends(checkout):
    reads = read_while_running(checkout, "--status-every", "0")
    written = [Status.from_json(json.loads(text), checkout) for text in dict.fromkeys(reads)]
    running = [status for status in written if not status.finished]
    spacing = [b.updated_at - a.updated_at for a, b in itertools.pairwise(running)]
    assert all(gap >= 0.99 for gap in spacing), spacing
    assert written[-1].finished and written[-1].done == written[-1].total == ROLLOUTS * 3
    assert read_status(checkout / "reports" / "latest") == written[-1]


def test_report_status_reads_a_sharded_runs_directories_one_line_each_and_together(checkout):
    for shard in ("1/2", "2/2"):
        run(checkout, "--shard", shard, "--report-dir", "reports/4242")
    shards = sorted((checkout / "reports" / "4242").glob("*-shard*of2"))
    statuses = [read_status(shard) for shard in shards]
    assert sum(s.done for s in statuses) == ROLLOUTS * 3
    done = subprocess.run(
        [sys.executable, "-m", "policybench.cli", "report", "status", "reports/4242"],
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all("finished" in line for line in lines), lines
    assert lines[2] == f"together: {combined(statuses).line()}"
    assert "9/9 done · 6 solved" in lines[2]


def test_report_status_without_a_status_file_says_what_it_wants(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "policybench.cli", "report", "status", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "no status.json or results.jsonl in" in done.stdout
    assert "give run directories" in done.stdout


def test_the_line_says_pace_and_eta_while_running_and_finished_at_the_end():
    running = Status("r", total=10, done=4, solved=3, unsolved=1, errors=0,
                     started_at=0.0, updated_at=120.0)  # fmt: skip
    assert running.line() == (
        "4/10 done · 3 solved (75.0%, 95% CI 30.1%-95.4%) · 0 errors · 2.0/min · ETA 3m00s"
    )
    finished = Status("r", 10, 10, 7, 2, 1, 0.0, 300.0, state=RunState.FINISHED)
    assert finished.line().endswith("· 1 error · 2.0/min · finished")
    # An Eval none of whose rollouts ended yet: its pace, and the time left, are not known.
    unknown = Status("r", 10, 4, 3, 1, 0, 0.0, 120.0, eta_unknown=True, failed=2)
    assert unknown.line().endswith(
        "· 0 errors · 2 failed a check · 2.0/min · ETA unknown (an Eval has no rollout ended yet)"
    )


def test_the_eta_prices_each_evals_rollouts_left_at_that_evals_own_pace():
    """A run of quick rollouts then slow ones: the ETA is the slow Eval's rollouts at its own
    pace, not the run's average pace so far (which a quick first Eval makes far too short)."""
    from policybench.run.status import remaining_s

    walls = {"test_quick": [0.5] * 10, "test_slow": [30.0]}
    assert remaining_s({"test_slow": 9}, walls, workers=1) == pytest.approx(270.0)
    assert remaining_s({"test_slow": 9}, walls, workers=3) == pytest.approx(90.0)
    # An Eval none of whose rollouts has ended is priced at the mean of all that have.
    assert remaining_s({"test_new": 2}, walls, workers=1) == pytest.approx(2 * 35.0 / 11)
    assert remaining_s({"test_slow": 9}, {}, workers=1) is None  # nothing ended: no estimate
