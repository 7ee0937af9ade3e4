"""One preflight per Eval (and arm, in an A/B run) per run, shared by the run's processes through
files in the run directory (`preflight/<eval>.json`, `preflight/<eval>@<arm>.json`): the first
process to reach an Eval runs it under a file lock, the others read it; the controller's summary
shows each (`preflight_lines`) ahead of the results, naming its arm."""

from __future__ import annotations

import fcntl
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from policybench import keys
from policybench.preflight import Preflight, Verdict, latency_notes
from policybench.pytest_plugin.arms import sealed_fields
from policybench.pytest_plugin.rundir import run_dir_of, settings_of
from policybench.run.arms import KEPT, sealed_description
from policybench.run.files import make_folders, open_append, read_json, write_file
from policybench.run.layout import PREFLIGHTS

ARM = "arm"  # beside a preflight's own fields in its file: the arm whose policy it asked


class PreflightStore:
    def __init__(
        self, directory: Path, blinded: bool = False, kept_fields: Sequence[str] = KEPT
    ) -> None:
        self.directory = directory
        self.blinded = blinded  # under --blind, a file names its arm's letter, not its policy
        self.kept_fields = kept_fields  # what a blinded file keeps of its policy's description
        self._known: dict[tuple[str, str | None], Preflight] = {}

    def get(self, eval_name: str, arm: str | None, run: Callable[[], Preflight]) -> Preflight:
        """The run's preflight of `eval_name` (under `arm`, in an A/B run), run now if no
        process has yet. An inconclusive one (the server could not be asked) is kept by this
        process only."""
        known = self._known.get((eval_name, arm))
        if known is not None:
            return known
        make_folders(self.directory.parent, self.directory.name)
        name = file_name(eval_name if arm is None else f"{eval_name}@{arm}")
        path = self.directory / f"{name}.json"
        with open_append(self.directory / f".{name}.lock") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                found = read(path)[0]
            else:
                found = run()
                if found.verdict is not Verdict.INCONCLUSIVE:
                    stored = found
                    if self.blinded:
                        sealed = sealed_description(found.policy, arm, self.kept_fields)
                        notes = found.notes
                        if keys.INFERENCE_LATENCY not in self.kept_fields:  # a sweep's
                            notes = tuple(n for n in notes if n not in latency_notes(notes))
                        stored = replace(found, policy=sealed, notes=notes)
                    data = {**stored.as_json(), ARM: arm}
                    write_file(path, json.dumps(data, indent=1, sort_keys=True))
        self._known[(eval_name, arm)] = found
        return found


def read(path: Path) -> tuple[Preflight, str | None]:
    """A stored preflight and the arm it asked (None in a one-policy run)."""
    data = read_json(path)
    arm = data.pop(ARM, None)
    return Preflight.from_json(data), arm


def file_name(eval_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", eval_name)


def store_of(config: pytest.Config) -> PreflightStore:
    settings = settings_of(config)
    blinded, kept = settings.blinding is not None, sealed_fields(settings.arms)
    return PreflightStore(run_dir_of(config) / PREFLIGHTS, blinded, kept)


def preflight_lines(config: pytest.Config) -> list[tuple[str, bool]]:
    """The run's preflights, one line each, and whether it failed: what the run's summary on the
    terminal says first (they ran before any rollout did)."""
    directory = run_dir_of(config) / PREFLIGHTS
    found = [read(path) for path in sorted(directory.glob("*.json"))] if directory.is_dir() else []
    return [(preflight.line(arm), preflight.failed) for preflight, arm in found]
