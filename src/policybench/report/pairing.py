"""Matching two runs' rollouts scene by scene (Eval, task, seed and every other scene field), and
checking that both ran the same protocol: the policy-independent statics of every rollout."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policybench import keys

Record = Mapping[str, Any]
# What a rollout records about how it was run, apart from the policy: two runs that differ
# here measured different things. Mappings are compared entry by entry.
PROTOCOL = (
    keys.INSTRUCTION,
    keys.CONTROL_HZ,
    keys.TIMEOUT_S,
    keys.STOP_ON_SUCCESS,
    keys.HOLD,
    keys.EVAL_SETTINGS,
    keys.PACKAGES,
)
# Changes with every commit of the harness, whose behaviour the goldens pin instead.
NOT_PROTOCOL = {f"{keys.PACKAGES}.policybench"}
NOT_SET = "(not set)"


@dataclass(frozen=True)
class Matched:
    """One task's rollouts of two runs: the pairs that share a scene, and the rest."""

    pairs: tuple[tuple[Record, Record], ...]  # (before, after)
    only_before: tuple[Record, ...]
    only_after: tuple[Record, ...]


def scene_key(record: Record) -> str | None:
    """What identifies a rollout's scene across runs, or None when it recorded none."""
    scene = record.get(keys.SCENE)
    if not isinstance(scene, Mapping) or not scene:
        return None
    return json.dumps([record[keys.EVAL], record[keys.TASK], scene], sort_keys=True)


def match(before: Sequence[Record], after: Sequence[Record]) -> Matched:
    """Pairs rollouts of the same scene, in run order when a scene ran more than once."""
    waiting: dict[str, list[Record]] = {}
    for record in after:
        key = scene_key(record)
        if key is not None:
            waiting.setdefault(key, []).append(record)
    pairs, only_before = [], []
    for record in before:
        partners = waiting.get(scene_key(record) or "", [])
        if partners:
            pairs.append((record, partners.pop(0)))
        else:
            only_before.append(record)
    paired_after = {id(partner) for _, partner in pairs}
    only_after = [record for record in after if id(record) not in paired_after]
    return Matched(tuple(pairs), tuple(only_before), tuple(only_after))


@dataclass(frozen=True)
class ProtocolDifference:
    """A protocol field whose values differ between two runs of an Eval's shared tasks."""

    eval: str
    field: str  # e.g. "timeout_s", "eval_settings.camera", "packages.metaworld"
    before: tuple[str, ...]
    after: tuple[str, ...]

    def line(self, before: str, after: str) -> str:
        return (
            f"eval {self.eval}: {self.field} is {', '.join(self.before)} in {before} "
            f"but {', '.join(self.after)} in {after}"
        )


def protocol_differences(
    before: Iterable[Record], after: Iterable[Record]
) -> tuple[ProtocolDifference, ...]:
    """The protocol fields that differ on the tasks both runs ran, per Eval. A field only one
    run records (an older results file) is not compared."""
    tasks_before, tasks_after = _by_task(before), _by_task(after)
    seen: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for task in sorted(tasks_before.keys() & tasks_after.keys()):
        one, other = tasks_before[task], tasks_after[task]
        recorded = {f for f in PROTOCOL if _any_has(one, f) and _any_has(other, f)}
        values_before, values_after = _values(one, recorded), _values(other, recorded)
        for name in sorted(values_before.keys() | values_after.keys()):
            if name in NOT_PROTOCOL:
                continue
            left = values_before.get(name, {NOT_SET})
            right = values_after.get(name, {NOT_SET})
            if left != right:
                both = seen.setdefault((task[0], name), (set(), set()))
                both[0].update(left)
                both[1].update(right)
    return tuple(
        ProtocolDifference(eval, name, tuple(sorted(left)), tuple(sorted(right)))
        for (eval, name), (left, right) in sorted(seen.items())
    )


def _by_task(records: Iterable[Record]) -> dict[tuple[str, str], list[Record]]:
    tasks: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        tasks.setdefault((record[keys.EVAL], record[keys.TASK]), []).append(record)
    return tasks


def _any_has(records: Sequence[Record], name: str) -> bool:
    return any(name in record for record in records)


def _values(records: Sequence[Record], fields: set[str]) -> dict[str, set[str]]:
    """Every value each field (mappings: each entry) takes in `records`, as JSON."""
    values: dict[str, set[str]] = {}
    for record in records:
        for name in fields:
            value = record.get(name)
            entries = (
                {f"{name}.{k}": v for k, v in value.items()}
                if isinstance(value, Mapping)
                else {name: value}
            )
            for entry, item in entries.items():
                values.setdefault(entry, set()).add(json.dumps(item, sort_keys=True))
    for name in fields:  # a mapping entry some rollouts lack
        for entry, seen in values.items():
            if entry.startswith(f"{name}.") and any(
                entry.removeprefix(f"{name}.") not in (record.get(name) or {}) for record in records
            ):
                seen.add(NOT_SET)
    return values
