"""Simulated nightly runs of a stochastic policy, written into a real history store and tested by
the history gate's own code: what tests/test_history_gate.py checks and bench/history_gate.py
tabulates. MT10's shape: 10 tasks, success rates 0.1 to 0.95, the same scenes in every run."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from policybench.report.history import Point, RecordsOf, entries_of, open_store, paired_of
from policybench.report.history_gate import GateCall, called

EVAL = "metaworld-mt10"
RATES = np.linspace(0.1, 0.95, 10)  # one per task


def records_of(rng: np.random.Generator, per_task: int, drop: float = 0.0) -> list[dict[str, Any]]:
    """One run: each task's scenes (seeds 0..per_task-1) solved with its rate less `drop`."""
    return [
        {
            "nodeid": f"test_mt10[task{t}/seed={seed}]",
            "eval": EVAL,
            "task": f"task{t}",
            "scene": {"task": f"task{t}", "seed": seed},
            "outcome": "solved" if rng.random() < max(rate - drop, 0.0) else "unsolved",
        }
        for t, rate in enumerate(RATES)
        for seed in range(per_task)
    ]


class Line:
    """One Eval's line of runs in a real store, as points the gate reads."""

    def __init__(self, folder: Path) -> None:
        self.store: sqlite3.Connection = open_store(folder)
        self.records = RecordsOf(self.store)
        self.count = 0

    def add(self, records: Sequence[dict[str, Any]]) -> Point:
        self.count += 1
        run_id = f"run{self.count:05d}"
        self.store.execute("INSERT INTO runs (run_id, path) VALUES (?, ?)", (run_id, run_id))
        entries = entries_of(records)[EVAL]
        self.store.execute(  # what the gate reads: the Eval's rollouts, as the store keeps them
            "INSERT INTO evals (run_id, eval, line, fields, records, paired) "
            "VALUES (?, ?, '', '{}', ?, ?)",
            (run_id, EVAL, json.dumps(entries), json.dumps(paired_of(EVAL, entries))),
        )
        solved = sum(record["outcome"] == "solved" for record in records)
        rate = solved / len(records)
        return Point(run_id, None, "policy", None, None, len(records), solved, rate, None, None, 0)

    def call(self, reference: Point, newest: Point, call: int, level: float) -> GateCall:
        return called(EVAL, reference, newest, call, self.records, level)
