"""Why an Eval ended far below expectation, from its own rollouts' traces: the usual causes of a
silent 0% are conventions (a gripper's sign, the order of an action's dimensions, an image
flipped on its way to the model), and each leaves a mark in what the run recorded.

For each Eval at or below DIAGNOSED_AT, over its unsolved rollouts' traces (above it, only the
comparisons with the expert and the image's orientation, said where they find something):
- actions pinned at a bound of the action space, or a dimension that never moves;
- an image that never changes from one step to the next (a frozen camera, a failed render);
- where the Eval has an expert (it watched the first rollouts of each task beside the policy,
  --expert-shadow: `expert_action`),
  each action dimension set beside the expert's at the same observations: one that runs
  opposite to the expert's own (a flipped sign), or follows another of the expert's dimensions
  rather than its own (dimensions in another order: a quaternion's, or axes');
- where the preflight asked the model about its first observation with the image flipped too
  (`orientation`), a flipped image it agrees with the expert on better than the image as
  rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.preflight import ORIENTATION
from policybench.record.rollout_trace import EXPERT_ACTION, MOTION
from policybench.report.expert_replay import ExpertOf, with_expert
from policybench.report.failures import trace_of
from policybench.report.stats import group
from policybench.run.files import read_json
from policybench.run.layout import PREFLIGHTS
from policybench.run.records import Tally, tallies_by

DIAGNOSED_AT = 0.1  # an Eval solving this share of its rollouts or less is diagnosed
TRACES_READ = 20  # unsolved rollouts read per Eval, in the run's order
PINNED = 0.5  # share of steps at a bound that pins a dimension
OPPOSITE = -0.5  # correlation with the expert's own dimension that calls a sign flipped
# ... with another of its dimensions that calls them reordered: both ways (i follows the
# expert's j and j its i), or one way and by BETTER_BY more than with its own
FOLLOWS, BETTER_BY = 0.7, 0.3
UNRELATED = 0.2  # no correlation with any of the expert's dimensions above this: unrelated
CLOSER = 0.5  # a flipped image's distance to the expert's action, against as rendered's


@dataclass(frozen=True)
class Diagnosis:
    """What an Eval's traces show of why it ended at `rate`: `findings`, each a sentence."""

    eval: str
    rate: float
    rollouts: int  # the unsolved rollouts whose traces were read
    findings: tuple[str, ...]

    def lines(self) -> list[str]:
        head = f"diagnosis of {self.eval} ({self.rate:.0%} solved, {self.rollouts} traces read):"
        if not self.findings:
            return [f"{head} nothing in its trajectories points to a convention"]
        return [head, *(f"  {finding}" for finding in self.findings)]

    def as_json(self) -> dict[str, Any]:
        return {
            keys.EVAL: self.eval,
            "rate": self.rate,
            "traces_read": self.rollouts,
            "findings": list(self.findings),
        }


def diagnoses(
    records: Sequence[Mapping[str, Any]],
    run_dir: Path | None,
    far_below: Set[str] = frozenset(),
    expert_of: ExpertOf | None = None,
) -> tuple[Diagnosis, ...]:
    """One Diagnosis per Eval that solved DIAGNOSED_AT of its rollouts or less (errors aside)
    or is in `far_below` (significantly below its checkpoint's published rate) and has traces
    in `run_dir`, and per Eval above it whose tasks at DIAGNOSED_AT or less break a convention
    the expert's actions show in their unsolved rollouts. The expert's actions are replayed
    (`expert_of` makes the expert) on the kept observations of the rollouts read: where a
    diagnosis looks, and only there."""
    if run_dir is None:
        return ()
    orientations = _orientations(run_dir)
    found = []
    for (eval,), members in group(records, keys.EVAL).items():
        tallies = tallies_by(members, keys.TASK)  # one pass
        ended = sum(_ended(tally) for tally in tallies.values())
        if not ended:
            continue
        rate = sum(tally.solved for tally in tallies.values()) / ended
        diagnosed = rate <= DIAGNOSED_AT or eval in far_below
        looked_at = None if diagnosed else _failing_tasks(tallies)  # above it: its failing tasks
        unsolved = _watched_first(
            [
                r
                for r in members
                if r.get(keys.OUTCOME) == "unsolved"
                and (diagnosed or r.get(keys.TASK) in looked_at)
            ]
        )
        traces = _traces(run_dir, unsolved, expert_of)
        if not traces:
            continue
        compared = _expert(traces)  # a dimension the expert explains is not said again
        if rate > DIAGNOSED_AT and eval not in far_below:
            # Solving some tasks, an Eval may still fail others for a broken convention (a
            # flipped gripper fails only the tasks that grasp): said where the expert's
            # actions at the same observations show one, silent otherwise.
            findings = [said for dim, said in compared if dim >= 0]
            findings += _orientation(orientations.get(eval))
            if findings:
                found.append(Diagnosis(eval, rate, len(traces), tuple(findings)))
            continue
        explained = {dim for dim, _ in compared}
        findings = [
            *(said for dim, said in _actions(traces) if dim not in explained),
            *_images(traces),
            *(said for _, said in compared),
            *_orientation(orientations.get(eval)),
        ]
        found.append(Diagnosis(eval, rate, len(traces), tuple(findings)))
    return tuple(found)


def _watched_first(unsolved: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The unsolved rollouts whose traces are read, the first of each task first: those the
    Eval's expert watched (--expert-shadow), then the rest in the run's order."""
    seen: dict[Any, int] = {}
    ordinal = []
    for record in sorted(unsolved, key=lambda r: r.get(keys.ROLLOUT_INDEX) or 0):
        task = record.get(keys.TASK)
        ordinal.append((seen.get(task, 0), record.get(keys.ROLLOUT_INDEX) or 0, record))
        seen[task] = seen.get(task, 0) + 1
    return [record for *_, record in sorted(ordinal, key=lambda o: o[:2])][:TRACES_READ]


def _orientations(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per Eval, what its preflight found of the model's first action beside the expert's, by
    how the first image was shown (ORIENTATION in the preflight's file), where it asked."""
    found: dict[str, dict[str, float]] = {}
    for path in sorted((run_dir / PREFLIGHTS).glob("*.json")):
        try:
            data = read_json(path)
            distances = data.get(ORIENTATION)
            if isinstance(distances, dict) and isinstance(data.get(keys.EVAL), str):
                found.setdefault(data[keys.EVAL], {k: float(v) for k, v in distances.items()})
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # the run's preflight lines say what they can
    return found


def _ended(tally: Tally) -> int:
    """Its rollouts that ended, solved or not (errors aside)."""
    return tally.solved + tally.unsolved


def _failing_tasks(tallies: Mapping[Any, Tally]) -> set[Any]:
    """The tasks that solved DIAGNOSED_AT of their ended rollouts or less."""
    return {
        task
        for task, tally in tallies.items()
        if _ended(tally) and tally.solved <= DIAGNOSED_AT * _ended(tally)
    }


def _traces(
    run_dir: Path, unsolved: Sequence[Mapping[str, Any]], expert_of: ExpertOf | None
) -> list[dict[str, Any]]:
    """The readable traces of `unsolved`, the expert's actions replayed into those that kept
    observations for it, where `expert_of` is given."""
    found = []
    for record in unsolved:
        trace = _trace(run_dir, record)
        if trace is None:
            continue
        if expert_of is not None:
            trace = with_expert(run_dir, record[keys.ROLLOUT_TRACE], trace, expert_of)
        found.append(trace)
    return found


def _trace(run_dir: Path, record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The rollout's trace, if it can be read and holds its actions."""
    trace = trace_of(run_dir, record)
    return trace if trace is not None and trace["arrays"].get("action") is not None else None


def _actions(traces: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """Dimensions that sit at a bound, or never move, over every read rollout's steps, where
    the Eval's expert (if it watched) does not do the same."""
    actions = _joined(traces, "action")
    expert = _joined(traces, EXPERT_ACTION)
    low, high = (_bound(traces[0].get(f"action_{side}"), len(actions)) for side in ("low", "high"))
    found = []
    for dim, values in enumerate(actions):
        if not values.size:
            continue
        if np.ptp(values) == 0:
            if expert is None or np.ptp(expert[dim]) > 0:
                found.append((dim, f"action[{dim}] never moves: {values[0]:.3g} at every step"))
            continue
        for side, bound in (("low", low[dim]), ("high", high[dim])):
            at = _share_at(values, bound)
            if at >= PINNED and (expert is None or _share_at(expert[dim], bound) < PINNED):
                found.append(
                    (
                        dim,
                        f"action[{dim}] sits at its {side} bound ({bound:g}) in {at:.0%} of "
                        "steps: a scale or units mismatch (normalized actions not unnormalized?)",
                    )
                )
    return found


def _joined(traces: Sequence[Mapping[str, Any]], name: str) -> np.ndarray | None:
    """`name`'s rows over every trace's steps, end to end (None unless every trace has it)."""
    rows = [t["arrays"].get(name) for t in traces]
    if not rows or any(row is None for row in rows):
        return None
    return np.concatenate([np.asarray(row, float) for row in rows], axis=1)


def _share_at(values: np.ndarray, bound: float) -> float:
    return float(np.mean(np.isclose(values, bound, atol=1e-6))) if np.isfinite(bound) else 0.0


def _bound(values: Sequence[float | None] | None, dims: int) -> np.ndarray:
    if values is None or len(values) != dims:
        return np.full(dims, np.nan)
    return np.array([np.nan if v is None else v for v in values], float)


def _images(traces: Sequence[Mapping[str, Any]]) -> list[str]:
    names = sorted({name for t in traces for name in t["arrays"] if name.startswith(f"{MOTION}/")})
    found = []
    for name in names:
        moved = [np.asarray(t["arrays"][name], float) for t in traces if name in t["arrays"]]
        steps = sum(m.size for m in moved)
        if steps > 1 and all(not m[1:].any() for m in moved):
            found.append(
                f"the image {name.removeprefix(f'{MOTION}/')!r} never changes from one step to "
                f"the next ({steps} steps): a frozen camera, or a render that fails?"
            )
    return found


def _expert(traces: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """The policy's action dimensions beside the expert's at the same observations: each that
    is reordered or sign-flipped, or, if none follows the expert at all, that."""
    shadowed = [t for t in traces if EXPERT_ACTION in t["arrays"]]
    policy, expert = _joined(shadowed, "action"), _joined(shadowed, EXPERT_ACTION)
    if policy is None or expert is None or not shadowed:
        return []
    r = _correlations(policy, expert)
    dims, found = len(policy), []
    for dim in range(dims):
        own = r[dim, dim]
        others = [(r[dim, j], j) for j in range(dims) if j != dim and np.isfinite(r[dim, j])]
        best, j = max(others) if others else (np.nan, dim)
        mutual = best >= FOLLOWS and r[j, dim] >= FOLLOWS and best >= abs(own) - 0.05
        flipped = np.isfinite(own) and own <= OPPOSITE
        if mutual or (
            not flipped and best >= FOLLOWS and best - (own if np.isfinite(own) else 0) >= BETTER_BY
        ):
            found.append(
                (
                    dim,
                    f"action[{dim}] follows the expert's action[{j}] (r = {best:.2f}), not its "
                    f"own (r = {own:.2f}): dimensions in another order (quaternion or axis order?)",
                )
            )
        elif flipped:
            which = "gripper" if dim == dims - 1 else "axis"
            found.append(
                (
                    dim,
                    f"action[{dim}] runs opposite to the expert's (r = {own:.2f}): "
                    f"{which} sign flipped?",
                )
            )
    strongest = np.nanmax(np.abs(r)) if np.isfinite(r).any() else np.nan
    if not found and np.isfinite(strongest) and strongest < UNRELATED:
        found.append(
            (
                -1,
                f"no action dimension follows any of the expert's (|r| <= {strongest:.2f} at the "
                "same observations): not a convention; the policy does not act on this task "
                "(the wrong checkpoint, or an untrained one?)",
            )
        )
    return found


def _correlations(policy: np.ndarray, expert: np.ndarray) -> np.ndarray:
    """r[i, j]: Pearson's correlation of the policy's dimension i with the expert's j over the
    same steps (nan where either never moves)."""
    dims = len(policy)
    r = np.full((dims, dims), np.nan)
    for i in range(dims):
        for j in range(dims):
            if np.ptp(policy[i]) > 0 and np.ptp(expert[j]) > 0:
                r[i, j] = float(np.corrcoef(policy[i], expert[j])[0, 1])
    return r


def _orientation(distances: Mapping[str, float] | None) -> list[str]:
    """A flipped image the model's first action agrees with the expert's on far better."""
    if not distances or "as rendered" not in distances:
        return []
    shown = distances["as rendered"]
    flipped = {how: d for how, d in distances.items() if how != "as rendered"}
    if not flipped:
        return []
    how, closest = min(flipped.items(), key=lambda item: item[1])
    if closest < CLOSER * shown:
        return [
            f"shown its first image {how}, the model's action is {closest:.3g} from the "
            f"expert's, against {shown:.3g} as rendered: image flipped ({how})?"
        ]
    return []
