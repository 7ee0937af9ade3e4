"""Where a run directory keeps its files: a rollout's trace and video, each named for the
rollout's id, and the run's summary (and the verdict it records)."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from policybench import keys
from policybench.run.files import read_json
from policybench.run.run_verdict import RunVerdict, verdict_of

if TYPE_CHECKING:
    from policybench.record.video import Video

TRACES = "traces"  # the folder of a run's rollout traces
KEPT = "kept"  # the observations kept for the Eval's expert to replay (record/shadow.py)
VIDEOS = "videos"  # the folder of a run's videos
HANGS = "hangs"  # the folder of the watchdog's files, one per worker with a rollout running
PREFLIGHTS = "preflight"  # the folder of a run's preflights, one file per Eval (and arm)
SUMMARY = "summary.json"  # the run's aggregates, written when it ends
# A --decide plan's exact chances, written by the workers that collected it for the controller
# to print before the run (removed once printed).
DECIDE_PLAN = ".decide-plan.txt"


def video_name(nodeid: str) -> str:
    """A file name for a rollout: readable, and unique through a short hash of its id."""
    test = nodeid.rsplit("::", 1)[-1]
    readable = re.sub(r"[^A-Za-z0-9._=-]+", "_", test).strip("_")[:80]
    return f"{readable}-{hashlib.sha1(nodeid.encode()).hexdigest()[:8]}"


def video_fields(video: Video, name: str) -> dict[str, str]:
    """What the rollout's record says of its video: the file relative to the run directory."""
    if video.path is None:
        return {keys.VIDEO_MISSING: video.missing or "no frames"}
    return {keys.VIDEO: name}


class OutsideRun(ValueError):
    """A file a run's records name that does not lie inside the run's folder."""


def inside(run_dir: Path, name: str) -> Path:
    """The file a run's record names (a trace, a video: relative to the run's folder), refused
    with OutsideRun unless it lies inside that folder: an absolute path, a `..`, or a link that
    leads out, written into a results.jsonl by hand or by another machine, reads and writes
    nothing outside the run."""
    given = PurePosixPath(name)
    if given.is_absolute() or ".." in given.parts or "\\" in name or not given.parts:
        raise OutsideRun(f"{name!r} is not a path inside the run's folder; refused")
    path = run_dir / given
    # A folder's real path found once (a link, `latest`, is followed afresh: it moves); the
    # file's own folder too (the many traces of a run share one), the file itself each time.
    root = run_dir.resolve() if run_dir.is_symlink() else _resolved(run_dir)
    folder = path.parent.resolve() if path.parent.is_symlink() else _resolved(path.parent)
    real = path.resolve() if path.is_symlink() else folder / path.name
    if not real.is_relative_to(root):
        raise OutsideRun(f"{name!r} leads outside the run's folder {root}; refused")
    return path


@functools.lru_cache(maxsize=64)
def _resolved(run_dir: Path) -> Path:
    """A run folder's real path, found once for the many files a report reads in it."""
    return run_dir.resolve()


def verdict_line(summary: Mapping[str, Any]) -> str | None:
    """A summary.json's verdict as a line (`passed`, or its kind and reasons); None where the run
    recorded none."""
    verdict = verdict_of(summary)
    return None if verdict is None else verdict.line()


def verdict_in(run_dir: Path) -> RunVerdict | None:
    """The verdict a run's summary.json records; None where it has none (or cannot be read)."""
    try:
        summary = read_json(run_dir / SUMMARY)
    except (OSError, ValueError):
        return None
    return verdict_of(summary) if isinstance(summary, Mapping) else None
