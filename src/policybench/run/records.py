"""A rollout's record, as results.jsonl holds it, built in one place whichever front ran it, and
the one rule for a rollout recorded more than once: its latest record."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

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


def rollout_id(record: Mapping[str, Any]) -> str:
    """What names a rollout in a run: its item id (the same in resumed and merged runs), or where a
    record has none, its Eval, task and index."""
    nodeid = record.get(keys.NODEID)
    if isinstance(nodeid, str) and nodeid:
        return nodeid
    return f"{record[keys.EVAL]}/{record[keys.TASK]}#{record.get(keys.ROLLOUT_INDEX)}"


# A record read back from an index (the history's store) carries its scene's key, made there from
# the scene's stored text, so that pairing its runs does not serialise every scene again.
SCENE_KEY = "_scene_key"


def scene_key(record: Mapping[str, Any]) -> str | None:
    """What identifies a rollout's scene across runs, or None when it recorded none."""
    kept = record.get(SCENE_KEY)
    if kept is not None:
        return kept
    scene = record.get(keys.SCENE)
    if not isinstance(scene, Mapping) or not scene:
        return None
    return scene_key_of(record[keys.EVAL], record[keys.TASK], scene_text(scene))


def scene_key_of(eval: str, task: str, text: str | None) -> str | None:
    """`scene_key` of a record of `eval` and `task` whose scene's `scene_text` is `text` (as an
    index stores it), without parsing it: None where that is no object or an empty one, as
    `scene_key` says."""
    if not text or not text.startswith("{") or text == "{}":
        return None
    return f"{_key_head(eval, task)}, {text}]"


def scene_text(scene: Any) -> str:
    """A scene's JSON, its keys sorted: orjson's, compact (a fifth of json's time); json's
    where orjson would not write the value as itself (an integer past 64 bits, or a NaN or an
    infinity, which orjson writes as null), so two scenes' texts are equal only where they are."""
    try:
        text = orjson.dumps(scene, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        text = None
    if text is None or "null" in text:
        return json.dumps(scene, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text


@functools.lru_cache(maxsize=4096)
def _key_head(eval: str, task: str) -> str:
    return json.dumps([eval, task])[:-1]


def latest_by_rollout(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One record per rollout (`rollout_id`): the last one written, in the order of those (a
    rollout recorded again, as a resumed run's retried one, takes its new place)."""
    return last_of_each((rollout_id(record), record) for record in records)


T = TypeVar("T")


def last_of_each(named: Iterable[tuple[str, T]]) -> dict[str, T]:
    """The last value given for each name, in the order of those (`latest_by_rollout`'s rule,
    for what is kept of a record rather than the record)."""
    latest: dict[str, T] = {}
    for name, value in named:
        latest.pop(name, None)
        latest[name] = value
    return latest


def latest_per_rollout(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per rollout: the last one written (records in the order of those)."""
    return list(latest_by_rollout(records).values())


CONFIDENCE = 0.95  # of every interval policybench states


@dataclass(frozen=True)
class Tally:
    rollouts: int = 0
    solved: int = 0
    unsolved: int = 0
    errors: int = 0

    def add(self, outcome: OutcomeKind) -> Tally:
        return Tally(
            self.rollouts + 1,
            self.solved + (outcome is OutcomeKind.SOLVED),
            self.unsolved + (outcome is OutcomeKind.UNSOLVED),
            self.errors + (outcome is OutcomeKind.ERROR),
        )

    @property
    def measured(self) -> bool:
        """Whether a rollout ran to an outcome: where every one errored, there is no result."""
        return self.solved + self.unsolved > 0

    @property
    def rate(self) -> float | None:
        """Success over the rollouts, errors counted as attempts not solved (where every one
        errored, `measured` is false: what a run shows is no result, never a 0% success)."""
        return self.solved / self.rollouts if self.rollouts else None

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
        """Wilson score interval of the success rate (errors count as attempts not solved)."""
        if not self.rollouts:
            return None
        return wilson(self.solved, self.rollouts, confidence)


@functools.lru_cache(maxsize=1024)
def wilson(solved: int, rollouts: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a success rate (scipy's; found once for each count: a paired
    test's rates are often its runs' own)."""
    from scipy.stats import binomtest

    ci = binomtest(solved, rollouts).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


def tally_of(records: Iterable[Mapping[str, Any]]) -> Tally:
    return tally_of_outcomes(record[keys.OUTCOME] for record in records)


def tallies_by(records: Iterable[Mapping[str, Any]], field: str) -> dict[Any, Tally]:
    """The Tally of each value of `field` (a task, say) among `records`, in one pass."""
    outcomes: dict[Any, list[str]] = {}
    for record in records:
        outcomes.setdefault(record.get(field), []).append(record[keys.OUTCOME])
    return {value: tally_of_outcomes(found) for value, found in outcomes.items()}


def tally_of_outcomes(outcomes: Iterable[str]) -> Tally:
    counted = Counter(outcomes)
    for outcome in counted:
        OutcomeKind(outcome)  # a ValueError for one that is no outcome, as before
    return Tally(
        counted.total(),
        counted[OutcomeKind.SOLVED],
        counted[OutcomeKind.UNSOLVED],
        counted[OutcomeKind.ERROR],
    )
