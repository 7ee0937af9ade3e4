"""A run's protocol: what its rollouts ran under, which two runs must share for their success
rates to measure the same thing. One value, with its digest (run.json's `fingerprint`) and a
readable difference, asked by `--resume`, `report merge`, `report compare` and `--baseline`.

What it holds (every value as JSON text; a field that takes several values keeps them all):
- of the run: the base seed (it names the scenes and seeds latency draws and seeded policies),
  the inference latency (and the digest of a latency profile), where a late chunk is anchored
  and the execution horizon;
- per Eval: control rate, hold, stop-on-success, the Eval's settings, the simulator packages'
  versions, which fields name a scene (task, seed, init state, ...);
- per task: its instruction and timeout;
- the policy: the run's policy or arms (with how scenes were assigned and blinded) and, per
  Eval, the policy as it describes itself (its codec among it).

What it leaves out, and why:
- the extent of the plan: rollouts per task, the Evals and tasks selected (`--suite`, `-k`),
  the shard. Resuming with a larger `--rollouts` extends the run (rollout i keeps its scene), a
  shard completes it, and neither changes what a rollout measures; merge names the selected
  rollouts no part ran, and compare pairs rollouts by scene over the tasks both runs ran.
- policybench's own version: it changes with every commit, and the goldens pin its behaviour.
- where a served policy answered (its URL): shards may each have their own server.

The policy is part of the value but not of its digest: `--resume` and `report merge` continue
one run, so another policy is refused; `report compare` and `--baseline` compare policies, so
they leave it out (`differences(..., policy=False)`). A field only one side recorded (an older
results file, a run not yet started) is not compared. `--allow-protocol-change` overrides all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from policybench import keys
from policybench.run.arms import ARMS, ASSIGN, BLINDING

Record = Mapping[str, Any]
Fields = Mapping[str, frozenset[str]]  # field -> the JSON texts of the values it took

OVERRIDE = "--allow-protocol-change"
FORMER_OVERRIDE = "--allow-protocol-mismatch"  # its name in some commands once; still accepted
BASE_SEED = "base_seed"
# How the harness plays a policy: run settings, also in the policy's description.
PLAYED = (
    keys.INFERENCE_LATENCY,
    keys.LATENCY_PROFILE,
    keys.CHUNK_ANCHOR,
    keys.EXECUTE_STEPS,
    keys.WARM_START,
)
RUN_FIELDS = (BASE_SEED, *PLAYED)
RUN_POLICY = (keys.POLICY, ARMS, ASSIGN, BLINDING)  # which policy or arms the run evaluated
EVAL_FIELDS = (
    keys.CONTROL_HZ,
    keys.HOLD,
    keys.STOP_ON_SUCCESS,
    keys.EVAL_SETTINGS,
    keys.PACKAGES,
    keys.TRAJECTORY_SPECS,
)
TASK_FIELDS = (keys.INSTRUCTION, keys.TIMEOUT_S)
SCENE_FIELDS = "scene_fields"
LEFT_OUT = {f"{keys.PACKAGES}.policybench", f"{keys.POLICY}.url", f"{keys.POLICY}.served"}
NOT_SET = "(not set)"


def of_policy(field: str) -> bool:
    """Whether `field` says which policy ran (what compare and `--baseline` compare)."""
    return field in RUN_POLICY or field.startswith(f"{keys.POLICY}.")


@dataclass(frozen=True)
class Difference:
    """A field whose values differ between two runs (of one Eval; `eval` None: of the run)."""

    eval: str | None
    field: str  # e.g. "timeout_s", "eval_settings.camera", "packages.metaworld", "base_seed"
    before: tuple[str, ...]
    after: tuple[str, ...]

    def line(self, before: str, after: str) -> str:
        where = "" if self.eval is None else f"eval {self.eval}: "
        return (
            f"{where}{self.field} is {', '.join(self.before)} in {before} "
            f"but {', '.join(self.after)} in {after}"
        )


@dataclass(frozen=True)
class Protocol:
    """A run's protocol, and its policy (see above), read from its records and settings."""

    run: Fields
    evals: Mapping[str, Fields]
    tasks: Mapping[tuple[str, str], Fields]  # (eval, task) -> fields

    @classmethod
    def of(cls, records: Iterable[Record], settings: Mapping[str, Any] | None = None) -> Protocol:
        """The protocol of `records` run with `settings` (run.json's); without settings, the
        run's fields are read from the policy's description where the records carry it."""
        records = list(records)
        evals: dict[str, list[Record]] = {}
        tasks: dict[tuple[str, str], list[Record]] = {}
        for record in records:
            evals.setdefault(record[keys.EVAL], []).append(record)
            tasks.setdefault((record[keys.EVAL], record[keys.TASK]), []).append(record)
        if settings is not None:
            run = {
                f: frozenset([_json(settings[f])])
                for f in (*RUN_FIELDS, *RUN_POLICY)
                if f in settings
            }
        else:
            run = _fields([r.get(keys.POLICY) or {} for r in records], PLAYED)
        return cls(
            run,
            {eval: _eval_fields(mine) for eval, mine in sorted(evals.items())},
            {task: _fields(mine, TASK_FIELDS) for task, mine in sorted(tasks.items())},
        )

    def differences(self, other: Protocol, policy: bool = True) -> tuple[Difference, ...]:
        """What differs from `other` on the Evals and tasks both ran (`policy=False`: the
        policy aside); a task's fields are reported per Eval, with the values that differ."""
        found = _differ(None, self.run, other.run)
        for eval in sorted(self.evals.keys() & other.evals.keys()):
            found += _differ(eval, self.evals[eval], other.evals[eval])
        per_task: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
        for task in sorted(self.tasks.keys() & other.tasks.keys()):
            for d in _differ(task[0], self.tasks[task], other.tasks[task]):
                both = per_task.setdefault((task[0], d.field), (set(), set()))
                both[0].update(d.before)
                both[1].update(d.after)
        found += [
            Difference(eval, name, tuple(sorted(left)), tuple(sorted(right)))
            for (eval, name), (left, right) in sorted(per_task.items())
        ]
        return tuple(d for d in found if policy or not of_policy(d.field))

    @property
    def digest(self) -> str:
        """Equal for two runs of the same Evals and tasks under one protocol, whatever policy."""
        return _digest(
            [
                _without_policy(self.run),
                {eval: _without_policy(fields) for eval, fields in self.evals.items()},
                [[*task, _without_policy(fields)] for task, fields in self.tasks.items()],
            ]
        )

    def as_json(self) -> dict[str, Any]:
        """run.json's `fingerprint`: the digest, and every field readable, per Eval and task."""
        evals: dict[str, Any] = {}
        for eval, fields in self.evals.items():
            mine = {task: self.tasks[(e, task)] for e, task in self.tasks if e == eval}
            evals[eval] = {
                "digest": _digest([_without_policy(fields), *map(_without_policy, mine.values())]),
                "fields": _readable(fields),
                "tasks": {task: _readable(values) for task, values in mine.items()},
            }
        return {"digest": self.digest, "run": _readable(self.run), "evals": evals}


def _eval_fields(records: list[Record]) -> dict[str, frozenset[str]]:
    described = [
        {k: v for k, v in (r.get(keys.POLICY) or {}).items() if k not in PLAYED}
        for r in records
        if keys.POLICY in r
    ]
    fields = dict(_fields(records, EVAL_FIELDS))
    fields.update(_fields([{keys.POLICY: d} for d in described], (keys.POLICY,)))
    scenes = [r[keys.SCENE] for r in records if isinstance(r.get(keys.SCENE), Mapping)]
    if scenes:
        fields[SCENE_FIELDS] = frozenset(_json(sorted(scene)) for scene in scenes)
    return fields


def _fields(records: list[Mapping[str, Any]], names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Every value each of `names` takes in `records` (a mapping: each entry, `(not set)` where
    a record lacks it), for the names some record has."""
    values: dict[str, set[str]] = {}
    for name in names:
        having = [r for r in records if name in r]
        if not having:
            continue
        if not any(isinstance(r[name], Mapping) for r in having):
            values[name] = {_json(r[name]) for r in having}
            continue
        entries = {entry for r in having for entry in (r[name] or {})}
        for entry in entries:
            found = values.setdefault(f"{name}.{entry}", set())
            for r in having:
                mapping = r[name] or {}
                found.add(_json(mapping[entry]) if entry in mapping else NOT_SET)
    return {name: frozenset(v) for name, v in sorted(values.items()) if name not in LEFT_OUT}


def _differ(eval: str | None, mine: Fields, theirs: Fields) -> list[Difference]:
    """The fields that differ, of those both sides recorded (a mapping's entries: any)."""
    tops = {name.split(".")[0] for name in mine} & {name.split(".")[0] for name in theirs}
    unset = frozenset([NOT_SET])
    return [
        Difference(eval, name, tuple(sorted(left)), tuple(sorted(right)))
        for name in sorted(mine.keys() | theirs.keys())
        if name.split(".")[0] in tops
        and (left := mine.get(name, unset)) != (right := theirs.get(name, unset))
    ]


def _without_policy(fields: Fields) -> dict[str, list[str]]:
    return {name: sorted(values) for name, values in fields.items() if not of_policy(name)}


def _readable(fields: Fields) -> dict[str, Any]:
    """Each field's value, or its values when it took several."""
    values = {
        name: [None if text == NOT_SET else json.loads(text) for text in sorted(texts)]
        for name, texts in fields.items()
    }
    return {name: found[0] if len(found) == 1 else found for name, found in values.items()}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _digest(value: Any) -> str:
    return hashlib.sha256(_json(value).encode()).hexdigest()[:16]
