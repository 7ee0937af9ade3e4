"""Where a run's failed rollouts cluster: the unsolved rollouts of each Eval grouped by what their
trajectories have in common, so that a hundred failures read as a few ways of failing.

Two rollouts fall in one cluster when they failed the same way (the outcome's reason, without the
numbers that vary per rollout such as its step count, and the trajectory specs they violated) and
ended in nearly the same state: their final state vectors
(from their traces) within CUT of each other, in standard deviations of the Eval's final states
over all its rollouts, root mean square over the state's numbers (average linkage, cut at CUT);
a way of failing splits by final state only into groups of at least SPLIT_AT rollouts (a rollout
of a smaller group joins the nearest of them), so that a run of few rollouts a task gets a cluster
per way of failing, not one per task.
Each cluster says where its rollouts stalled (the step from which their state stopped moving),
which numbers of its final state lie furthest from the solved rollouts', the tasks and
perturbations it spans, and a few rollouts to open. Without traces, a cluster is a way of failing.
Rollouts that cluster with no other are one cluster, "other", listed last; clusters of equal size
come in the order of their first rollout's id, so that the clustering does not depend on the order
the rollouts finished in (-n 0 or -n 8). Final-state numbers are named by the Eval's signals where
it names them (`hand[2]`), by their place in the observation entry otherwise (`state[20]`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.record.rollout_trace import read_trace
from policybench.report.stats import group
from policybench.run.layout import inside
from policybench.run.records import rollout_id
from policybench.trajectory.library import violated

CUT = 0.5  # sd of the Eval's final states, RMS over the numbers: one cluster within it
SPLIT_AT = 5  # the fewest rollouts of a way of failing that end apart from the rest to split it
STILL = 0.05  # a number that stays within this share of its range over the Eval has stopped
EXAMPLES = 3  # rollouts named per cluster
FURTHEST = 2  # final-state numbers named per cluster
TOP = 3  # clusters the terminal shows
STATE = "state/"  # a trace's arrays of observation entries
OTHER = "other"  # the cluster of rollouts that failed in a way no other rollout did
SAMPLED = 500  # an Eval's unsolved rollouts clustered, at most (a sample spread over them)
SCALE_SOLVED = 200  # solved rollouts whose final states set an Eval's scale, at most


@dataclass(frozen=True)
class Ending:
    """What a rollout's trace says of how it ended: its final state (named numbers) and the
    step from which it stopped moving (its length when it moved to the end)."""

    final: dict[str, float]
    still_from: int
    steps: int


@dataclass(frozen=True)
class Cluster:
    eval: str
    how: str  # the way its rollouts failed: the reason, and the specs violated
    rollouts: tuple[str, ...]  # their ids, most typical first
    share: float  # of the Eval's unsolved rollouts
    tasks: Mapping[str, int]
    perturbations: Mapping[str, int]  # by arm label, in a perturbation sweep
    stalled: str  # where the rollouts stopped moving
    furthest: tuple[tuple[str, float], ...]  # final-state numbers in sd from the solved ones'
    sampled_from: int | None = None  # the Eval's unsolved rollouts, where a sample was clustered

    @property
    def counted(self) -> str:
        """Its rollouts, and of what: `12 unsolved`, or `12 of a sample of 500 of 9,000
        unsolved`."""
        if self.sampled_from is None:
            return f"{len(self.rollouts)} unsolved"
        return f"{len(self.rollouts)} of a sample of {SAMPLED} of {self.sampled_from:,} unsolved"

    def line(self) -> str:
        ended = ", ".join(f"{name} {sd:+.1f} sd" for name, sd in self.furthest)
        spans = ", ".join(f"{task} x{n}" for task, n in self.tasks.items())
        under = ", ".join(f"{arm} x{n}" for arm, n in self.perturbations.items())
        return (
            f"{self.eval}: {self.counted} ({self.share:.0%}), {self.how}; "
            f"{self.stalled}{f'; final state vs solved: {ended}' if ended else ''}; "
            f"tasks {spans}{f'; under {under}' if under else ''}; e.g. {self.rollouts[0]}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            keys.EVAL: self.eval,
            "how": self.how,
            "rollouts": len(self.rollouts),
            "share_of_unsolved": self.share,
            "tasks": dict(self.tasks),
            "perturbations": dict(self.perturbations),
            "stalled": self.stalled,
            "final_state_vs_solved_sd": dict(self.furthest),
            "examples": list(self.rollouts[:EXAMPLES]),
            **({"sampled_from_unsolved": self.sampled_from} if self.sampled_from else {}),
        }


def failure_clusters(
    records: Sequence[Mapping[str, Any]], run_dir: Path | None
) -> tuple[Cluster, ...]:
    """The clusters of each Eval's unsolved rollouts, largest first (traces read from
    `run_dir`; None: clustered by the way they failed alone). An Eval of more than SAMPLED
    unsolved rollouts is clustered on SAMPLED of them spread over all (by id), its scale set by
    at most SCALE_SOLVED solved ones: the traces read stay bounded however large the run."""
    chosen = {}
    unsolved_kind, solved_kind = OutcomeKind.UNSOLVED.value, OutcomeKind.SOLVED.value
    for (eval,), members in group(records, keys.EVAL).items():
        of_eval = sorted(members, key=rollout_id)
        failed = [r for r in of_eval if r.get(keys.OUTCOME) == unsolved_kind]
        solved = [r for r in of_eval if r.get(keys.OUTCOME) == solved_kind]
        chosen[eval] = (_spread(failed, SAMPLED), _spread(solved, SCALE_SOLVED), len(failed))
    read = [r for failed, solved, _ in chosen.values() for r in (*failed, *solved)]
    endings = {} if run_dir is None else _endings(read, run_dir)
    found: list[Cluster] = []
    for eval, (failed, solved, unsolved) in chosen.items():
        scale = _Scale.of(
            [endings[i] for i in map(rollout_id, (*failed, *solved)) if i in endings],
            [endings[i] for i in map(rollout_id, solved) if i in endings],
        )
        ways: dict[str, list[Mapping[str, Any]]] = {}
        for record in failed:  # in id order (of_eval's): the same clusters whatever the order
            ways.setdefault(_how(record, _normalized), []).append(record)
        groups = [
            (_shown(how, group), group)
            for how, members in sorted(ways.items())
            for group in _by_ending(members, endings, scale)
        ]
        alone = [(how, group) for how, group in groups if len(group) == 1]
        if len(alone) > 1:  # rollouts that share their way of failing with none: one "other"
            groups = [(how, group) for how, group in groups if len(group) > 1]
            ways_alone = len({how for how, _ in alone})
            other = f"{OTHER} ({len(alone)} rollouts, {ways_alone} way{'s' * (ways_alone != 1)})"
            groups.append((other, [record for _, group in alone for record in group]))
        found += [
            _cluster(eval, how, group, len(failed), endings, scale, unsolved)
            for how, group in groups
        ]
    return tuple(sorted(found, key=_cluster_order))


def _spread(records: list[Mapping[str, Any]], most: int) -> list[Mapping[str, Any]]:
    """At most `most` of `records`, spread evenly over them (all of them when they are fewer)."""
    if len(records) <= most:
        return records
    return [records[k * len(records) // most] for k in range(most)]


def _cluster_order(cluster: Cluster) -> tuple[bool, int, str]:
    """Largest first, "other" last; of equal size, by the first of their rollouts' ids."""
    return cluster.how.startswith(OTHER), -len(cluster.rollouts), min(cluster.rollouts)


def clusters_lines(clusters: Sequence[Cluster]) -> list[str]:
    """What the terminal says of them: the largest few, a line each (nothing without any)."""
    if not clusters:
        return []
    shown = clusters[:TOP]
    plural = "cluster" if len(clusters) == 1 else "clusters"
    more = f" (the {len(shown)} largest; all in the report)" if len(clusters) > TOP else ""
    return [
        "",
        f"how the unsolved rollouts failed: {len(clusters)} {plural}{more}",
        *(f"  {cluster.line()}" for cluster in shown),
    ]


def trace_of(run_dir: Path, record: Mapping[str, Any], wanted: str = "") -> dict[str, Any] | None:
    """The rollout's trace (its arrays read: those whose names start with `wanted`), from
    inside its run's folder; None when it has none or it cannot be read (its rollout page says
    why)."""
    name = record.get(keys.ROLLOUT_TRACE)
    if not isinstance(name, str):
        return None
    try:
        trace = read_trace(inside(run_dir, name), wanted)  # OutsideRun is a ValueError
    except (ValueError, OSError, KeyError):
        return None
    return trace if isinstance(trace.get("arrays"), dict) else None


def _endings(records: Sequence[Mapping[str, Any]], run_dir: Path) -> dict[str, Ending]:
    """Each traced rollout's ending; a number has stopped moving when it stays within STILL of
    its whole range over the Eval's rollouts (so jitter in place is stillness)."""
    rows = _state_rows(records, run_dir)
    evals: dict[str, list[str]] = {}
    for record in records:
        if rollout_id(record) in rows:
            evals.setdefault(record[keys.EVAL], []).append(rollout_id(record))
    endings = {}
    for traced in evals.values():
        alike: dict[tuple[str, ...], list[np.ndarray]] = {}  # rollouts of the same numbers
        for i in traced:
            alike.setdefault(rows[i][0], []).append(rows[i][1])
        spans: dict[str, tuple[float, float]] = {}  # each number's range over the Eval
        for names, matrices in alike.items():
            lows = np.min([matrix.min(axis=1) for matrix in matrices], axis=0).tolist()
            highs = np.max([matrix.max(axis=1) for matrix in matrices], axis=0).tolist()
            for name, low, high in zip(names, lows, highs, strict=True):
                was = spans.get(name)
                spans[name] = (low, high) if was is None else (min(was[0], low), max(was[1], high))
        widths = {names: np.array([spans[n][1] - spans[n][0] for n in names]) for names in alike}
        endings.update({i: _ending(*rows[i], widths[rows[i][0]]) for i in traced})
    return endings


def _state_rows(
    records: Sequence[Mapping[str, Any]], run_dir: Path
) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Each traced rollout's state numbers: their names, and a row of steps each (float64);
    the names made once for each way of laying them out, not once a rollout."""
    rows = {}
    named_as: dict[tuple[Any, ...], tuple[str, ...]] = {}
    for record in records:
        trace = trace_of(run_dir, record, STATE)  # the state vectors alone are read
        if trace is None:
            continue
        state = [(e, a) for e, a in sorted(trace["arrays"].items()) if e.startswith(STATE)]
        if not state or len({a.shape[-1] for _, a in state}) != 1 or not state[0][1].shape[-1]:
            continue  # no state, or none over steps alike
        named = trace.get("state_names") or {}
        layout = (tuple((e, len(a)) for e, a in state), json.dumps(named, sort_keys=True))
        names = named_as.get(layout)
        if names is None:
            names = named_as[layout] = tuple(
                _number_name(e[len(STATE) :], i, named) for e, a in state for i in range(len(a))
            )
        matrix = np.concatenate([np.asarray(a, np.float64).reshape(len(a), -1) for _, a in state])
        if len(set(names)) < len(names):  # a name given twice: its last row, as a dict keeps it
            last = {name: k for k, name in enumerate(names)}
            names, matrix = tuple(last), matrix[list(last.values())]
        rows[rollout_id(record)] = (names, matrix)
    return rows


def _number_name(entry: str, i: int, named: Mapping[str, Mapping[str, str]]) -> str:
    """A state number by the name its Eval's signals give it (`hand[0]`), else by its place."""
    given = (named.get(entry) or {}).get(str(i))
    return given if isinstance(given, str) else f"{entry}[{i}]"


def _ending(names: Sequence[str], matrix: np.ndarray, width: np.ndarray) -> Ending:
    """A rollout's ending from its numbers' rows (`matrix`, named `names`), each number still
    where it stays within STILL of its range over the Eval (`width`) of its final value."""
    steps = matrix.shape[1]
    final = matrix[:, -1]
    moved = (np.abs(matrix - final[:, None]) > STILL * width[:, None]).any(axis=0)
    last_moved = int(np.flatnonzero(moved)[-1]) + 1 if moved.any() else 0
    return Ending(dict(zip(names, final.tolist(), strict=True)), last_moved, steps)


@dataclass(frozen=True)
class _Scale:
    """The final states of an Eval's rollouts: each number's mean and sd (solved rollouts'
    means as well, which a cluster's ending is told against)."""

    names: tuple[str, ...]
    sd: np.ndarray
    solved: np.ndarray | None  # the solved rollouts' mean final state, in sd (None: none)

    @classmethod
    def of(cls, endings: Sequence[Ending], solved: Sequence[Ending]) -> _Scale:
        names = tuple(sorted(set.intersection(*(set(e.final) for e in endings)))) if endings else ()
        finals = np.array([[e.final[name] for name in names] for e in endings]).reshape(
            len(endings), len(names)
        )
        sd = finals.std(axis=0) if len(endings) else np.ones(0)
        scale = cls(names, np.where(sd > 1e-9, sd, 1.0), None)
        if not solved or not names:
            return scale
        mean = np.mean([scale.vector(ending) for ending in solved], axis=0)
        return replace(scale, solved=mean)

    def vector(self, ending: Ending) -> np.ndarray:
        return np.array([ending.final[name] for name in self.names]) / self.sd


def _shown(how: str, group: Sequence[Mapping[str, Any]]) -> str:
    """A way of failing as its rollouts' own words where they all say the same (numbers and
    all), normalized where they differ."""
    said = {_how(record, lambda reason: reason) for record in group}
    return said.pop() if len(said) == 1 else how


def _how(record: Mapping[str, Any], reworded: Callable[[str], str]) -> str:
    broken = sorted(
        name for name, judged in (record.get(keys.SPECS) or {}).items() if violated(judged)
    )
    reason = reworded(record.get(keys.REASON) or "unsolved")
    return f"{reason}; violated {', '.join(broken)}" if broken else reason


def _normalized(reason: str) -> str:
    """A reason without what varies from rollout to rollout: "timeout after 500 steps (4 s)" and
    "timeout after 312 steps (2.5 s)" both read "timeout after N steps"."""
    reason = re.sub(r"\s*\([^()]*\d[^()]*\)", "", reason)  # "(4 s)", "(t=0.3 s)"
    return re.sub(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "N", reason).strip()


def _by_ending(
    members: list[Mapping[str, Any]], endings: Mapping[str, Ending], scale: _Scale
) -> list[list[Mapping[str, Any]]]:
    """`members` split where their final states lie apart (those without a trace together)."""
    traced = [r for r in members if rollout_id(r) in endings and scale.names]
    untraced = [r for r in members if not (rollout_id(r) in endings and scale.names)]
    groups = [untraced] if untraced else []
    if len(traced) < 2:
        return [traced, *groups] if traced else groups
    from scipy.cluster.hierarchy import fcluster, linkage

    points = np.stack([scale.vector(endings[rollout_id(r)]) for r in traced])
    points /= math.sqrt(points.shape[1])  # distances: RMS over the numbers
    labels = fcluster(linkage(points, method="average"), CUT, criterion="distance")
    found: dict[int, list[int]] = {}
    for at, label in enumerate(labels):
        found.setdefault(int(label), []).append(at)
    # A way of failing splits only into groups that are patterns (SPLIT_AT rollouts or more);
    # a rollout of a smaller group joins the nearest of those (all stay whole without two).
    large = [members for members in found.values() if len(members) >= SPLIT_AT]
    if len(large) < 2:
        return [traced, *groups]
    centres = np.stack([points[members].mean(axis=0) for members in large])
    split: list[list[Mapping[str, Any]]] = [[] for _ in large]
    for at, record in enumerate(traced):
        nearest = int(np.argmin(np.linalg.norm(centres - points[at], axis=1)))
        split[nearest].append(record)
    return [*split, *groups]


def _cluster(
    eval: str,
    how: str,
    group: list[Mapping[str, Any]],
    failed: int,
    endings: Mapping[str, Ending],
    scale: _Scale,
    unsolved: int,
) -> Cluster:
    ids = [rollout_id(record) for record in group]
    ended = [endings[i] for i in ids if i in endings]
    furthest: tuple[tuple[str, float], ...] = ()
    if ended and scale.names:  # most typical first: nearest the cluster's mean final state
        points = np.stack([scale.vector(e) for e in ended])
        centre = points.mean(axis=0)
        near = np.linalg.norm(points - centre, axis=1)
        traced = [i for i in ids if i in endings]
        ids = [traced[k] for k in np.argsort(near, kind="stable")] + [
            i for i in ids if i not in endings
        ]
        furthest = _furthest(centre, scale)
    perturbed = Counter(
        str(r.get(keys.ARM)) for r in group if isinstance(r.get(keys.PERTURBATION), Mapping)
    )
    return Cluster(
        eval,
        how,
        tuple(ids),
        len(group) / failed,
        dict(Counter(str(r[keys.TASK]) for r in group).most_common()),
        dict(perturbed.most_common()),
        _stalled(ended),
        furthest,
        unsolved if unsolved > failed else None,
    )


def _furthest(centre: np.ndarray, scale: _Scale) -> tuple[tuple[str, float], ...]:
    """The final-state numbers where `centre` lies furthest from the solved rollouts' mean,
    in sd, those at least one sd away (none without solved rollouts)."""
    if scale.solved is None:
        return ()
    apart = centre - scale.solved
    order = np.argsort(-np.abs(apart), kind="stable")[:FURTHEST]
    return tuple((scale.names[k], round(float(apart[k]), 2)) for k in order if abs(apart[k]) >= 1)


def _stalled(ended: Sequence[Ending]) -> str:
    if not ended:
        return "no traces"
    shares = [e.still_from / e.steps for e in ended if e.steps]
    median = statistics.median(shares) if shares else 1.0
    if median >= 0.9:
        return "still moving near the end"
    steps = statistics.median(e.still_from for e in ended)
    return f"still from step {steps:g} (median; {median:.0%} of the episode)"
