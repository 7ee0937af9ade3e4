"""The report's histograms say, under each chart, how many rollouts it leaves out and why: no
steps under the episode-length and time-per-step charts, no model calls under the model-call
chart (a rollout that stepped without calling a model has a length but no call time)."""

from __future__ import annotations

import json
import re

import numpy as np

from policybench.cli import main as policybench_main
from policybench.report.html import histogram


def record(outcome: str, steps: int, infer_ms_mean: float | None) -> dict:
    calls = 0 if infer_ms_mean is None else steps
    return {
        "eval": "e",
        "task": "t",
        "outcome": outcome,
        "steps": steps,
        "sim_s": steps * 0.1,
        "wall_s": steps * 0.01,
        "model_calls": calls,
        "infer_ms_mean": infer_ms_mean,
        "reason": "",
    }


def test_each_histogram_says_why_the_rollouts_it_leaves_out_have_no_value(tmp_path):
    records = [
        record("solved", 10, 2.0),
        record("unsolved", 20, 3.0),
        record("solved", 12, None),  # a policy that needs no model call
        record("error", 0, None),  # ended before its first step
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert policybench_main(["report", "html", str(tmp_path)]) == 0
    html = (tmp_path / "index.html").read_text()
    figures = re.findall(r'aria-label="([^"]+) histogram".*?</svg>\s*(.*?)</figure>', html, re.S)
    captions = {title: re.sub(r"<[^>]+>", "", caption).strip() for title, caption in figures}
    assert captions == {
        "Episode length": "1 rollout not shown: no steps",
        "Wall time per step": "1 rollout not shown: no steps",
        "Model call wall time (rollout mean)": "2 rollouts not shown: no model calls",
    }


def test_a_histogram_of_values_a_rounding_apart_is_one_bin():
    """Two wall times that differ in the last bits of a float (as 0.1 * 3 and 0.3 do) are one
    value to the eye; numpy cannot cut so narrow a range into two bins, and the report once
    failed at the end of a run on it."""
    records = [record("solved", 1, None), record("unsolved", 1, None)]
    records[0]["ms"], records[1]["ms"] = 1.0, float(np.nextafter(1.0, 2.0))
    chart = histogram("Wall time per step", "ms", "no steps", records, lambda r: r["ms"])
    assert len(chart.edges) == 2
    assert chart.counts["solved"] == (1,) and chart.counts["unsolved"] == (1,)
