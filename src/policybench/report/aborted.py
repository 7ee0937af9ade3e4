"""A run's witness: a small process that outlives the process running the run and, where that
one dies before the run has ended (a simulator's abort, the out-of-memory killer, SIGKILL),
records the run as aborted: status.json and summary.json say so, the report is written from the
rollouts it kept, and the terminal's last line says what happened.

The run holds the write end of the witness's standard input and writes ENDED there once its
summary is written; the witness sees end-of-file either way, and acts only without ENDED.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ENDED = b"ended\n"


class Witness:
    """The witness of a run directory, started by the process that runs the run."""

    def __init__(self, run_dir: Path, resume: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(run_dir), str(os.getpid()), resume],
            stdin=subprocess.PIPE,
        )

    def ended(self) -> None:
        """The run has ended (its summary and report written): the witness leaves quietly."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.write(ENDED)
                self.process.stdin.close()
            except BrokenPipeError:  # it was killed: nothing to tell it
                pass
        self.process.wait(timeout=30)


def record_aborted(run_dir: Path, pid: int, resume: str) -> str | None:
    """Marks `run_dir`'s run aborted, writes its report from the rollouts it kept, and returns
    its last line (None where no rollout had ended: status.json alone says so)."""
    # Imported here: the witness waits with the standard library alone, and loads the report's
    # code only for the run it has to record.
    from policybench.report.html import Findings, write_html
    from policybench.report.summary import Summary
    from policybench.run.files import open_append
    from policybench.run.info import RunInfo
    from policybench.run.layout import HANGS
    from policybench.run.results import RESULTS, read_results
    from policybench.run.run_verdict import RunVerdict
    from policybench.run.status import STATUS, RunState, read_status, write_status

    if (run_dir / STATUS).is_file():
        status = read_status(run_dir)
        write_status(
            run_dir, dataclasses.replace(status, state=RunState.ABORTED, updated_at=time.time())
        )
    if not (run_dir / RESULTS).is_file():  # no rollout had ended: no report to write
        return None
    results = read_results(run_dir / RESULTS)  # read once, for the summary and the pages
    for hang in sorted((run_dir / HANGS).glob("*.txt")):  # the rollouts it died in
        with open_append(hang) as file:
            file.write(f"the process running this rollout died at {time.ctime()}\n")
    run = RunInfo.load(run_dir)
    summary = Summary.of_run(run_dir, results)  # each rollout once, whatever its attempts
    count = summary.overall.stats.tally.rollouts
    kept = f"{count} rollout{'s' * (count != 1)} recorded before it died"
    verdict = RunVerdict.aborted(
        f"the run's process (pid {pid}) died before the run ended; {kept}; continue it with: "
        f"{resume}"
    )
    summary.write(run_dir, run, verdict)
    index = write_html(run_dir, Findings(summary, results.records, run, verdict))
    return f"{verdict.last_line()} (report: {index})"


def main(argv: list[str]) -> int:
    run_dir, pid, resume = Path(argv[0]), int(argv[1]), argv[2]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C reaches the terminal's whole group
    said = sys.stdin.buffer.read()
    if said.endswith(ENDED):
        return 0
    line = record_aborted(run_dir, pid, resume)
    if line is not None:
        print(line, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
