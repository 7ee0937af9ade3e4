"""results.jsonl: one line per finished rollout, appended as it finishes, so an interrupted or
crashed run keeps every rollout that completed. `reports/latest` points at the newest run."""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import NoneType
from typing import IO, Any

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.run.files import (
    LINE_LIMIT,
    Refused,
    collector_paused,
    lines_of,
    loads,
    loads_line,
    open_append,
    open_regular,
)

RESULTS = "results.jsonl"
LATEST = "latest"
OUTCOMES = tuple(kind.value for kind in OutcomeKind)
# What every line must hold for the report to count it: field -> accepted types.
REQUIRED: Mapping[str, tuple[type, ...]] = {
    keys.EVAL: (str,),
    keys.TASK: (str,),
    keys.OUTCOME: (str,),
    keys.STEPS: (int, NoneType),  # None: a rollout whose worker crashed never reported it
    keys.SIM_S: (int, float, NoneType),
    keys.WALL_S: (int, float, NoneType),
}
# What a line may hold, and of which kind, where it holds it (null allowed).
OPTIONAL: Mapping[str, tuple[type, ...]] = {
    keys.ARM: (str,),
    keys.NODEID: (str,),
    keys.SCENE: (dict,),
    keys.SUCCESS_STEP: (int,),
    keys.REASON: (str,),
    keys.ROLLOUT_TRACE: (str,),
    keys.VIDEO: (str,),
    keys.SPECS: (dict,),
    keys.POLICY: (dict,),
}
STEPS_BOUND = 1 << 53


def new_run_dir(report_dir: Path, label: str | None = None) -> Path:
    """Makes and returns a new run directory under `report_dir`, named for the start time and
    `label` (a shard's, e.g. `20261101-120000-shard2of4`). Made atomically, so two runs started
    in the same second get two directories (the second gets `-1`)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S") + (f"-{label}" if label else "")
    for attempt in range(1000):
        candidate = report_dir / (stamp if attempt == 0 else f"{stamp}-{attempt}")
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"could not find a free run id for {stamp} under {report_dir}")


class ResultsWriter:
    """Appends records to `<run_dir>/results.jsonl` (the run directory exists: the run made it
    when it started); creates the file and points `latest` at the run on the first."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._file: IO[str] | None = None

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file is None:
            self._file = open_append(self.path)
            point_latest(self.run_dir)
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def path(self) -> Path:
        return self.run_dir / RESULTS


def point_latest(run_dir: Path) -> None:
    """Points `latest` beside the run at it. Something other than a link in its place (a
    folder, a file someone put there) is left, with a line saying so: the run goes on."""
    link = run_dir.parent / LATEST
    staging = run_dir.parent / f".{LATEST}-{os.getpid()}-{secrets.token_hex(4)}"
    staging.symlink_to(run_dir.name, target_is_directory=True)
    try:
        if link.exists() and not link.is_symlink():
            raise IsADirectoryError(f"{link} is not a link")
        os.replace(staging, link)
    except OSError:
        staging.unlink(missing_ok=True)
        print(f"policybench: {link} is not a link this run can replace; it is left as it is "
              f"and does not point at {run_dir.name}", file=sys.stderr)  # fmt: skip


@dataclass(frozen=True)
class Results:
    """The readable records of a results file, and one line per line that was not."""

    records: tuple[dict[str, Any], ...]
    problems: tuple[str, ...]


def read_results(path: Path, kept: bool = True) -> Results:
    """Every valid line of `path`, read as a stream (a regular file only: a link or a FIFO is
    Refused); a truncated, corrupt or over-long line becomes a problem naming its line number,
    and the lines around it still count. Records the caller keeps (`kept`) hold the fields
    rollouts share once; a caller that reads them once and lets them go skips that."""
    problems: list[str] = []
    shared: dict[str, Any] = {}  # the last value of each field rollouts share, held once
    with collector_paused():
        records = [
            _sharing(record, shared) if kept else record for record in each_result(path, problems)
        ]
    return Results(tuple(records), tuple(problems))


def each_result(path: Path, problems: list[str]) -> Iterator[dict[str, Any]]:
    """Each valid record of `path` in file order, one at a time (a caller that keeps what it
    needs of each holds one record, not the run's); each line that is none adds a problem
    naming its line number to `problems`."""
    for number, line in lines_of(path):
        if line is None:
            problems.append(f"{path.name} line {number}: longer than {LINE_LIMIT:,} bytes, skipped")
            continue
        if not line.strip():
            continue
        try:
            record = loads_line(line)
        except json.JSONDecodeError as error:
            problems.append(
                f"{path.name} line {number}: not valid JSON ({error.msg} at column "
                f"{error.colno}), skipped; the line was probably cut off by an interrupted run"
            )
            continue
        except ValueError as error:
            problems.append(f"{path.name} line {number}: {error}, skipped")
            continue
        why = record_problem(record)
        if why is None:
            yield record
        else:
            problems.append(f"{path.name} line {number}: {why}, skipped")


SHARED = (keys.EVAL_SETTINGS, keys.POLICY, keys.PACKAGES, keys.HOLD)  # alike in most rollouts


def _sharing(record: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    """`record`, its fields equal to the last record's held as that record's objects (a run of
    20,000 rollouts holds each once, not 20,000 equal copies)."""
    for name in SHARED:
        value = record.get(name)
        if value is not None and value == shared.get(name):
            record[name] = shared[name]
        elif value is not None:
            shared[name] = value
    return record


class ResultsFollower:
    """Reads a results file on as it grows (a run's own, while it runs): each `new()` returns
    the valid records written since the last call; a line not yet whole waits for the next."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def new(self) -> list[dict[str, Any]]:
        try:
            with open_regular(self.path, 1 << 62) as file:
                file.seek(self._offset)  # what was written since, LINE_LIMIT at most a call
                grown = os.fstat(file.fileno()).st_size - self._offset
                data = file.read(min(max(grown, 0), LINE_LIMIT))
        except (FileNotFoundError, Refused):
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # a line not yet whole
        found = []
        for line in lines:
            try:
                record = loads(line)
            except ValueError:
                continue
            if record_problem(record) is None:
                found.append(record)
        return found


def record_problem(record: Any) -> str | None:
    """Why `record` is not a rollout record, or None if it is one."""
    if type(record) is dict and _plainly_valid(record):
        return None
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    for name, types in REQUIRED.items():
        if name not in record:
            return f"missing field {name!r}"
        value = record[name]
        if type(value) in types:  # what JSON gives: the exact type, never a bool for an int
            continue
        if not isinstance(value, types) or isinstance(value, bool):
            wanted = " or ".join("null" if t is NoneType else t.__name__ for t in types)
            return f"field {name!r} should be {wanted}, got {_short(value)}"
    if record[keys.OUTCOME] not in OUTCOMES:
        return f"outcome should be one of {', '.join(OUTCOMES)}, got {record[keys.OUTCOME]!r}"
    for name, types in OPTIONAL.items():
        value = record.get(name)
        if value is None or type(value) in types:
            continue
        if not isinstance(value, types) or isinstance(value, bool):
            wanted = " or ".join(t.__name__ for t in types)
            return f"field {name!r} should be {wanted} or null, got {_short(value)}"
    for name in (keys.STEPS, keys.SUCCESS_STEP):
        value = record.get(name)
        if isinstance(value, int) and not 0 <= value < STEPS_BOUND:
            return f"field {name!r} should be a count of steps (0 to 2^53), got {_short(value)}"
    for name, judged in (record.get(keys.SPECS) or {}).items():
        if not _a_verdict(judged):
            return (
                "field 'specs' should map each spec to its verdict (an object of numbers: "
                f"margin, time_s, first_violated_step), got {name!r}: {_short(judged)}"
            )
    hz = record.get(keys.CONTROL_HZ)
    if hz is not None and (not isinstance(hz, int | float) or isinstance(hz, bool)):
        return f"field {keys.CONTROL_HZ!r} should be a number or null, got {_short(hz)}"
    return None


MISSING = object()
# Each field's types exactly as JSON gives them; an optional field missing reads as null.
EXACT_REQUIRED = tuple((name, frozenset(types)) for name, types in REQUIRED.items())
EXACT_OPTIONAL = tuple((name, frozenset((*types, NoneType))) for name, types in OPTIONAL.items())
NUMBER_OR_NULL = frozenset((int, float, NoneType))


def _plainly_valid(record: dict[str, Any]) -> bool:
    """A quick test that is enough for `record_problem` to find nothing (what a run writes
    passes it: every field of exactly its JSON type, no specs to look into); False sends the
    record to the full checks, which say what is wrong, if anything is."""
    get = record.get
    for name, types in EXACT_REQUIRED:
        if type(get(name, MISSING)) not in types:
            return False
    for name, types in EXACT_OPTIONAL:
        if type(get(name)) not in types:
            return False
    steps, success = get(keys.STEPS), get(keys.SUCCESS_STEP)
    return (
        get(keys.OUTCOME) in OUTCOMES
        and (steps is None or 0 <= steps < STEPS_BOUND)
        and (success is None or 0 <= success < STEPS_BOUND)
        and not get(keys.SPECS)
        and type(get(keys.CONTROL_HZ)) in NUMBER_OR_NULL
    )


def _a_verdict(judged: Any) -> bool:
    """Whether a spec's verdict in a record has the fields the report reads, of their kinds."""
    if not isinstance(judged, dict):
        return False
    numbers = (judged.get(name) for name in ("margin", "time_s", "first_violated_step"))
    return all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in numbers
    )


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def resolve_run(run: str | Path, report_dir: Path = Path("reports")) -> Path:
    """The run directory named by `run`: a run directory, its results.jsonl, or a run id
    (`latest` too) under `report_dir`. Raises FileNotFoundError saying what was looked for."""
    candidates = [Path(run), report_dir / str(run)]
    for candidate in candidates:
        if candidate.is_file() and candidate.name == RESULTS:
            return candidate.parent
        if (candidate / RESULTS).is_file():
            return candidate
    raise FileNotFoundError(
        f"no run {str(run)!r}: expected a run directory holding {RESULTS}, that file itself, or "
        f"a run id under {report_dir}/ (looked at {', '.join(str(c) for c in candidates)})"
    )
