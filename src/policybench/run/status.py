"""A run's progress as it goes: status.json in its run directory (written atomically as rollouts
finish, at most once a second, and at the end) and one line saying it; a wrapped loop's run, which
plans nothing, has its status from its results."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from policybench.run.files import read_json, write_file
from policybench.run.info import RunInfo
from policybench.run.layout import SUMMARY
from policybench.run.records import Tally, latest_per_rollout, tally_of
from policybench.run.results import RESULTS, read_results
from policybench.run.unfinished import UNFINISHED

STATUS = "status.json"
FORMAT = "policybench-status"
VERSION = 2  # 1 had no state: `finished` was true for a run stopped early too
STATE_FIELD = "state"  # the run's state in status.json (not an observation's keys.STATE)
WRITE_EVERY_S = 1.0  # readers poll it; a run of quick rollouts would rewrite it many times a second


class RunState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"  # ended with every selected item run
    STOPPED = "stopped"  # ended early (Ctrl-C, SIGTERM, -x): some items not run
    ABORTED = "aborted"  # its process died before the run ended (report.aborted)


@dataclass(frozen=True)
class Status:
    """How far a run has got: `done` of `total` items (rollouts, and any other selected test),
    the rollouts' outcomes, whether it runs, finished or stopped early, and its pace since it
    started. A resumed run counts the rollouts carried over (`carried`, ended before it started)
    in `done` and its outcomes, and not in its pace."""

    run_id: str
    total: int
    done: int
    solved: int
    unsolved: int
    errors: int
    started_at: float  # seconds since the epoch
    updated_at: float
    state: RunState = RunState.RUNNING
    carried: int = 0
    # The run's own estimate of its time left, from each Eval's rollouts so far (remaining_s);
    # None: the pace since the start stands in.
    remaining_s: float | None = None
    # An Eval with rollouts left has none ended yet: its pace, and so the time left, is unknown.
    eta_unknown: bool = False
    failed: int = 0  # items that failed beyond their outcome: a trajectory spec, a golden

    @property
    def finished(self) -> bool:
        """Whether the run is complete: it ended with every selected item run."""
        return self.state is RunState.FINISHED

    @property
    def not_run(self) -> int:
        return max(self.total - self.done, 0)

    @property
    def tally(self) -> Tally:
        return Tally(
            self.solved + self.unsolved + self.errors, self.solved, self.unsolved, self.errors
        )

    @property
    def per_minute(self) -> float | None:
        elapsed, ran = self.updated_at - self.started_at, self.done - self.carried
        return ran / elapsed * 60 if ran > 0 and elapsed > 0 else None

    @property
    def eta_s(self) -> float | None:
        rate = self.per_minute
        if self.state is not RunState.RUNNING or rate is None or self.eta_unknown:
            return None
        return self.remaining_s if self.remaining_s is not None else self.not_run / rate * 60

    def line(self, interval: bool = True) -> str:
        """`37/120 done · 21 solved (56.8%, 95% CI 40.1-72.1%) · 1 error · 6.2/min · ETA 13m`
        (without `interval`: `21 solved (56.8%)`, for a narrow terminal)."""
        tally = self.tally
        parts = [f"{self.done}/{self.total} done"]
        solved = f"{self.solved} solved"
        if tally.rollouts and not tally.measured:
            solved += " (no result: every rollout errored)"
        elif tally.rollouts and interval:
            low, high = tally.interval()
            solved += f" ({tally.rate:.1%}, 95% CI {low:.1%}-{high:.1%})"
        elif tally.rollouts:
            solved += f" ({tally.rate:.1%})"
        parts.append(solved)
        parts.append(f"{self.errors} error{'' if self.errors == 1 else 's'}")
        if self.failed:
            parts.append(f"{self.failed} failed a check")
        rate = self.per_minute
        parts.append("-/min" if rate is None else f"{rate:.1f}/min")
        if self.state is RunState.STOPPED:
            parts.append(f"stopped with {self.not_run} not run")
        elif self.state is RunState.ABORTED:
            parts.append(f"aborted with {self.not_run} not run")
        elif self.state is RunState.FINISHED:
            parts.append("finished")
        elif (eta := self.eta_s) is not None:
            parts.append(f"ETA {duration(eta)}")
        elif self.eta_unknown and self.done:
            parts.append("ETA unknown (an Eval has no rollout ended yet)")
        return " · ".join(parts)

    def to_json(self) -> dict:
        """The fields, and what a poller asks: `finished` (complete) and `not_run` (stopped)."""
        stopped = self.not_run if self.state in (RunState.STOPPED, RunState.ABORTED) else 0
        return {
            "format": FORMAT,
            "version": VERSION,
            **asdict(self),
            STATE_FIELD: self.state.value,
            "finished": self.finished,
            "not_run": stopped,
        }

    @classmethod
    def from_json(cls, data: dict, source: Path) -> Status:
        if data.get("format") != FORMAT:
            raise ValueError(
                f"{source}: not a policybench status file (format {data.get('format')!r})"
            )
        given = {field.name: data[field.name] for field in fields(cls) if field.name in data}
        if STATE_FIELD not in given:  # version 1 said only whether the run had ended (`finished`)
            ended = RunState.FINISHED if data["done"] >= data["total"] else RunState.STOPPED
            given[STATE_FIELD] = ended if data["finished"] else RunState.RUNNING
        return cls(**{**given, STATE_FIELD: RunState(given[STATE_FIELD])})


def remaining_s(
    left: Mapping[str, int], walls: Mapping[str, Sequence[float]], workers: int
) -> float | None:
    """Seconds left: each group's rollouts not run (`left`, by group: an Eval's test function)
    times its own rollouts' mean wall time so far, a group none of whose rollouts has ended at
    the mean of all that have, the whole spread over `workers` processes. None before any
    rollout has ended."""
    ended = [wall for group in walls.values() for wall in group]
    if not ended:
        return None
    overall = sum(ended) / len(ended)
    total = sum(
        count * (sum(walls[group]) / len(walls[group]) if walls.get(group) else overall)
        for group, count in left.items()
    )
    return total / max(workers, 1)


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )


def write_status(run_dir: Path, status: Status) -> None:
    """Replaces status.json in one step: a reader sees the old file or the new one, never a part.
    Its mode is the other run files' (0666 less the umask), so whoever reads the report reads it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_file(run_dir / STATUS, json.dumps(status.to_json()))


class StatusFile:
    """A run's status.json, written as rollouts finish: at most once every `every_s` seconds,
    and always when the status says the run has ended (an update in between is skipped; the
    next one written carries it)."""

    def __init__(self, run_dir: Path, every_s: float = WRITE_EVERY_S) -> None:
        self.run_dir = run_dir
        self.every_s = every_s
        self._written_at: float | None = None  # time.monotonic() of the last write

    def update(self, status: Status) -> bool:
        """Writes `status` unless the last write was under `every_s` ago and the run goes on;
        whether it wrote."""
        now = time.monotonic()
        recent = self._written_at is not None and now - self._written_at < self.every_s
        if recent and status.state is RunState.RUNNING:
            return False
        write_status(self.run_dir, status)
        self._written_at = now
        return True


def read_status(run_dir: Path) -> Status:
    """The run's status.json; a run without one (a wrapped loop's) as its results tell it."""
    path = run_dir / STATUS
    if not path.is_file() and (run_dir / RESULTS).is_file():
        return status_of_results(run_dir)
    return Status.from_json(read_json(path), path)


def status_of_results(run_dir: Path) -> Status:
    """A run's status from its results.jsonl: a wrapped loop's run plans no rollouts, so its total
    is the episodes ended and those in progress; it has finished when its loops closed it (its
    summary is as new as its results, and no episode is open)."""
    results = run_dir / RESULTS
    tally = tally_of(latest_per_rollout(read_results(results).records))
    folder = run_dir / UNFINISHED
    open_episodes = len(list(folder.glob("*.json"))) if folder.is_dir() else 0
    updated = results.stat().st_mtime
    summary = run_dir / SUMMARY
    closed = summary.is_file() and summary.stat().st_mtime >= updated and not open_episodes
    run = RunInfo.load(run_dir)
    started = datetime.fromisoformat(run.started).timestamp() if run is not None else updated
    return Status(
        run_id=run.run_id if run is not None else run_dir.name,
        total=tally.rollouts + open_episodes,
        done=tally.rollouts,
        solved=tally.solved,
        unsolved=tally.unsolved,
        errors=tally.errors,
        started_at=min(started, updated),
        updated_at=updated,
        state=RunState.FINISHED if closed else RunState.RUNNING,
    )


def combined(statuses: Sequence[Status]) -> Status:
    """The runs as one (the shards of one run): counts add up, pace over the earliest start;
    running while one runs, finished when all did, else stopped."""
    states = {status.state for status in statuses}
    order = (RunState.RUNNING, RunState.ABORTED, RunState.STOPPED, RunState.FINISHED)
    state = next(s for s in order if s in states)
    return Status(
        run_id=f"{len(statuses)} runs",
        total=sum(s.total for s in statuses),
        done=sum(s.done for s in statuses),
        solved=sum(s.solved for s in statuses),
        unsolved=sum(s.unsolved for s in statuses),
        errors=sum(s.errors for s in statuses),
        started_at=min(s.started_at for s in statuses),
        updated_at=max(s.updated_at for s in statuses),
        state=state,
        carried=sum(s.carried for s in statuses),
    )


def is_run(path: Path | str) -> bool:
    return os.path.isfile(os.path.join(path, RESULTS)) or os.path.isfile(os.path.join(path, STATUS))


def status_dirs(paths: Iterable[Path]) -> list[Path]:
    """Each path that is a run directory (it holds a status.json, or results.jsonl), or else the
    run directories directly inside it (`reports/4242` for an array job's shards; the `latest`
    link is not a run of its own)."""
    found: list[Path] = []
    for path in paths:
        if is_run(path):
            found.append(path)
        elif path.is_dir():
            runs = (child for child in path.iterdir() if not child.is_symlink())
            found += sorted(child for child in runs if is_run(child))
    return found
