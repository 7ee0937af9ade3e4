"""The report's Jinja2 templates, autoescaped, compiled once per version of them and kept in the
user's own cache (`$XDG_CACHE_HOME/policybench/templates`, made 0700): compiling the index page
was half a second of every report. A cache folder that is not the user's own, or not private, is
not used (compiled bytecode is code)."""

from __future__ import annotations

from typing import Any

import jinja2

from policybench.cache import cache_home, is_private, private_folder


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
    folder = cache_home() / "templates"
    try:
        found = private_folder(folder)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder)) if is_private(found) else None
