"""The report's table of rollouts at any size: its rows as compact data that the index draws a
screen at a time (filters, search and sorting work over every row), and which rollouts get a
page of their own. A run of up to PAGES_ALL rollouts gets a page for each; a larger one for its
errors, its unsolved rollouts and those that broke a spec, then a sample of the solved ones
spread over its tasks, PAGES_LARGE in all unless every page is asked for (`--all-pages`)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence, Set
from typing import Any

import orjson
from markupsafe import Markup

from policybench import keys
from policybench.report.stats import step_wall_ms
from policybench.trajectory.library import violated

PAGES_ALL = 2000  # a run of up to this many rollouts gets a page for each
PAGES_LARGE = 250  # a larger run gets this many, unless every page is asked for
SCREEN_ROWS = 100  # rows the index draws at once
# The table's columns, as the index's script reads them; those of few values are sent as an
# index into their values.
COLUMNS = (
    "index", keys.EVAL, keys.ARM, keys.TASK, keys.SEED, keys.OUTCOME, keys.STEPS, keys.SIM_S,
    "wall_ms", keys.REASON, "broken", keys.VIDEO, keys.VIDEO_MISSING, "page",
)  # fmt: skip
CODED = (keys.EVAL, keys.ARM, keys.TASK, keys.OUTCOME, keys.REASON, keys.VIDEO_MISSING)


def paged(records: Sequence[Mapping[str, Any]], every: bool = False) -> set[int]:
    """The indexes of the rollouts that get a page: all of them up to PAGES_ALL (or `every`);
    else errors, unsolved and spec-breaking ones first (spread over them), then solved ones
    round-robin over their tasks, PAGES_LARGE in all."""
    if every or len(records) <= PAGES_ALL:
        return set(range(len(records)))
    errors, unsolved, broke = [], [], []  # one pass over the records
    for i, record in enumerate(records):
        outcome = record.get(keys.OUTCOME)
        if outcome == "error":
            errors.append(i)
        elif outcome == "unsolved":
            unsolved.append(i)
        elif record.get(keys.SPECS) and _broke_a_spec(record):
            broke.append(i)
    first = errors + unsolved + broke
    chosen = {first[k * len(first) // PAGES_LARGE] for k in range(min(len(first), PAGES_LARGE))}
    by_task: dict[tuple[Any, Any], list[int]] = {}
    for i, record in enumerate(records):
        if i not in chosen:
            by_task.setdefault((record.get(keys.EVAL), record.get(keys.TASK)), []).append(i)
    queues = list(by_task.values())
    while len(chosen) < PAGES_LARGE and any(queues):
        for queue in queues:
            if queue and len(chosen) < PAGES_LARGE:
                chosen.add(queue.pop(0))
    return chosen


def _broke_a_spec(record: Mapping[str, Any]) -> bool:
    return any(violated(judged) for judged in (record.get(keys.SPECS) or {}).values())


def table_columns(records: Sequence[Mapping[str, Any]], chosen: Set[int]) -> dict[str, list[Any]]:
    """The table's cells, a list a column (COLUMNS'), of `records` (those `chosen` with a page
    of their own), read column by column: as `rollout_row` says them, without a row each."""
    scenes = [record.get(keys.SCENE) or {} for record in records]
    walls = [step_wall_ms(record) for record in records]
    return {
        "index": list(range(len(records))),
        keys.EVAL: [record[keys.EVAL] for record in records],
        keys.ARM: [record.get(keys.ARM) for record in records],
        keys.TASK: [record[keys.TASK] for record in records],
        keys.SEED: [scene.get(keys.SEED, "") for scene in scenes],
        keys.OUTCOME: [record[keys.OUTCOME] for record in records],
        keys.STEPS: [record[keys.STEPS] for record in records],
        keys.SIM_S: [record[keys.SIM_S] for record in records],
        "wall_ms": [None if wall is None else round(wall, 3) for wall in walls],
        keys.REASON: [record.get(keys.REASON, "") for record in records],
        "broken": [broken(record) for record in records],
        keys.VIDEO: [record.get(keys.VIDEO) for record in records],
        keys.VIDEO_MISSING: [record.get(keys.VIDEO_MISSING) for record in records],
        "page": [page_name(i) if i in chosen else None for i in range(len(records))],
    }


def page_name(index: int) -> str:
    """The file of the rollout at `index`'s page, in the report's rollouts folder."""
    return f"{index:05d}.html"


def broken(record: Mapping[str, Any]) -> list[str]:
    """The specs a rollout violated, by name, sorted."""
    specs = record.get(keys.SPECS)
    return sorted(name for name, judged in specs.items() if violated(judged)) if specs else []


def table_data(found: Mapping[str, Sequence[Any]]) -> Markup:
    """The table's cells (`table_columns`) as JSON safe inside a script element: `columns`,
    the `values` of each coded column, and `rows` (a list per row, in `columns`' order)."""
    values: dict[str, dict[str, int]] = {name: {} for name in CODED}
    columns = []
    count = len(found["index"])
    for name in COLUMNS:
        cells = found[name]
        if name in ("page", keys.VIDEO):
            cells = [1 if cell else 0 for cell in cells]
        elif name in CODED:
            codes = values[name]
            cells = [codes.setdefault("" if c is None else str(c), len(codes)) for c in cells]
        else:
            cells = [None if isinstance(c, float) and not math.isfinite(c) else c for c in cells]
        columns.append(cells)
    document = {
        "columns": COLUMNS,
        "values": {name: list(found) for name, found in values.items()},
        "rows": list(zip(*columns, strict=True)) if count else [],  # tuples: JSON arrays
        "screen": SCREEN_ROWS,
    }
    try:  # orjson: a tenth of json's time on 20,000 rows; the same document
        text = orjson.dumps(document, default=str).decode()
    except TypeError:  # what orjson does not write (an integer past 64 bits): json writes it
        text = json.dumps(document, separators=(",", ":"), allow_nan=False, default=str)
    return Markup(text.replace("<", "\\u003c"))  # "</script>" cannot end the element early
