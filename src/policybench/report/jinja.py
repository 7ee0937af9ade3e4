"""The report's Jinja2 templates, autoescaped, compiled once per version of them and kept in the
user's own cache (`$XDG_CACHE_HOME/policybench/templates`, made 0700): compiling the index page
was half a second of every report. A cache folder that is not the user's own, or not private, is
not used (compiled bytecode is code)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import jinja2


def environment(**options: Any) -> jinja2.Environment:
    """An Environment of the report's templates, with `options` (trim_blocks, ...)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("policybench.report", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
        bytecode_cache=_cache(),
        **options,
    )


def _cache() -> jinja2.BytecodeCache | None:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    folder = Path(base) / "policybench" / "templates"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = folder.lstat()
    except OSError:
        return None
    mine = found.st_uid == os.geteuid() and stat.S_ISDIR(found.st_mode)
    if not mine or found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))
