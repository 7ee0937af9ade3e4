"""The user's own cache, `$XDG_CACHE_HOME/policybench` (else `~/.cache/policybench`): the
interpreters built for isolated envs, the env server's scripts and the report's compiled
templates; and folders in it that only this user may write (what runs from them is code)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "policybench"


def private_folder(path: Path) -> os.stat_result:
    """Makes `path` (0700, its parents as needed) unless something is there; returns what is
    there, for `is_private` to judge."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    return path.lstat()


def is_private(found: os.stat_result) -> bool:
    """Whether `found` is a folder this user owns that no one else may write."""
    return (
        stat.S_ISDIR(found.st_mode)
        and found.st_uid == os.getuid()
        and not found.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )
