"""What makes a run reproducible, in its run directory's run.json: the command, the host, the
versions, the git revision, the run's settings (named in keys.py) and its protocol's fingerprint."""

from __future__ import annotations

import json
import platform
import shlex
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from policybench.run.files import read_json, write_file

RUN_INFO = "run.json"


@dataclass(frozen=True)
class RunInfo:
    """What makes a run reproducible, recorded once per run (the per-rollout statics carry the
    policy's own description and the suites' package versions)."""

    run_id: str
    started: str
    command: str
    host: str
    python: str
    policybench: str
    git_revision: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)  # record.protocol's as_json

    @classmethod
    def now(cls, run_id: str, args: Sequence[str], cwd: Path, settings: Mapping[str, Any]):
        from importlib import metadata  # ~20 ms, which a wrapped loop's import need not pay

        return cls(
            run_id=run_id,
            started=datetime.now().astimezone().isoformat(timespec="seconds"),
            command=shlex.join(["pytest", *args]),
            host=socket.gethostname(),
            python=platform.python_version(),
            policybench=metadata.version("policybench"),
            git_revision=git_revision(cwd),
            settings=dict(settings),
        )

    @classmethod
    def load(cls, run_dir: Path) -> RunInfo | None:
        """The run's run.json (None without one); ValueError naming the file when it is not
        one a run wrote (not JSON, not an object, a field missing or of the wrong kind)."""
        path = run_dir / RUN_INFO
        if not path.is_file():
            return None
        try:
            data = read_json(path)
            if not isinstance(data, dict):
                raise TypeError(f"a JSON object, got {type(data).__name__}")
            info = cls(**data)
            for name in ("settings", "fingerprint"):
                if not isinstance(getattr(info, name), Mapping):
                    raise TypeError(f"{name} must be an object")
            for name in (
                "run_id", "started", "command", "host", "python", "policybench", "git_revision"
            ):  # fmt: skip
                if not isinstance(getattr(info, name), str):
                    raise TypeError(f"{name} must be a string")
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"{path} is not a run's run.json ({error}); restore it, or delete it to treat "
                "the folder as a run without one"
            ) from None
        return info

    def write(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_file(run_dir / RUN_INFO, json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")


def git_revision(cwd: Path) -> str:
    """`git describe --always --dirty` of the checkout the run started in, or why there is none."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({type(error).__name__})"
    return done.stdout.strip() if done.returncode == 0 else "not a git checkout"
