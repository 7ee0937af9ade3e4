"""The Eval's expert beside a rollout it does not drive, paid for only when a diagnosis reads it.

While a sampled rollout runs (--expert-shadow: the first of each task by default), an
ObservationKeeper keeps a copy of each observation's entries the expert reads (the Eval's
`expert_reads`) and, when the rollout ends, writes them beside its trace: copies, nothing of the
expert runs on the rollout's clock. After the run, a diagnosis that wants the expert's action at
each observation the policy saw (report/diagnosis.py) replays the kept observations through a
fresh expert (`replay`): an expert is a function of the observations it has seen in order, so
the replay is what it would have chosen watching live (a test holds the two equal).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from policybench import keys
from policybench.policy.base import Model, Observation, SessionContext
from policybench.run.files import DECODED_LIMIT, make_folders, write_file

KEPT_FORMAT = "policybench-kept-observations/1"
META = "meta"  # the kept file's member holding what the replay's session is opened with


@dataclass
class ObservationKeeper:
    """A harness observer: a copy of each observation's `reads` entries (every entry if empty),
    step by step; an entry missing at some step is named in `missing`, not kept."""

    reads: Sequence[str] = ()
    kept: dict[str, list[np.ndarray]] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)

    def __call__(self, time_ns: int, obs: Observation) -> None:
        for name in self.reads or obs:
            value = obs.get(name)
            if value is None:
                self.missing.add(name)
            else:
                self.kept.setdefault(name, []).append(np.array(value))  # a copy: obs may be reused

    def restart(self) -> None:
        """Forgets what it kept: the rollout runs again from its start."""
        self.kept.clear()
        self.missing.clear()

    def write(
        self, path: Path, steps: int, context: SessionContext, expert: Mapping[str, str | None]
    ) -> str | None:
        """Writes the first `steps` observations, with what opens the replay's session
        (`context`) and where the Eval, and so its expert, is found again after the run
        (`expert`: its name, its `module:attribute`, the folder of the module); returns why it
        kept nothing, or None."""
        entries = {name: values[:steps] for name, values in self.kept.items()}
        short = sorted(self.missing | {n for n, v in entries.items() if len(v) < steps})
        if short or not steps:
            return f"observations without {', '.join(short)}" if short else "no step was taken"
        meta = {
            "format": KEPT_FORMAT,
            "expert": dict(expert),
            keys.INSTRUCTION: context.instruction,
            keys.CONTROL_HZ: context.control_hz,
            "fields": dict(context.fields),
            keys.STEPS: steps,
        }
        buffer = io.BytesIO()
        arrays = {f"obs/{name}": np.stack(values) for name, values in entries.items()}
        np.savez_compressed(buffer, **{META: np.array(json.dumps(meta))}, **arrays)
        make_folders(path.parent.parent, path.parent.name)
        write_file(path, buffer.getvalue())
        return None


@dataclass(frozen=True)
class Kept:
    """A kept file read back: the replay's session `context`, where the Eval whose `expert`
    replays is found, and each entry's observations, a row per step."""

    context: SessionContext
    expert: Mapping[str, str | None]
    observations: Mapping[str, np.ndarray]
    steps: int


def read_kept(path: Path) -> Kept:
    """The kept observations at `path`; ValueError naming it if it is not such a file, or its
    members would decompress to more than DECODED_LIMIT bytes (checked before any is read)."""
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
        if declared > DECODED_LIMIT:
            raise ValueError(f"its members would decompress to {declared:,} bytes")
        with np.load(path, allow_pickle=False) as members:
            meta = json.loads(str(members[META]))
            if not isinstance(meta, dict) or meta.get("format") != KEPT_FORMAT:
                raise ValueError(f"it is not of format {KEPT_FORMAT!r}")
            observations = {
                name.removeprefix("obs/"): members[name]
                for name in members.files
                if name.startswith("obs/")
            }
        context = SessionContext(meta[keys.INSTRUCTION], meta[keys.CONTROL_HZ], meta["fields"])
        return Kept(context, dict(meta["expert"]), observations, int(meta[keys.STEPS]))
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path} is not a readable file of kept observations: {error}") from None


def replay(model: Model, kept: Kept) -> tuple[np.ndarray | None, str | None]:
    """The expert's first waypoint at each kept observation (a row per step), or None and why
    it stopped: an expert that raises ends the replay, never the report that asked."""
    actions: list[np.ndarray] = []
    try:
        source = model.open(kept.context)
        for step in range(kept.steps):
            chunk = source({name: rows[step] for name, rows in kept.observations.items()})
            actions.append(np.asarray(chunk.actions[0], np.float32).reshape(-1))
    except Exception as error:  # an expert's failure is the diagnosis's to say, not to raise
        return None, f"{type(error).__name__}: {error}"
    return np.stack(actions), None
