"""A folder's runs over time: every run under it read once into a SQLite store
(`history.sqlite`: runs, each Eval's row, every rollout), the runs of one Eval joined in lines
of comparable runs (the same protocol, policy aside: a run under another starts a new line, and
what changed is said), each change between consecutive runs of a line tested as `report compare`
tests two runs (paired by scene where the scenes match), and a page, `index.html`, of it all.

The run folders stay the source of truth: the store is an index, rebuilt when deleted, and a run
is read again only when its results change. A run merged from shards lists its parts; parts that
lie in the folder too are left out, so each rollout counts once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from policybench import keys
from policybench.record.protocol import of_policy
from policybench.report.compare import pooled_row
from policybench.report.published import NAME
from policybench.run.arms import ARMS
from policybench.run.files import Refused, collector_paused, loads, read_json
from policybench.run.info import RunInfo
from policybench.run.layout import SUMMARY, verdict_line
from policybench.run.records import (
    SCENE_KEY,
    last_of_each,
    rollout_id,
    scene_key_of,
    scene_text,
    tally_of_outcomes,
)
from policybench.run.results import OUTCOMES, RESULTS, each_result
from policybench.run.status import is_run

STORE = "history.sqlite"
INDEX = "index.html"
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,      -- the run folder's name
    path TEXT NOT NULL,           -- the folder, as found under the history's root
    started TEXT,                 -- run.json's ISO time
    policy TEXT,                  -- the run's policy (or arms, comma-separated)
    git_revision TEXT,
    command TEXT,
    parts TEXT,                   -- a merged run: its parts' folders (JSON list)
    verdict TEXT,                 -- passed | failed | no result | aborted: <why> | NULL
    drift TEXT,                   -- under candidate pins (--env-pins): each Eval's (JSON list)
    published TEXT,               -- beside its checkpoint's published results (JSON list)
    results_mtime_ns INTEGER,     -- results.jsonl as last read: a change reads it again
    results_size INTEGER
);
CREATE TABLE IF NOT EXISTS evals (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    eval TEXT NOT NULL,
    line TEXT NOT NULL,           -- the protocol's digest, policy aside: equal lines compare
    fields TEXT NOT NULL,         -- the protocol's fields, readable (JSON), to say what changed
    rollouts INTEGER, solved INTEGER, unsolved INTEGER, errors INTEGER,
    rate REAL, low REAL, high REAL,   -- success and its 95% Wilson interval
    records TEXT,                 -- its rollouts in run order, JSON: each an array of the
                                  -- columns of `rollouts` from rollout to margins, eval aside
    paired TEXT,                  -- its rollouts as comparisons pair them, in run order (JSON:
                                  -- tasks, arms, and each rollout's task, arm, outcome, key)
    PRIMARY KEY (run_id, eval)
);
-- Every rollout, a row each, read from its Eval's records: a run is stored as a row per Eval,
-- not one per rollout (a sixth of the cost of a run added); a query over all takes longer.
CREATE VIEW IF NOT EXISTS rollouts AS SELECT
    evals.run_id AS run_id,
    json_extract(r.value, '$[0]') AS rollout,       -- its item id
    evals.eval AS eval,
    json_extract(r.value, '$[1]') AS task,
    json_extract(r.value, '$[2]') AS arm,
    json_extract(r.value, '$[3]') AS scene,         -- JSON: task, seed, ...
    json_extract(r.value, '$[4]') AS outcome,       -- solved | unsolved | error
    json_extract(r.value, '$[5]') AS steps,
    json_extract(r.value, '$[6]') AS success_step,
    json_extract(r.value, '$[7]') AS margins        -- JSON: each spec's robustness margin
FROM evals, json_each(evals.records) AS r;
CREATE TABLE IF NOT EXISTS changes (  -- each test between consecutive runs of a line, made once
    eval TEXT NOT NULL,
    before TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    after TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    alpha REAL NOT NULL,
    change TEXT,                  -- worse | better | NULL (not significant, or nothing paired)
    p_value REAL,
    PRIMARY KEY (eval, before, after, alpha)
);
CREATE TABLE IF NOT EXISTS gate_calls (  -- each gate call's test, made once
    eval TEXT NOT NULL,
    reference TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    newest TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    level REAL NOT NULL,
    p_value REAL, pairs INTEGER, lost INTEGER, gained INTEGER, power REAL,
    PRIMARY KEY (eval, reference, newest, level)
);
CREATE INDEX IF NOT EXISTS changes_after ON changes(after);
"""


SCHEMA_VERSION = 7  # a store of another version is an index of old shape: rebuilt
# What the store may hold besides SCHEMA's tables (their primary keys' own indexes): anything
# else (a trigger, a view, another table) was not made here, and the store is rebuilt.
MADE_HERE = {
    ("table", "runs"),
    ("table", "evals"),
    ("view", "rollouts"),
    ("table", "changes"),
    ("table", "gate_calls"),
    ("index", "changes_after"),
}
COMPANIONS = ("-journal", "-wal", "-shm")  # SQLite's files beside a store


def open_store(root: Path) -> sqlite3.Connection:
    """The folder's store, opened only where it is a regular file of this user's with nothing
    in it this module did not make; anything else at its place (a link, another user's file, a
    store with a trigger) is removed and the store rebuilt from the runs, with a line saying
    so. Refused where it cannot be removed."""
    path = root / STORE
    why = _untrusted(path)
    if why is not None:
        _remove(path, why)
    for suffix in COMPANIONS:  # a planted hot journal would be rolled back into the store
        companion = path.with_name(path.name + suffix)
        why = _untrusted(companion)
        if why is not None:
            _remove(companion, why)
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA foreign_keys = ON")
    connection.execute("PRAGMA trusted_schema = OFF")
    made = {
        (kind, name)
        for kind, name in connection.execute("SELECT type, name FROM sqlite_master")
        if not name.startswith("sqlite_autoindex_")
    }
    if (
        connection.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION
        or made - MADE_HERE
    ):
        for kind, name in sorted(made, reverse=True):  # views and triggers before tables
            connection.execute(f'DROP {kind.upper()} IF EXISTS "{name.replace(chr(34), "")}"')
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    connection.executescript(SCHEMA)
    return connection


def _untrusted(path: Path) -> str | None:
    """Why the file at `path` is not one to open as this user's store; None if it is (or if
    nothing is there)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(found.st_mode):
        return "it is not a regular file (a link, a folder or a special file)"
    if found.st_uid != os.geteuid():
        return f"it belongs to another user (uid {found.st_uid})"
    return None


def _remove(path: Path, why: str) -> None:
    if path.is_dir() and not path.is_symlink():
        raise Refused(f"refused to use {path}: {why}; remove it")
    try:
        path.unlink()
    except OSError as error:
        raise Refused(f"refused to use {path}: {why}, and it cannot be removed ({error})") from None
    print(f"policybench history: removed {path}: {why}; the store is rebuilt from the runs",
          file=sys.stderr)  # fmt: skip


def run_dirs(root: Path) -> list[Path]:
    """The runs directly under `root` (a `latest` link is its target, read once). A link that
    leads out of `root` (to a run of someone else's, say) is not taken."""
    found = {}
    inner = root.resolve()
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:  # the folder's listing says what each entry is: a stat or two a run
        if not entry.is_dir() or not is_run(entry.path):
            continue
        child = Path(entry.path)
        where = child.resolve() if entry.is_symlink() else inner / entry.name
        if where.parent == inner:
            found.setdefault(where, child)
    return sorted(found.values(), key=lambda path: path.name)


@dataclass(frozen=True)
class Updated:
    """What one `update` did: runs read, runs kept as they were (unchanged since read), and
    one line per run (or results line) it could not take, naming the file and why."""

    read: int
    kept: int
    skipped: tuple[str, ...]


def update(connection: sqlite3.Connection, root: Path, records: RecordsOf | None = None) -> Updated:
    """Reads the runs under `root` that are new or whose results changed, and forgets those
    gone (the runs read held in `records`, for this call's comparisons). A run that cannot be
    read (a malformed file, a link, a FIFO, a file over its limit) is skipped with a line naming
    it; the others are read. The caller commits what was read, with its own writes, in one
    write to disk; a long read commits as it goes (every COMMIT_EVERY_S)."""
    dirs = run_dirs(root)
    known = {
        row[0]: (row[1], row[2])
        for row in connection.execute("SELECT run_id, results_mtime_ns, results_size FROM runs")
    }
    read, unchanged, skipped, committed = 0, 0, [], time.monotonic()
    for run_dir in dirs:
        results = run_dir / RESULTS
        try:
            stat_of = os.stat(results)
        except OSError:  # started, no rollout ended yet: read once one has
            continue
        seen = (stat_of.st_mtime_ns, stat_of.st_size)
        if known.get(run_dir.name) == seen:
            unchanged += 1
            continue
        problem = _stored_apart(connection, run_dir, seen, records)
        if isinstance(problem, str):
            skipped.append(f"{run_dir.name}: skipped, {problem}")
            continue
        skipped += problem
        read += 1
        if time.monotonic() - committed > COMMIT_EVERY_S:
            connection.commit()
            committed = time.monotonic()
    gone = set(known) - {d.name for d in dirs}
    if gone:
        connection.executemany("DELETE FROM runs WHERE run_id = ?", [(g,) for g in sorted(gone)])
    return Updated(read, unchanged, tuple(skipped))


COMMIT_EVERY_S = 5.0


def _stored_apart(
    connection: sqlite3.Connection, run_dir: Path, seen: tuple[int, int], records: RecordsOf | None
) -> list[str] | str:
    """One run stored under a savepoint of its own: the lines of its results skipped, or why
    the whole run was (what it had stored undone, the other runs' kept)."""
    if not connection.in_transaction:
        connection.execute("BEGIN")
    connection.execute("SAVEPOINT run")
    try:
        return _store_run(connection, run_dir, seen, records)
    except (OSError, ValueError, TypeError, AttributeError, KeyError, OverflowError,
            sqlite3.InterfaceError, sqlite3.ProgrammingError) as error:  # fmt: skip
        connection.execute("ROLLBACK TO run")
        return _said(error)
    finally:
        connection.execute("RELEASE run")


def _said(error: BaseException) -> str:
    return (
        str(error)
        if isinstance(error, Refused | ValueError)
        else f"{type(error).__name__}: {error}"
    )


def _store_run(
    connection: sqlite3.Connection,
    run_dir: Path,
    seen: tuple[int, int],
    kept: RecordsOf | None = None,
) -> list[str]:
    """Stores one run (held in `kept` too); returns the lines of its results file that were
    skipped."""
    problems: list[str] = []
    entries = entries_of(each_result(run_dir / RESULTS, problems))  # a record held at a time
    try:
        run = RunInfo.load(run_dir)
    except (OSError, ValueError):
        run = None
    settings = dict(run.settings) if run else {}
    arms = settings.get(ARMS)
    policy = (
        ", ".join(map(str, arms))
        if isinstance(arms, list)
        else str(settings.get(keys.POLICY) or "")
    )
    parts = [
        str(part.get("path"))
        for part in settings.get(keys.PARTS) or ()
        if isinstance(part, dict) and part.get("path")
    ]
    connection.execute("DELETE FROM runs WHERE run_id = ?", (run_dir.name,))
    connection.execute(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_dir.name,
            str(run_dir),
            _text(run.started) if run else None,
            policy,
            _text(run.git_revision) if run else None,
            _text(run.command) if run else None,
            json.dumps(parts),
            *_ended_with(run_dir),
            *seen,
        ),
    )
    fingerprint = run.fingerprint if run and isinstance(run.fingerprint, dict) else {}
    paired = {eval: paired_of(eval, stored) for eval, stored in entries.items()}
    _store_evals(connection, run_dir.name, fingerprint, entries, paired)
    if kept is not None:
        kept.prime(run_dir.name, paired)
    return [f"{run_dir.name}/{problem}" for problem in problems]


def _store_evals(
    connection: sqlite3.Connection,
    run_id: str,
    fingerprint: Mapping[str, Any],
    entries: Mapping[str, Sequence[Sequence[Any]]],
    paired: Mapping[str, Mapping[str, Any]],
) -> None:
    """Each Eval's row of a run: its protocol's line, its tally, its rollouts' entries and
    their pairing (`paired_of` them)."""
    for eval, stored in sorted(entries.items()):
        fields = _protocol_fields(fingerprint, eval)
        tally = tally_of_outcomes(entry[OUTCOME_AT] for entry in stored)
        # Every rollout errored: no result, stored as no rate (never a 0% success).
        low, high = tally.interval() if tally.measured else (None, None)
        connection.execute(
            "INSERT INTO evals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS TEXT), "
            "CAST(? AS TEXT))",  # the documents' UTF-8 bytes, read as text by SQLite
            (
                run_id, eval, _digest(fields), json.dumps(fields, sort_keys=True),
                tally.rollouts, tally.solved, tally.unsolved, tally.errors,
                tally.rate if tally.measured else None, low, high,
                _json_bytes(stored), _json_bytes(paired[eval]),
            ),
        )  # fmt: skip


def entries_of(records: Iterable[Mapping[str, Any]]) -> dict[str, list[list[Any]]]:
    """Each Eval's rollouts as the store keeps them (`rollout_entry`), in run order: one a
    rollout, the last one recorded, in the order of those (as `latest_per_rollout` keeps)."""
    entries = ((record[keys.EVAL], rollout_entry(record)) for record in records)
    latest = last_of_each((entry[0], (eval, entry)) for eval, entry in entries)  # a rollout id
    by_eval: dict[str, list[list[Any]]] = {}
    for eval, entry in latest.values():
        by_eval.setdefault(eval, []).append(entry)
    return by_eval


def _json_bytes(value: Any) -> bytes:
    try:  # orjson: a tenth of json's time
        return orjson.dumps(value)
    except TypeError:  # what orjson does not write (a lone surrogate): json writes it
        return json.dumps(value).encode()


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _ended_with(run_dir: Path) -> tuple[str | None, str | None, str | None]:
    """What the run's summary.json recorded when it ended: its verdict, its drift under
    candidate pins (each Eval's line, JSON) and where it stood against its checkpoint's
    published results (JSON), where it has them."""
    try:
        summary = read_json(run_dir / SUMMARY)
    except (OSError, ValueError):
        return None, None, None
    if not isinstance(summary, dict):
        return None, None, None
    drift = [
        f"{d.get(keys.EVAL)} under {d.get('candidate')}: {d.get('verdict')}"
        for d in summary.get("drift") or ()
        if isinstance(d, dict)
    ]
    published = [_beside(p) for p in summary.get(keys.PUBLISHED) or () if isinstance(p, dict)]
    published = [p for p in published if p is not None]
    return (
        verdict_line(summary),
        json.dumps(drift) if drift else None,
        json.dumps(published) if published else None,
    )


def _beside(said: Mapping[str, Any]) -> dict[str, Any] | None:
    """One published comparison as the history keeps it: the Evals, both rates, the verdict."""
    result, entry = said.get("published_result"), said.get(keys.PUBLISHED)
    rates = (said.get("rate"), said.get("published_rate"))
    if not isinstance(result, dict) or not isinstance(entry, dict):
        return None
    if not all(isinstance(r, int | float) and not isinstance(r, bool) for r in rates):
        return None
    evals = [str(e) for e in result.get("evals") or () if isinstance(e, str)]
    return {
        "evals": evals,
        keys.TASK: result.get(keys.TASK) if isinstance(result.get(keys.TASK), str) else None,
        "entry": str(entry.get(NAME, "")),
        "rate": float(rates[0]),
        "published_rate": float(rates[1]),
        "verdict": str(said.get("verdict", "")),
    }


OUTCOME_AT = 4  # where an entry holds the outcome


def rollout_entry(record: Mapping[str, Any]) -> list[Any]:
    """A rollout as the store keeps it: the columns of `rollouts` from rollout to margins, its
    Eval aside (the entry lies in its Eval's row)."""
    specs = record.get(keys.SPECS)  # a record read from JSON: its objects are dicts
    margins = (
        {name: spec.get("margin") for name, spec in specs.items() if isinstance(spec, dict)}
        if isinstance(specs, dict)
        else None
    )
    return [
        rollout_id(record),
        record.get(keys.TASK),
        record.get(keys.ARM),
        scene_text(record.get(keys.SCENE)),
        record.get(keys.OUTCOME),
        record.get(keys.STEPS),
        record.get(keys.SUCCESS_STEP),
        None if margins is None else json.dumps(margins, sort_keys=True),
    ]


def _protocol_fields(fingerprint: Mapping[str, Any], eval: str) -> dict[str, Any]:
    """An Eval's protocol as its run's fingerprint reads it, the policy left out: the run's
    fields, the Eval's, and each task's."""
    evals = _object(fingerprint.get("evals"))
    mine = _object(evals.get(eval))
    return {
        "run": _without_policy(_object(fingerprint.get("run"))),
        keys.EVAL: _without_policy(_object(mine.get("fields"))),
        "tasks": _object(mine.get("tasks")),
    }


def _object(value: Any) -> Mapping[str, Any]:
    """A fingerprint's part as an object; one of another kind (a hand-edited run.json) as none."""
    return value if isinstance(value, Mapping) else {}


def _without_policy(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if not of_policy(name)}


def _digest(value: Any) -> str:
    return hashlib.blake2b(json.dumps(value, sort_keys=True).encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class Point:
    """One run's row of an Eval, and how it moved from the run before it on its line."""

    run_id: str
    started: str | None
    policy: str
    git_revision: str | None
    command: str | None
    rollouts: int
    solved: int
    rate: float | None
    low: float | None
    high: float | None
    line: int  # which line of the Eval (0, 1, ...: a new one at each protocol change)
    change: str | None = None  # "worse" | "better": significant against the run before
    p_value: float | None = None
    changed: tuple[str, ...] = ()  # the protocol fields that differ from the line before's


@dataclass(frozen=True)
class History:
    """Each Eval's points in run order (by start), runs merged from parts counted once (the gate
    on the newest runs is history_gate's)."""

    evals: dict[str, list[Point]]
    runs: list[dict[str, Any]]
    alpha: float


def listed_runs(connection: sqlite3.Connection) -> list[dict[str, Any]]:
    """The store's runs in run order (by start), each a row of `runs` by column name; the parts
    a merged run was made from left out (the merged run counts them once)."""
    columns = (
        "run_id", "path", "started", keys.POLICY, "git_revision", keys.COMMAND, "parts",
        "verdict", "drift", "published",
    )  # fmt: skip
    runs = [
        dict(zip(columns, row, strict=True))
        for row in connection.execute(f"SELECT {', '.join(columns)} FROM runs")
    ]
    parts = {str(Path(p).resolve()) for run in runs for p in json.loads(run["parts"] or "[]")}
    if parts:  # resolving every run's path costs: only where a run was merged from parts
        runs = [r for r in runs if str(Path(r["path"]).resolve()) not in parts]
    runs.sort(key=lambda r: (r["started"] or "", r["run_id"]))
    return runs


def read_history(
    connection: sqlite3.Connection,
    root: Path,
    alpha: float = 0.05,
    records: RecordsOf | None = None,
) -> History:
    """The store's runs as lines per Eval, each step tested against the run before it (the
    rollouts read through `records`, which the gate may share, so a run is read once). The
    tests made now are kept in the store once the caller commits."""
    runs = listed_runs(connection)
    order = {r["run_id"]: i for i, r in enumerate(runs)}
    by_run = {r["run_id"]: r for r in runs}
    rows = connection.execute(
        "SELECT run_id, eval, line, fields, rollouts, solved, rate, low, high FROM evals"
    ).fetchall()
    evals: dict[str, list[tuple]] = {}
    for row in sorted((r for r in rows if r[0] in order), key=lambda r: order[r[0]]):
        evals.setdefault(row[1], []).append(row)
    records = records or RecordsOf(connection)
    found = {
        eval: _points(eval, members, by_run, records, alpha)
        for eval, members in sorted(evals.items())
    }
    return History(found, runs, alpha)


class RecordsOf:
    """An Eval's rollouts in a run, from the store, as compare reads records; and the gate's
    tests between two runs, kept once made."""

    KEPT = 4  # runs' rollouts held for the next comparison

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        # The runs read last (a line's steps and the gate's reference and newest run): read once.
        self._read: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # The steps' tests kept in the store, by (eval, before, after, alpha): read once a call.
        self.changes: dict[tuple[Any, ...], tuple[Any, Any]] | None = None

    def kept_call(self, key: tuple[str, str, str, float]) -> tuple[Any, ...] | None:
        """The gate's test of (eval, reference, newest, level), if it was made: p-value, pairs,
        lost, gained, power."""
        return self.connection.execute(
            "SELECT p_value, pairs, lost, gained, power FROM gate_calls WHERE eval = ? AND "
            "reference = ? AND newest = ? AND level = ?",
            key,
        ).fetchone()

    def kept_power(
        self, eval: str, reference: str, level: float, pairs: int
    ) -> tuple[float | None] | None:
        """The power a gate call against `reference` at `level` over `pairs` pairs was found
        to have, where one was made (any newest run: the power depends on none)."""
        return self.connection.execute(
            "SELECT power FROM gate_calls WHERE eval = ? AND reference = ? AND level = ? AND "
            "pairs = ? LIMIT 1",
            (eval, reference, level, pairs),
        ).fetchone()

    def keep_call(self, key: tuple[str, str, str, float], found: tuple[Any, ...]) -> None:
        self.connection.execute(
            "INSERT OR REPLACE INTO gate_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (*key, *found)
        )

    def __call__(self, run_id: str, eval: str) -> list[dict[str, Any]]:
        read = self._read.get((run_id, eval))
        if read is None:
            with collector_paused():  # many objects, no cycles
                read = self._rows(run_id, eval)
        self._keep((run_id, eval), read)
        return read

    def prime(self, run_id: str, paired: Mapping[str, Mapping[str, Any]]) -> None:
        """Holds a run's rollouts as just stored (each Eval's `paired_of`), so that its
        comparisons in this call do not read them back."""
        for eval, rollouts in paired.items():
            self._keep((run_id, eval), _records(eval, rollouts))

    def _keep(self, key: tuple[str, str], read: list[dict[str, Any]]) -> None:
        self._read.pop(key, None)
        self._read[key] = read  # the newest used last
        while len(self._read) > self.KEPT:
            del self._read[next(iter(self._read))]

    def _rows(self, run_id: str, eval: str) -> list[dict[str, Any]]:
        found = self.connection.execute(
            "SELECT paired FROM evals WHERE run_id = ? AND eval = ?", (run_id, eval)
        ).fetchone()
        paired = loads(found[0], f"the store's rollouts of {run_id}") if found and found[0] else {}
        try:
            return _records(eval, paired)
        except (KeyError, IndexError, TypeError, ValueError) as error:  # not this version's
            raise sqlite3.DatabaseError(f"the store's rollouts of {run_id}: {error}") from None


def paired_of(eval: str, entries: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """An Eval's rollouts (`rollout_entry`s) as comparisons pair them, in few objects: a task,
    arm and outcome a rollout as indexes into lists of each, its scene's key as text."""
    tasks: dict[str, int] = {}
    arms: dict[str, int] = {}
    task, arm, outcome, key = [], [], [], []
    for _, name, arm_name, scene, result, *_ in entries:
        task.append(tasks.setdefault(name, len(tasks)))
        arm.append(arms.setdefault(arm_name, len(arms)) if arm_name else -1)
        outcome.append(OUTCOMES.index(result))
        key.append(scene_key_of(eval, name, scene))
    return {"tasks": list(tasks), "arms": list(arms), keys.TASK: task, keys.ARM: arm,
            keys.OUTCOME: outcome, "key": key}  # fmt: skip


def _records(eval: str, paired: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An Eval's stored rollouts (`paired_of` them) as comparisons read records: each with its
    Eval, task, arm (where it ran under one), outcome and its scene's key; the names shared,
    not a string a rollout."""
    if not paired:
        return []
    tasks, arms = paired["tasks"], paired["arms"]
    records = []
    for task, arm, outcome, key in zip(
        paired[keys.TASK], paired[keys.ARM], paired[keys.OUTCOME], paired["key"], strict=True
    ):
        record = {keys.EVAL: eval, keys.TASK: tasks[task], SCENE_KEY: key,
                  keys.OUTCOME: OUTCOMES[outcome]}  # fmt: skip
        if arm >= 0:
            record[keys.ARM] = arms[arm]
        records.append(record)
    return records


def _points(
    eval: str,
    members: Sequence[tuple],
    runs: Mapping[str, Mapping[str, Any]],
    records: RecordsOf,
    alpha: float,
) -> list[Point]:
    points: list[Point] = []
    line, previous = -1, None
    for run_id, _, digest, fields, rollouts, solved, rate, low, high in members:
        run = runs[run_id]
        change, p_value, changed = None, None, ()
        if previous is None or previous[2] != digest:
            line += 1
            if previous is not None:
                changed = _changed(json.loads(previous[3]), json.loads(fields))
        else:
            change, p_value = _tested(eval, previous[0], run_id, records, alpha)
        points.append(
            Point(
                run_id, run["started"], run[keys.POLICY], run["git_revision"], run[keys.COMMAND],
                rollouts, solved, rate, low, high, line, change, p_value, changed,
            )
        )  # fmt: skip
        previous = (run_id, None, digest, fields)
    return points


def _tested(
    eval: str, before: str, after: str, records: RecordsOf, alpha: float
) -> tuple[str | None, float | None]:
    """`report compare`'s pooled test of the Eval between two runs: 'worse', 'better' or None
    (not significant at `alpha`), and its p-value; made once and kept in the store (a run read
    again takes its tests with it)."""
    key = (eval, before, after, alpha)
    store = records.connection
    if records.changes is None:  # every kept test, read once a call
        records.changes = {
            tuple(found[:4]): (found[4], found[5])
            for found in store.execute(
                "SELECT eval, before, after, alpha, change, p_value FROM changes"
            )
        }
    kept = records.changes.get(key)
    if kept is not None:
        return kept
    row = pooled_row(eval, records(before, eval), records(after, eval), alpha)
    change, p_value = None, None
    if row is not None:
        change = "worse" if row.regression else "better" if row.improvement else None
        p_value = row.adjusted_p
    store.execute("INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?)", (*key, change, p_value))
    records.changes[key] = (change, p_value)
    return change, p_value


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """The protocol fields that differ between two lines' runs, named as `run.X`, `eval.X`,
    `tasks` (which tasks ran, or their instructions and timeouts)."""
    found = []
    for part in ("run", keys.EVAL):
        mine, theirs = before.get(part) or {}, after.get(part) or {}
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                found.append(
                    f"{part}.{name}: {_shown(mine.get(name))} -> {_shown(theirs.get(name))}"
                )
    if (before.get("tasks") or {}) != (after.get("tasks") or {}):
        found.append(
            "tasks: " + _tasks_changed(before.get("tasks") or {}, after.get("tasks") or {})
        )
    return tuple(found)


def _shown(value: Any) -> str:
    text = "(not set)" if value is None else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tasks_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    altered = sorted(t for t in set(before) & set(after) if before[t] != after[t])
    said = [
        *([f"added {', '.join(added[:3])}{'...' if len(added) > 3 else ''}"] if added else []),
        *(
            [f"left out {', '.join(removed[:3])}{'...' if len(removed) > 3 else ''}"]
            if removed
            else []
        ),
        *([f"{len(altered)} changed (instruction or timeout)"] if altered else []),
    ]
    return "; ".join(said)


def success_per_eval(connection: sqlite3.Connection) -> list[tuple[str, str, int, int, float]]:
    """The documented query: success per Eval per run, in run order."""
    return connection.execute(SUCCESS_PER_EVAL).fetchall()


SUCCESS_PER_EVAL = """
SELECT runs.run_id, evals.eval, evals.solved, evals.rollouts, evals.rate
FROM evals JOIN runs USING (run_id)
ORDER BY runs.started, runs.run_id, evals.eval
"""
