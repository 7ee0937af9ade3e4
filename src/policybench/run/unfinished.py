"""Episodes a loop left unfinished: while a wrapped loop (policybench.wrap) runs an episode, its
error record waits in a marker file; the loop removes it when the episode's record is written.
A marker whose process is gone (killed mid-episode) becomes that error record on `report html`."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.run.files import make_folder, read_json, write_file
from policybench.run.layout import VIDEOS
from policybench.run.results import RESULTS, ResultsWriter, read_results

UNFINISHED = ".episodes-in-progress"  # a run directory's folder of markers, one per open episode
PROCESS, HOST, RECORD = "pid", "host", "record"


def mark(run_dir: Path, name: str, record: Mapping[str, Any]) -> Path:
    """Leaves `record` (the error record of an episode that never ends) under `name`, written
    whole or not at all, with the process that runs the episode."""
    folder = run_dir / UNFINISHED
    make_folder(folder)
    path = folder / f"{name}.json"
    marker = {PROCESS: os.getpid(), HOST: socket.gethostname(), RECORD: dict(record)}
    write_file(path, json.dumps(marker, sort_keys=True))
    return path


def seal_unfinished(run_dir: Path) -> list[str]:
    """Appends the error record of each episode whose loop died in it (its process gone) to the
    run's results, once; says what it did, and of which episodes are still running."""
    folder = run_dir / UNFINISHED
    if not folder.is_dir():
        return []
    said, writer = [], ResultsWriter(run_dir)
    written = _identities(run_dir)
    try:
        for path in sorted(folder.glob("*.json")):
            marker = read_json(path)
            record = marker[RECORD]
            if _running(marker):
                said.append(f"{_named(record)} is still running (process {marker[PROCESS]})")
                continue
            if _identity(record) not in written:  # not already ended just before the kill
                writer.write(record)
                said.append(f"{_named(record)}: {record[keys.REASON]}; recorded as an error")
                # The video its loop was writing (named as its marker) stops mid-file: unplayable.
                # It is written under a staging name (record.video) until its episode ends.
                for partial in (run_dir / VIDEOS).glob(f".{path.stem}.mp4.*"):
                    partial.unlink(missing_ok=True)
                (run_dir / VIDEOS / f"{path.stem}.mp4").unlink(missing_ok=True)
            path.unlink()
    finally:
        writer.close()
    return said


def seal_named(run: str | Path, report_dir: Path) -> None:
    """Seals the unfinished episodes of the run `run` names (a directory or a run id under
    `report_dir`) when it has no results yet: a loop killed in its first episode leaves markers
    alone, which `report html RUN` must still find."""
    for candidate in (Path(run), report_dir / str(run)):
        if (candidate / UNFINISHED).is_dir() and not (candidate / RESULTS).is_file():
            for line in seal_unfinished(candidate):
                print(line)
            return


def _running(marker: Mapping[str, Any]) -> bool:
    if marker[HOST] != socket.gethostname():
        return False  # a run directory moved from another host: its loops are gone
    try:
        os.kill(marker[PROCESS], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True  # this process's own: a loop it still runs


def _identity(record: Mapping[str, Any]) -> str:
    fields = (keys.NODEID, keys.ROLLOUT_INDEX, keys.ARM)
    return json.dumps([record.get(name) for name in fields])


def _identities(run_dir: Path) -> set[str]:
    if not (run_dir / RESULTS).is_file():
        return set()
    return {_identity(record) for record in read_results(run_dir / RESULTS).records}


def _named(record: Mapping[str, Any]) -> str:
    return f"episode {record.get(keys.ROLLOUT_INDEX)} ({record.get(keys.NODEID)})"
