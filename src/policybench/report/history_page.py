"""The history's page, `index.html` in the folder of runs: a row per run (when, policy, commit,
command, each Eval's success with its interval, the changes found, a link to its report), and
per Eval a plot of success over runs with its interval as a band, a break where the protocol
changed, and a mark where a change was significant. It opens from disk, as the run reports do."""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.report.history import INDEX, History, Point
from policybench.report.history_gate import Gate
from policybench.report.jinja import environment
from policybench.run.files import write_file

WIDTH, HEIGHT, PAD = 720, 180, 36  # a plot's size and its margin for the axis labels
ROWS = 30  # the newest runs the table shows in full: the page stays bounded over a year


@dataclass(frozen=True)
class Plot:
    eval: str
    segments: list[dict[str, Any]]  # per line: its polyline and band
    marks: list[dict[str, Any]]  # significant changes: x, y, worse/better, title
    breaks: list[dict[str, Any]]  # protocol changes: x, title
    ticks: list[dict[str, Any]]  # run ids along the bottom
    published: dict[str, Any] | None = None  # the published rate its newest run stood beside


def plot_of(eval: str, points: list[Point], published: dict[str, Any] | None = None) -> Plot:
    count = max(len(points) - 1, 1)

    def x(i: int) -> float:
        return round(PAD + (WIDTH - 2 * PAD) * (i / count if len(points) > 1 else 0.5), 1)

    def y(rate: float | None) -> float:
        return round(HEIGHT - PAD / 2 - (HEIGHT - PAD) * (rate or 0.0), 1)

    segments, marks, breaks = [], [], []
    for line in sorted({p.line for p in points}):
        # A run whose rollouts all errored has no rate: no point on the line.
        mine = [(i, p) for i, p in enumerate(points) if p.line == line and p.rate is not None]
        upper = [f"{x(i)},{y(p.high)}" for i, p in mine]
        lower = [f"{x(i)},{y(p.low)}" for i, p in reversed(mine)]
        segments.append(
            {
                "points": " ".join(f"{x(i)},{y(p.rate)}" for i, p in mine),
                "band": " ".join(upper + lower),
                "dots": [{"x": x(i), "y": y(p.rate), "title": _title(p)} for i, p in mine],
            }
        )
    for i, point in enumerate(points):
        if point.change is not None and point.rate is not None:
            marks.append(
                {"x": x(i), "y": y(point.rate), "change": point.change, "title": _title(point)}
            )
        if point.changed:
            breaks.append({"x": round(x(i) - (WIDTH - 2 * PAD) / count / 2, 1),
                           "title": "protocol changed: " + "; ".join(point.changed)})  # fmt: skip
    ticks = [{"x": x(i), "label": p.run_id} for i, p in enumerate(points)]
    line = None
    if published is not None:
        rate = published["published_rate"]
        title = f"{rate:.1%} published for {published['entry']}"
        line = {"y": y(rate), "title": title, "x1": PAD, "x2": WIDTH - PAD}
    return Plot(eval, segments, marks, breaks, ticks, line)


def published_of(history: History) -> dict[str, dict[str, Any]]:
    """Per Eval, the published result of one Eval its newest run that had one stood beside."""
    found: dict[str, dict[str, Any]] = {}
    for run in history.runs:  # oldest first: the newest one is kept
        for said in json.loads(run.get(keys.PUBLISHED) or "[]"):
            if len(said.get("evals") or ()) == 1 and said.get(keys.TASK) is None:
                found[said["evals"][0]] = said
    return found


def _title(point: Point) -> str:
    rate = "-" if point.rate is None else f"{point.rate:.1%}"
    interval = "" if point.low is None else f" [{point.low:.1%}, {point.high:.1%}]"
    said = f"{point.run_id}: {point.solved}/{point.rollouts} solved, {rate}{interval}"
    if point.change is not None:
        said += f"; significantly {point.change} than the run before (p = {point.p_value:.3g})"
    return said


def write_page(root: Path, history: History, gate: Gate) -> Path:
    env = environment()
    env.filters["pct"] = lambda value, digits=1: "-" if value is None else f"{value:.{digits}%}"
    env.filters["fromjson"] = json.loads
    rows = _rows(root, history)
    published = published_of(history)
    html = env.get_template("history.html.j2").render(
        history=history,
        gate=gate,
        rows=rows,
        older=_older(root, history),
        evals=list(history.evals),
        plots=[
            plot_of(eval, points, published.get(eval)) for eval, points in history.evals.items()
        ],
        width=WIDTH,
        height=HEIGHT,
        pad=PAD,
    )
    path = root / INDEX
    write_file(path, html)
    return path


def _rows(root: Path, history: History) -> list[dict[str, Any]]:
    """A row per run of the newest ROWS, newest first: its cells per Eval (the point, if the
    run ran it)."""
    points = {(eval, p.run_id): p for eval, ps in history.evals.items() for p in ps}
    rows = []
    for run in history.runs[::-1][:ROWS]:
        report = Path(run["path"]) / "index.html"
        link = relative_link(report, root) if report.is_file() else None
        rows.append(
            {
                **run,
                "link": link,
                "cells": [points.get((eval, run["run_id"])) for eval in history.evals],
            }
        )
    return rows


def _older(root: Path, history: History) -> list[dict[str, str]]:
    """The runs before the newest ROWS, newest first, each a link to its folder."""
    return [
        {"run_id": run["run_id"], "link": relative_link(Path(run["path"]), root) + "/"}
        for run in history.runs[::-1][ROWS:]
    ]


def relative_link(path: Path, root: Path) -> str:
    """A link from a page in `root` to `path`, percent-encoded and starting with `./` or `../`:
    a folder named `javascript:...` is a path here, never a scheme."""
    inside, base = str(path), os.path.join(str(root), "")
    if inside.startswith(base):  # a path under root (every run's): read off, without the disk
        relative = Path(inside[len(base) :]).as_posix()
    else:
        relative = Path(os.path.relpath(path, root)).as_posix()
    quoted = urllib.parse.quote(relative)
    return quoted if quoted.startswith("../") else f"./{quoted}"
