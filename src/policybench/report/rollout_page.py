"""What a rollout's report page embeds of its trace (the file as it is, safe inside a script
element), why a rollout has none, and the plotting script every rollout page loads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from markupsafe import Markup

from policybench import keys
from policybench.run.files import write_file
from policybench.run.layout import OutsideRun, inside

PLOTS_JS = "rollout_plots.js"  # written once beside the rollout pages, which load it


@dataclass(frozen=True)
class PageTrace:
    """A rollout page's trace: the document to embed (None: no plots, and why)."""

    embedded: Markup | None
    missing: str = ""
    left_out: tuple[tuple[str, str], ...] = ()  # observation entries not kept, and why


def page_trace(run_dir: Path, record: Mapping[str, Any]) -> PageTrace:
    name = record.get(keys.ROLLOUT_TRACE)
    if not isinstance(name, str):
        why = "the rollout made no step" if record.get(keys.STEPS) == 0 else "no trace recorded"
        return PageTrace(None, f"{why} (runs write one per rollout unless --no-rollout-traces)")
    try:
        path = inside(run_dir, name)
    except OutsideRun as refused:
        return PageTrace(None, f"its trace is not read: {refused}")
    try:
        text = path.read_text(encoding="ascii")
        left_out = json.loads(text).get("state_left_out") or {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as error:
        return PageTrace(None, f"its trace {name} cannot be read ({type(error).__name__})")
    # Inside <script>, "</" would end the element early: JSON allows "<" spelled as \u003c.
    safe = text.replace("<", "\\u003c")
    return PageTrace(Markup(safe), "", tuple(sorted(left_out.items())))


def write_plots_js(pages: Path) -> str:
    """Copies the plotting script beside the rollout pages; returns the name they load it by."""
    source = resources.files("policybench.report").joinpath("templates", PLOTS_JS)
    write_file(pages / PLOTS_JS, source.read_text(encoding="utf-8"))
    return PLOTS_JS
