"""A run's progress as it goes: status.json in its run directory (written atomically as rollouts
finish, at most once a second, and at the end), one line saying it, and `policybench report status
DIR...` across runs and shards."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from policybench.report.stats import Tally

STATUS = "status.json"
FORMAT = "policybench-status"
WRITE_EVERY_S = 1.0  # readers poll it; a run of quick rollouts would rewrite it many times a second


@dataclass(frozen=True)
class Status:
    """How far a run has got: `done` of `total` items (rollouts, and any other selected test),
    the rollouts' outcomes, and its pace since it started."""

    run_id: str
    total: int
    done: int
    solved: int
    unsolved: int
    errors: int
    started_at: float  # seconds since the epoch
    updated_at: float
    finished: bool = False

    @property
    def tally(self) -> Tally:
        return Tally(
            self.solved + self.unsolved + self.errors, self.solved, self.unsolved, self.errors
        )

    @property
    def per_minute(self) -> float | None:
        elapsed = self.updated_at - self.started_at
        return self.done / elapsed * 60 if self.done and elapsed > 0 else None

    @property
    def eta_s(self) -> float | None:
        rate = self.per_minute
        if self.finished or rate is None:
            return None
        return max(self.total - self.done, 0) / rate * 60

    def line(self) -> str:
        """`37/120 done · 21 solved (56.8%, 95% CI 40.1-72.1%) · 1 error · 6.2/min · ETA 13m`"""
        tally = self.tally
        parts = [f"{self.done}/{self.total} done"]
        solved = f"{self.solved} solved"
        if tally.rollouts:
            low, high = tally.interval()
            solved += f" ({tally.rate:.1%}, 95% CI {low:.1%}-{high:.1%})"
        parts.append(solved)
        parts.append(f"{self.errors} error{'' if self.errors == 1 else 's'}")
        rate = self.per_minute
        parts.append("-/min" if rate is None else f"{rate:.1f}/min")
        if self.finished and self.done < self.total:  # interrupted, or items that never ran
            parts.append(f"stopped with {self.total - self.done} not run")
        elif self.finished:
            parts.append("finished")
        elif (eta := self.eta_s) is not None:
            parts.append(f"ETA {duration(eta)}")
        return " · ".join(parts)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": 1, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict, source: Path) -> Status:
        if data.get("format") != FORMAT:
            raise ValueError(
                f"{source}: not a policybench status file (format {data.get('format')!r})"
            )
        return cls(**{field.name: data[field.name] for field in fields(cls)})


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )


def write_status(run_dir: Path, status: Status) -> None:
    """Replaces status.json in one step: a reader sees the old file or the new one, never a part."""
    run_dir.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=run_dir, prefix=".status-", suffix=".json")
    with os.fdopen(handle, "w") as file:
        json.dump(status.to_json(), file)
    os.replace(temporary, run_dir / STATUS)


class StatusFile:
    """A run's status.json, written as rollouts finish: at most once every `every_s` seconds,
    and always when the status says the run has finished (an update in between is skipped; the
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
        if recent and not status.finished:
            return False
        write_status(self.run_dir, status)
        self._written_at = now
        return True


def read_status(run_dir: Path) -> Status:
    path = run_dir / STATUS
    return Status.from_json(json.loads(path.read_text()), path)


def combined(statuses: Sequence[Status]) -> Status:
    """The runs as one (the shards of one run): counts add up, pace over the earliest start."""
    return Status(
        run_id=f"{len(statuses)} runs",
        total=sum(s.total for s in statuses),
        done=sum(s.done for s in statuses),
        solved=sum(s.solved for s in statuses),
        unsolved=sum(s.unsolved for s in statuses),
        errors=sum(s.errors for s in statuses),
        started_at=min(s.started_at for s in statuses),
        updated_at=max(s.updated_at for s in statuses),
        finished=all(s.finished for s in statuses),
    )


def status_dirs(paths: Iterable[Path]) -> list[Path]:
    """Each path that holds a status.json, or else the run directories directly inside it that
    do (`reports/4242` for an array job's shards; the `latest` link is not a run of its own)."""
    found: list[Path] = []
    for path in paths:
        if (path / STATUS).is_file():
            found.append(path)
        elif path.is_dir():
            runs = (child for child in path.iterdir() if not child.is_symlink())
            found += sorted(child for child in runs if (child / STATUS).is_file())
    return found


def add_parser(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser(
        "status", help="how far runs have got (their status.json), one line each and together"
    )
    status.add_argument("runs", nargs="+", type=Path, help="run directories, or folders of them")
    status.set_defaults(func=run_status)


def run_status(args: argparse.Namespace) -> int:
    dirs = status_dirs(args.runs)
    if not dirs:
        shown = " ".join(str(path) for path in args.runs)
        print(f"no {STATUS} in {shown} or the directories directly inside: give run directories")
        return 2
    statuses = [read_status(run_dir) for run_dir in dirs]
    now = time.time()
    for run_dir, status in zip(dirs, statuses, strict=True):
        age = "" if status.finished else f" (updated {duration(now - status.updated_at)} ago)"
        print(f"{run_dir}: {status.line()}{age}")
    if len(statuses) > 1:
        print(f"together: {combined(statuses).line()}")
    return 0
