"""Matching two runs' rollouts scene by scene (Eval, task, seed and every other scene field)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policybench.run.records import scene_key

Record = Mapping[str, Any]


@dataclass(frozen=True)
class Matched:
    """One task's rollouts of two runs: the pairs that share a scene, and the rest."""

    pairs: tuple[tuple[Record, Record], ...]  # (before, after)
    only_before: tuple[Record, ...]
    only_after: tuple[Record, ...]


def match(before: Sequence[Record], after: Sequence[Record]) -> Matched:
    """Pairs rollouts of the same scene, in run order when a scene ran more than once."""
    waiting: dict[str, list[Record]] = {}  # each scene's rollouts after, not yet paired
    for record in after:
        key = scene_key(record)
        if key is None:
            continue
        if key in waiting:
            waiting[key].append(record)
        else:
            waiting[key] = [record]
    pairs, only_before = [], []
    for record in before:
        partners = waiting.get(scene_key(record) or "")
        if partners:
            pairs.append((record, partners.pop(0)))
        else:
            only_before.append(record)
    if len(pairs) == len(after):  # every rollout after paired (the usual case)
        return Matched(tuple(pairs), tuple(only_before), ())
    paired_after = {id(partner) for _, partner in pairs}
    only_after = [record for record in after if id(record) not in paired_after]
    return Matched(tuple(pairs), tuple(only_before), tuple(only_after))
