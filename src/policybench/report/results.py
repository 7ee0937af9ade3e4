"""results.jsonl: one line per finished rollout, appended as it finishes, so an interrupted or
crashed run keeps every rollout that completed. `reports/latest` points at the newest run."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import IO, Any

RESULTS = "results.jsonl"
LATEST = "latest"


class ResultsWriter:
    """Opens `<report_dir>/<run-id>/results.jsonl` on the first record."""

    def __init__(self, report_dir: Path) -> None:
        self.report_dir = report_dir
        self.run_dir: Path | None = None
        self._file: IO[str] | None = None

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            self.run_dir = _new_run_dir(self.report_dir)
            self._file = (self.run_dir / RESULTS).open("w", encoding="utf-8")
            _point_latest(self.report_dir, self.run_dir)
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / RESULTS


def _new_run_dir(report_dir: Path) -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        candidate = report_dir / (stamp if attempt == 0 else f"{stamp}-{attempt}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"could not create a new run directory under {report_dir}")


def _point_latest(report_dir: Path, run_dir: Path) -> None:
    link = report_dir / LATEST
    staging = report_dir / f".{LATEST}-{os.getpid()}"
    staging.unlink(missing_ok=True)
    staging.symlink_to(run_dir.name, target_is_directory=True)
    os.replace(staging, link)


def read_results(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
