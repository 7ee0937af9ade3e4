"""A run being continued (`--resume`): its directory, the records it carries over, and what
reading them found."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Resumed:
    """The run being continued: its directory, its records with a final outcome by node id,
    and the protocol differences that were allowed."""

    run_dir: Path
    carried: Mapping[str, dict[str, Any]]
    all_records: tuple[dict[str, Any], ...]
    problems: tuple[str, ...]
