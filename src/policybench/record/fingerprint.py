"""The protocol fingerprint of a run: per Eval, everything that makes two runs' rollouts
comparable (its settings, control rate, timeout, hold, stop-on-success, how scenes are named, the
policy as described without where it was served, package versions), hashed, with its fields."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from policybench import keys

FIELDS = (
    keys.CONTROL_HZ,
    keys.TIMEOUT_S,
    keys.STOP_ON_SUCCESS,
    keys.HOLD,
    keys.EVAL_SETTINGS,
    keys.PACKAGES,
)
# Where a served policy was reached changes from run to run; what answered does not.
NOT_PROTOCOL = ("url", "served")
SCENE_FIELDS = "scene_fields"  # which fields name a scene (task, seed, init_state, ...)


def fingerprint(records: Iterable[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict:
    """`{"digest": ..., "settings": ..., "evals": {eval: {"digest": ..., "fields": {...}}}}`,
    each Eval's fields read from its first record."""
    evals: dict[str, dict[str, Any]] = {}
    for record in records:
        name = record[keys.EVAL]
        if name in evals:
            continue
        policy = record.get(keys.POLICY) or {}
        fields = {field: record.get(field) for field in FIELDS}
        fields[keys.POLICY] = {k: v for k, v in policy.items() if k not in NOT_PROTOCOL}
        fields[SCENE_FIELDS] = sorted(record.get(keys.SCENE) or {})
        evals[name] = {"digest": _digest(fields), "fields": fields}
    ordered = dict(sorted(evals.items()))
    overall = _digest(
        {"settings": dict(settings), "evals": [e["digest"] for e in ordered.values()]}
    )
    return {"digest": overall, "settings": dict(settings), "evals": ordered}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
