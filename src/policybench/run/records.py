"""A rollout's record, as results.jsonl holds it, built in one place whichever front ran it, and
the one rule for a rollout recorded more than once: its latest record."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policybench import keys
from policybench.record.episode import Episode, Outcome, OutcomeKind
from policybench.record.realtime import rollout_realtime

# What every record holds, None where the rollout never said (a worker that crashed first).
REPORTED_BY_THE_RUN = (
    keys.POLICY,
    keys.PACKAGES,
    keys.WORKER,
    keys.PEAK_RSS_MB,
    keys.ENVS_BUILT,
    keys.ROLLOUT_TRACE,
)


def rollout_record(
    planned: Mapping[str, Any], episode: Episode, added: Mapping[str, Any]
) -> dict[str, Any]:
    """One rollout's record, as results.jsonl holds it: `planned` (see planned_record), what
    its Episode found and what the run `added` (the process that ran it, earlier attempts,
    recorders' fields). Every record has the same fields, whichever way it was made."""
    return {
        **dict.fromkeys(REPORTED_BY_THE_RUN),
        **episode.record(),
        **rollout_realtime(episode.statics, episode.calls, episode.steps),
        **planned,
        **added,
    }


# What only a rollout that ran reports of itself: None in the record of one whose worker crashed.
NEVER_REPORTED_BY_A_CRASH = (keys.STEPS, keys.SIM_S, keys.WALL_S, keys.MODEL_CALLS, keys.SUM_REWARD)


def crashed_record(
    planned: Mapping[str, Any], reason: str, added: Mapping[str, Any]
) -> dict[str, Any]:
    """The error record of a rollout whose worker crashed: `reason` says how, and what the
    rollout never reported is None (not 0: it may have made steps before the crash)."""
    crash = Episode({}, (), Outcome(OutcomeKind.ERROR, reason), 0.0, 0.0, None)
    return {**rollout_record(planned, crash, added), **dict.fromkeys(NEVER_REPORTED_BY_A_CRASH)}


def latest_per_rollout(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per rollout (node id): the last one written (records in the order of those)."""
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        latest.pop(record[keys.NODEID], None)
        latest[record[keys.NODEID]] = record
    return list(latest.values())
