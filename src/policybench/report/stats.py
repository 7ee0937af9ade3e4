"""Success-rate statistics: counts per Eval and task with Wilson score intervals (scipy), and
the spread of episode lengths, sim time and wall time per step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from policybench import keys
from policybench.record.realtime import Realtime
from policybench.run.records import Tally, tally_of


@dataclass(frozen=True)
class Spread:
    """How a quantity is distributed over rollouts."""

    count: int
    mean: float
    median: float
    p90: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        array = np.asarray(values, dtype=np.float64)
        return cls(
            count=len(array),
            mean=float(array.mean()),
            median=float(np.median(array)),
            p90=float(np.percentile(array, 90)),
            low=float(array.min()),
            high=float(array.max()),
        )


def step_wall_ms(record: Mapping[str, Any]) -> float | None:
    """Wall time per control step of a rollout (policy, codecs and simulator together), in ms."""
    steps = record.get(keys.STEPS) or 0
    return 1000.0 * record[keys.WALL_S] / steps if steps else None


def latency_setting(record: Mapping[str, Any]) -> str:
    """The inference latency a rollout was charged with (`none`, seconds, `measured`)."""
    policy = record.get(keys.POLICY) or {}
    return str(policy.get(keys.INFERENCE_LATENCY, "not recorded"))


def infer_ms(record: Mapping[str, Any]) -> float | None:
    """A rollout's mean model-call wall time (None when it made no model calls)."""
    return record.get(keys.INFER_MS_MEAN)


@dataclass(frozen=True)
class GroupStats:
    """Everything the report says about one group of rollouts (an Eval, a task, the run)."""

    tally: Tally
    steps: Spread | None
    sim_s: Spread | None
    step_wall_ms: Spread | None
    infer_ms: Spread | None  # of each rollout's mean model-call wall time
    latency: tuple[str, ...]
    realtime: Realtime | None = None  # in a run with latency

    @classmethod
    def of(cls, records: Sequence[Mapping[str, Any]]) -> GroupStats:
        steps, sim_s, walls, infer, timed = [], [], [], [], []
        policies: dict[int, Any] = {}  # records share their policy's description: read once
        for record in records:  # one pass: a large run's rows each read 20,000 records
            get = record.get
            if (count := get(keys.STEPS)) is not None:
                steps.append(count)
            if count:  # step_wall_ms, inline
                walls.append(1000.0 * record[keys.WALL_S] / count)
            if (seconds := get(keys.SIM_S)) is not None:
                sim_s.append(seconds)
            if (ms := get(keys.INFER_MS_MEAN)) is not None:  # infer_ms, inline
                infer.append(ms)
            policy = get(keys.POLICY)
            policies.setdefault(id(policy), record)
            if get(keys.CALL_LATENCY_MS) is not None:  # what Realtime.of reads
                timed.append(record)
        latency = {latency_setting(record) for record in policies.values()}
        return cls(
            tally=tally_of(records),
            steps=Spread.of(steps),
            sim_s=Spread.of(sim_s),
            step_wall_ms=Spread.of(walls),
            infer_ms=Spread.of(infer),
            latency=tuple(sorted(latency)),
            realtime=Realtime.of(timed),
        )


def group(
    records: Iterable[Mapping[str, Any]], *fields: str
) -> dict[tuple[str, ...], list[Mapping[str, Any]]]:
    """Records by the values of `fields`, groups in sorted order."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    if len(fields) == 1:  # the usual case, without a generator a record
        [field] = fields
        for record in records:
            groups.setdefault((str(record[field]),), []).append(record)
    else:
        for record in records:
            groups.setdefault(tuple(str(record[name]) for name in fields), []).append(record)
    return dict(sorted(groups.items()))
