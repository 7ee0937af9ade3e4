"""How messages and pages list things: the first few of many, and how many more."""

from __future__ import annotations

from collections.abc import Sequence


def listed(names: Sequence[str], most: int = 3) -> str:
    """`names` joined with commas, the first `most` of them and how many more."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"
