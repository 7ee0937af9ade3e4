"""Drift between two pin sets (`--env-pins`): the same scenes, the same policy, the envs as
installed (arm `current`) and under candidate pins. Per scene, from the two rollouts' traces: the
first step whose observation differs, the largest difference per observation entry (and at the
first observation), whether the actions parted, and success and its step under each. Per Eval:
how far into the episode trajectories part (their distribution), paired success (the exact
McNemar test `report compare` runs, Holm across Evals), and a verdict: identical, trajectories
differ with success unchanged (and the change the plan could have detected), success changed,
or does not load (every candidate rollout errored: never a 0% success)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.pins import CURRENT
from policybench.record.episode import OutcomeKind
from policybench.report.compare import Comparison
from policybench.report.failures import trace_of
from policybench.report.pairing import match
from policybench.report.power import detectable_change
from policybench.report.stats import group

STATE_PREFIX = "state/"  # a trace's arrays of the observation's numbers
IDENTICAL, DIFFER, CHANGED, NO_LOAD = (
    "identical",
    "trajectories differ, success unchanged",
    "success changed",
    "does not load",
)


@dataclass(frozen=True)
class SceneDrift:
    """One scene under both pin sets."""

    rollout: str  # the scene's id (task/seed)
    first_step: int | None  # the first step whose observation differs; None: none does
    largest: dict[str, float]  # per observation entry, its largest difference over the steps
    at_first: float  # the largest difference at the first observation
    actions_part: int | None  # the first step whose action differs; None: none does
    solved: tuple[bool, bool]  # current, candidate
    success_steps: tuple[int | None, int | None]

    def as_json(self) -> dict[str, Any]:
        return {
            "rollout": self.rollout,
            "first_differing_step": self.first_step,
            "largest_difference": self.largest,
            "difference_at_first_observation": self.at_first,
            "actions_part_at": self.actions_part,
            "solved": list(self.solved),
            "success_steps": list(self.success_steps),
        }


@dataclass(frozen=True)
class EvalDrift:
    """One Eval under both pin sets: its scenes, its paired success, and the verdict."""

    eval: str
    candidate: str  # the candidate arm's label
    packages: dict[str, tuple[str, str]]  # what differs: name -> (current, candidate)
    scenes: tuple[SceneDrift, ...]
    verdict: str
    solved: tuple[int, int]  # current, candidate, over the paired scenes
    pairs: int
    lost: int
    gained: int
    p_value: float | None  # the pooled exact McNemar, Holm-adjusted across Evals
    detectable: float | None  # the smallest change in success this plan could have detected
    not_loaded: str | None = None  # why the candidate's env did not load

    @property
    def failed(self) -> bool:
        return self.verdict in (CHANGED, NO_LOAD)

    @property
    def first_steps(self) -> list[int]:
        return [s.first_step for s in self.scenes if s.first_step is not None]

    def line(self) -> str:
        changed = ", ".join(f"{name} {a} -> {b}" for name, (a, b) in self.packages.items())
        head = f"{self.eval} under {changed or self.candidate}: {self.verdict}"
        if self.verdict == NO_LOAD:
            return f"{head}: {self.not_loaded}"
        steps = self.first_steps
        parted = (
            f"{len(steps)} of {len(self.scenes)} scenes differ (first differing step: median "
            f"{int(np.median(steps))}, from {min(steps)} to {max(steps)}); largest difference "
            f"{max(max(s.largest.values(), default=0.0) for s in self.scenes):.3g}, at the first "
            f"observation {max(s.at_first for s in self.scenes):.3g}; actions part in "
            f"{sum(s.actions_part is not None for s in self.scenes)}"
            if steps
            else f"all {len(self.scenes)} scenes step for step the same"
        )
        moved = sum(s.success_steps[0] != s.success_steps[1] for s in self.scenes)
        p = "-" if self.p_value is None else f"{self.p_value:.3g}"
        could = (
            f"; this plan detects a change of {self.detectable:.0%} or more"
            if self.detectable is not None and self.verdict != CHANGED
            else ""
        )
        return (
            f"{head} — {parted}; success {self.solved[0]}/{self.pairs} -> {self.solved[1]}/"
            f"{self.pairs} ({self.lost} lost, {self.gained} gained, exact McNemar p = {p}, Holm "
            f"across Evals), its step moved in {moved}{could}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            keys.EVAL: self.eval,
            "candidate": self.candidate,
            keys.PACKAGES: {name: list(pair) for name, pair in self.packages.items()},
            "verdict": self.verdict,
            "not_loaded": self.not_loaded,
            "solved": list(self.solved),
            "pairs": self.pairs,
            "lost": self.lost,
            "gained": self.gained,
            "p_value": self.p_value,
            "detectable_change": self.detectable,
            "first_differing_steps": self.first_steps,
            "scenes": [scene.as_json() for scene in self.scenes],
        }


def drifts(
    records: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Comparison],
    run_dir: Path | None,
    alpha: float = 0.05,
) -> tuple[EvalDrift, ...]:
    """Each Eval's drift in a run of arm `current` and one candidate pin set (none otherwise):
    its records, the run's comparison of the two arms, and the traces in `run_dir`."""
    comparison = next((c for c in comparisons if c.before == CURRENT), None)
    if comparison is None or run_dir is None:
        return ()
    candidate = comparison.after
    pooled = {row.eval: row for row in comparison.evals}
    found = []
    for (eval,), members in group(records, keys.EVAL).items():
        current = [r for r in members if r.get(keys.ARM) == CURRENT]
        under = [r for r in members if r.get(keys.ARM) == candidate]
        if not current or not under:
            continue
        found.append(_eval_drift(eval, candidate, current, under, pooled.get(eval), run_dir, alpha))
    return tuple(found)


def _eval_drift(
    eval: str,
    candidate: str,
    current: Sequence[Mapping[str, Any]],
    under: Sequence[Mapping[str, Any]],
    row: Any,
    run_dir: Path,
    alpha: float,
) -> EvalDrift:
    packages = _packages_changed(current, under)
    errored = [r for r in under if r.get(keys.OUTCOME) == OutcomeKind.ERROR.value]
    if under and len(errored) == len(under):
        why = str(errored[0].get(keys.REASON) or "every rollout errored")
        return EvalDrift(eval, candidate, packages, (), NO_LOAD, (0, 0), 0, 0, 0, None, None, why)
    scenes = tuple(
        _scene(a, b, run_dir) for a, b in match(current, under).pairs if _ended(a) and _ended(b)
    )
    pairs = row.pairs if row is not None else None
    p_value = row.adjusted_p if row is not None else None
    rate = row.before.rate if row is not None else None
    detectable = (
        detectable_change(row.before.rollouts, rate).drop if row is not None and rate else None
    )
    if row is not None and row.significant:
        verdict = CHANGED
    elif all(s.first_step is None and s.success_steps[0] == s.success_steps[1] for s in scenes):
        verdict = IDENTICAL
    else:
        verdict = DIFFER
    return EvalDrift(
        eval,
        candidate,
        packages,
        scenes,
        verdict,
        (sum(s.solved[0] for s in scenes), sum(s.solved[1] for s in scenes)),
        pairs.count if pairs is not None else len(scenes),
        pairs.lost if pairs is not None else 0,
        pairs.gained if pairs is not None else 0,
        p_value,
        detectable,
    )


def _ended(record: Mapping[str, Any]) -> bool:
    return record.get(keys.OUTCOME) in (OutcomeKind.SOLVED.value, OutcomeKind.UNSOLVED.value)


def _scene(current: Mapping[str, Any], under: Mapping[str, Any], run_dir: Path) -> SceneDrift:
    scene = current.get(keys.SCENE) or {}
    rollout = f"{scene.get(keys.TASK)}/seed={scene.get(keys.SEED)}"
    solved = (_solved(current), _solved(under))
    steps = (current.get(keys.SUCCESS_STEP), under.get(keys.SUCCESS_STEP))
    a, b = trace_of(run_dir, current), trace_of(run_dir, under)
    if a is None or b is None:  # no traces (--no-rollout-traces): outcomes alone
        return SceneDrift(rollout, None, {}, 0.0, None, solved, steps)
    arrays_a, arrays_b = a["arrays"], b["arrays"]
    largest, first, at_first = {}, None, 0.0
    for name in sorted(n for n in arrays_a if n.startswith(STATE_PREFIX) and n in arrays_b):
        x, y = _steps_first(arrays_a[name]), _steps_first(arrays_b[name])
        n = min(len(x), len(y))
        if not n:
            continue
        difference = np.abs(x[:n] - y[:n]).reshape(n, -1).max(axis=1)
        largest[name.removeprefix(STATE_PREFIX)] = float(difference.max())
        at_first = max(at_first, float(difference[0]))
        differs = np.flatnonzero(difference > 0)
        step = int(differs[0]) if differs.size else (n if len(x) != len(y) else None)
        if step is not None:
            first = step if first is None else min(first, step)
    actions_part = _first_differing(arrays_a.get("action"), arrays_b.get("action"))
    return SceneDrift(rollout, first, largest, at_first, actions_part, solved, steps)


def _solved(record: Mapping[str, Any]) -> bool:
    return record.get(keys.OUTCOME) == OutcomeKind.SOLVED.value


def _steps_first(values: Any) -> np.ndarray:
    """A trace's array with its steps along the first axis (traces keep them along the last)."""
    array = np.asarray(values, dtype=np.float64)
    return np.moveaxis(array, -1, 0) if array.ndim > 1 else array


def _first_differing(a: Any, b: Any) -> int | None:
    if a is None or b is None:
        return None
    x, y = _steps_first(a), _steps_first(b)
    n = min(len(x), len(y))
    differs = np.flatnonzero(np.abs(x[:n] - y[:n]).reshape(n, -1).max(axis=1) > 0) if n else []
    return int(differs[0]) if len(differs) else (n if len(x) != len(y) else None)


def _packages_changed(
    current: Sequence[Mapping[str, Any]], under: Sequence[Mapping[str, Any]]
) -> dict[str, tuple[str, str]]:
    """The env packages whose recorded versions differ between the arms."""
    a = current[0].get(keys.PACKAGES) or {}
    b = under[0].get(keys.PACKAGES) or {}
    return {
        name: (str(a[name]), str(b[name])) for name in sorted(set(a) & set(b)) if a[name] != b[name]
    }


def drift_lines(found: Sequence[EvalDrift]) -> list[str]:
    if not found:
        return []
    return [
        "",
        f"drift under candidate pins {found[0].candidate} (against current, the same scenes and "
        "policy):",
        *(f"  {drift.line()}" for drift in found),
    ]
