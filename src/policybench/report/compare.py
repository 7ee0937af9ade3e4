"""Comparing two runs task by task: rollouts paired by scene get the exact McNemar test and
Newcombe's paired interval, unpaired ones Fisher's test; p-values adjusted across tasks."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.record.protocol import Difference, Protocol
from policybench.report.paired import (
    CONFIDENCE,
    Adjustment,
    Pairs,
    adjust,
    fisher_p,
    mcnemar_p,
    paired_interval,
    stratified_p,
    unpaired_interval,
)
from policybench.report.pairing import match
from policybench.report.stats import Tally, group, tally_of
from policybench.run.arms import BLINDING, UNBLINDED
from policybench.run.files import write_file
from policybench.text import listed

ALPHA = 0.05
ALL_TASKS = "(all tasks)"


class Design(StrEnum):
    PAIRED = "paired"  # the same scenes under both runs: exact McNemar on the discordant pairs
    UNPAIRED = "unpaired"  # no shared scenes: Fisher's exact test on the two counts

    @property
    def test(self) -> str:
        return "McNemar" if self is Design.PAIRED else "Fisher"


@dataclass(frozen=True)
class TaskComparison:
    """One task (or, with `task` None, all the tasks of an Eval both runs ran) in both runs."""

    eval: str
    task: str | None
    design: Design
    before: Tally  # the rollouts the test used: with pairs, the paired ones
    after: Tally
    pairs: Pairs | None
    left_out: tuple[int, int]  # rollouts of (before, after) without a partner in a paired test
    p_value: float
    adjusted_p: float | None  # tasks: across tasks; an Eval's pooled row: across Evals (Holm)
    interval: tuple[float, float]  # of the difference, after - before
    alpha: float
    arm: str | None = None  # the arm of both A/B runs compared in this row

    @property
    def label(self) -> str:
        return self.task if self.task is not None else ALL_TASKS

    @property
    def where(self) -> str:
        """The Eval, with the arm this row compares (A/B runs compared arm by arm)."""
        return self.eval if self.arm is None else f"{self.eval} [arm {self.arm}]"

    @property
    def difference(self) -> float:
        assert self.before.rate is not None and self.after.rate is not None
        return self.after.rate - self.before.rate

    @property
    def significant(self) -> bool:
        return self.adjusted_p is not None and self.adjusted_p < self.alpha

    @property
    def regression(self) -> bool:
        """Significantly worse after than before (adjusted p below alpha)."""
        return self.difference < 0 and self.significant

    @property
    def improvement(self) -> bool:
        return self.difference > 0 and self.significant

    @property
    def smallest_p(self) -> float:
        """The smallest p its test can give with its rollouts, whatever their outcomes: every
        pair split one way (paired), or none solved before and all after (unpaired)."""
        if self.pairs is not None:
            return mcnemar_p(Pairs(both=0, lost=0, gained=self.before.rollouts, neither=0))
        return fisher_p(0, self.before.rollouts, self.after.rollouts, self.after.rollouts)

    def as_json(self) -> dict[str, Any]:
        pairs = self.pairs
        return {
            keys.EVAL: self.eval,
            keys.TASK: self.task,
            keys.ARM: self.arm,
            "design": self.design.value,
            "before": [self.before.solved, self.before.rollouts],
            "after": [self.after.solved, self.after.rollouts],
            "difference": self.difference,
            "interval": list(self.interval),
            "pairs": None
            if pairs is None
            else {"both": pairs.both, "lost": pairs.lost, "gained": pairs.gained},
            "left_out": list(self.left_out),
            "p_value": self.p_value,
            "adjusted_p": self.adjusted_p,
            "regression": self.regression,
            "improvement": self.improvement,
            "smallest_p": self.smallest_p,
        }


@dataclass(frozen=True)
class Comparison:
    before: str  # what the runs are called in the table (run ids)
    after: str
    tasks: tuple[TaskComparison, ...]
    evals: tuple[TaskComparison, ...]  # each Eval's shared tasks pooled
    only_before: tuple[tuple[str, str], ...]  # (eval, task) run only in `before`
    only_after: tuple[tuple[str, str], ...]
    protocol: tuple[Difference, ...]  # empty when both ran the same protocol (policy aside)
    alpha: float
    adjustment: Adjustment = Adjustment.BH
    confidence: float = CONFIDENCE
    refusal: str | None = None  # why nothing was compared (the runs' arms do not match)
    notes: tuple[str, ...] = ()  # arms of one run that the other did not run, left out

    @property
    def regressions(self) -> tuple[TaskComparison, ...]:
        return tuple(row for row in self.tasks if row.regression)

    @property
    def pooled_regressions(self) -> tuple[TaskComparison, ...]:
        """The Evals whose pooled test over their tasks says significantly worse."""
        return tuple(row for row in self.evals if row.regression)

    @property
    def improvements(self) -> tuple[TaskComparison, ...]:
        return tuple(row for row in self.tasks if row.improvement)

    @property
    def undecidable(self) -> tuple[TaskComparison, ...]:
        """The tasks too few rollouts were compared on to ever be significant."""
        return tuple(row for row in self.tasks if row.smallest_p >= self.alpha)

    def verdict(self) -> str:
        """The comparison in one line: its significant regressions and improvements."""
        counted = [
            f"{len(rows)} significant {kind}{'s' * (len(rows) != 1)}"
            for kind, rows in (("regression", self.regressions), ("improvement", self.improvements))
        ]
        pooled = [row.where for row in self.pooled_regressions]
        line = (
            f"verdict: {counted[0]}, {counted[1]} of {len(self.tasks)} tasks (adjusted p < "
            f"{self.alpha:g}); {len(pooled)} of {len(self.evals)} Evals significantly worse "
            f"over their tasks pooled{f' ({listed(pooled, 4)})' if pooled else ''}"
        )
        too_few = self.undecidable
        if too_few:
            rollouts = sorted({row.before.rollouts for row in too_few})
            line += (
                f"; {len(too_few)} of them had too few rollouts ({', '.join(map(str, rollouts))} a "
                f"task) to ever reach p < {self.alpha:g}, whatever their outcomes: "
                "`policybench plan` says how many a change you care about needs"
            )
        return line

    @property
    def method(self) -> str:
        return (
            "exact McNemar test on rollouts paired by scene (Fisher's exact test where unpaired), "
            f"p adjusted across tasks by {self.adjustment.title}; each Eval's {ALL_TASKS} row: "
            "exact McNemar over the discordant pairs of all its tasks (each pair within its task), "
            "unpaired the exact stratified test by task (Gart 1970), p adjusted across Evals by "
            f"Holm; {self.confidence:.0%} intervals "
            "of the change by Newcombe's method 10 (Stat Med 1998; paired 17:2635, unpaired 17:873)"
        )

    def protocol_lines(self) -> list[str]:
        return [difference.line(self.before, self.after) for difference in self.protocol]

    def lines(self) -> list[str]:
        return format_comparison(self)

    def as_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "adjustment": self.adjustment.value,
            "test": self.method,
            "tasks": [row.as_json() for row in self.tasks],
            "evals": [row.as_json() for row in self.evals],
            "only_before": [list(pair) for pair in self.only_before],
            "only_after": [list(pair) for pair in self.only_after],
            "protocol": [asdict(difference) for difference in self.protocol],
            "refusal": self.refusal,
            "notes": list(self.notes),
            "verdict": self.verdict(),
        }

    def write(self, directory: Path, stem: str = "compare") -> tuple[Path, Path]:
        text, data = directory / f"{stem}.txt", directory / f"{stem}.json"
        write_file(text, "\n".join(self.lines()) + "\n")
        write_file(data, json.dumps(self.as_json(), indent=2, sort_keys=True) + "\n")
        return text, data


def compare_runs(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    names: tuple[str, str] = ("A", "B"),
    alpha: float = ALPHA,
    adjustment: Adjustment = Adjustment.BH,
    confidence: float = CONFIDENCE,
    protocols: tuple[Protocol, Protocol] | None = None,
) -> Comparison:
    """Compares the tasks both runs ran, each and pooled per Eval; lists the ones only one of
    them ran and every protocol field that differs (of `protocols`, the runs' own with their
    settings; by default read from the records alone). Arms are not looked at: two runs of
    A/B arms are compared by `compare_arms`."""
    return _compared_groups(
        [(None, before, after)], names, alpha, adjustment, confidence, protocols, before, after
    )


def adjusted_together(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """Several comparisons of one run (its pairs of arms) with their tasks' p-values adjusted as
    one family, across every task of every comparison (each comparison's own adjustment), so
    that a cell has one adjusted p wherever it is shown."""
    rows = [row for comparison in comparisons for row in comparison.tasks]
    if len(comparisons) < 2 or not rows:
        return list(comparisons)
    adjusted = iter(adjust([row.p_value for row in rows], comparisons[0].adjustment))
    return [
        replace(
            comparison,
            tasks=tuple(replace(row, adjusted_p=next(adjusted)) for row in comparison.tasks),
        )
        for comparison in comparisons
    ]


def arms_of(records: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The arms an A/B run's records name, in their order; () for a run of one policy."""
    return tuple(dict.fromkeys(str(r[keys.ARM]) for r in records if keys.ARM in r))


@dataclass(frozen=True)
class ArmPick:
    """Which arm of each run to compare (None: the run's own arms, or it has none), and how
    the user names one, for the refusal that asks them to."""

    before: str | None = None
    after: str | None = None
    how: tuple[str, str] = ("--before-arm NAME (or --arm NAME)", "--after-arm NAME (or --arm NAME)")


def still_blinded(settings: Mapping[str, Any] | None) -> str | None:
    """The blinding digest of a run (its run.json's settings) whose arms are still letters;
    None for a run never blinded, or unblinded since."""
    if not settings or settings.get(UNBLINDED):
        return None
    digest = settings.get(BLINDING)
    return None if digest is None else str(digest)


def picked(
    arm: str | None,
    before_arm: str | None,
    after_arm: str | None,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
) -> ArmPick:
    """`report compare`'s arm options: --before-arm and --after-arm each pick one run's arm;
    --arm picks that arm in each run that is an A/B run (and refuses when neither is)."""
    if arm is not None and not arms_of(before) and not arms_of(after):
        raise ValueError(f"--arm {arm} picks an arm of an A/B run, and neither run is one")
    return ArmPick(
        before_arm or (arm if arm is not None and arms_of(before) else None),
        after_arm or (arm if arm is not None and arms_of(after) else None),
    )


def compare_arms(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    names: tuple[str, str] = ("A", "B"),
    alpha: float = ALPHA,
    adjustment: Adjustment = Adjustment.BH,
    confidence: float = CONFIDENCE,
    protocols: tuple[Protocol, Protocol] | None = None,
    pick: ArmPick = ArmPick(),
    letters: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """Two runs compared where either may be an A/B run: the picked arm of each, or, when both
    are A/B runs, arm by arm (an arm against the other run's arm of its name). An A/B run set
    against a run of one policy without an arm picked, two A/B runs whose arms share no name,
    or two whose letters were dealt by different blindings (`letters`: each run's
    `still_blinded`), compare nothing: the comparison's `refusal` says so and how to pick an
    arm (pooling the arms would mix the policies compared; keeping one would depend on their
    order; letter A need not be the same policy in both)."""
    picked = _picked_arms(before, after, names, pick)
    if isinstance(picked, str):
        return _refused(picked, names, alpha, adjustment, confidence)
    sides, named = picked
    chosen = (pick.before is not None, pick.after is not None)
    # A run whose records all name one arm (a wrapped loop recorded as arm A) ran one policy.
    arms = [
        () if was_picked or len(arms_of(side)) < 2 else arms_of(side)
        for was_picked, side in zip(chosen, sides, strict=True)
    ]
    if not arms[0] and not arms[1]:
        groups = [(None, sides[0], sides[1])]
        return _compared_groups(
            groups, named, alpha, adjustment, confidence, protocols, before, after
        )
    refusal = _unmatched_arms(names, (arms[0], arms[1]), letters, pick)
    if refusal is not None:
        return _refused(refusal, names, alpha, adjustment, confidence)
    shared = [arm for arm in arms[0] if arm in arms[1]]
    groups = [
        (
            arm,
            [r for r in sides[0] if str(r.get(keys.ARM)) == arm],
            [r for r in sides[1] if str(r.get(keys.ARM)) == arm],
        )
        for arm in shared
    ]
    notes = tuple(
        f"arm {arm} of {names[i]} is not an arm of {names[1 - i]}: left out of the comparison"
        for i in (0, 1)
        for arm in arms[i]
        if arm not in shared
    )
    compared = _compared_groups(
        groups, named, alpha, adjustment, confidence, protocols, before, after
    )
    return replace(compared, notes=notes)


def _picked_arms(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    names: tuple[str, str],
    pick: ArmPick,
) -> tuple[list[list[Mapping[str, Any]]], tuple[str, str]] | str:
    """Each run's records, of its picked arm where one is picked, and the names they are shown
    by; or why a picked arm cannot be compared (the run has no arm of that name)."""
    sides = [list(before), list(after)]
    shown = list(names)
    for i, (arm, how) in enumerate(zip((pick.before, pick.after), pick.how, strict=True)):
        if arm is None:
            continue
        arms = arms_of(sides[i])
        if arm not in arms:
            has = f"its arms are {', '.join(arms)}" if arms else "it is not an A/B run"
            return f"{names[i]} has no arm {arm} ({has}); give {how.split(' (')[0]} one of them"
        sides[i] = [r for r in sides[i] if str(r.get(keys.ARM)) == arm]
        shown[i] = names[i] if names[i] == arm else f"{names[i]} [arm {arm}]"
    return sides, (shown[0], shown[1])


def _unmatched_arms(
    names: tuple[str, str],
    arms: tuple[Sequence[str], Sequence[str]],
    letters: tuple[str | None, str | None],
    pick: ArmPick,
) -> str | None:
    """Why two runs, one or both of them A/B runs, cannot be compared arm by arm; None when
    they can."""
    if not arms[0] or not arms[1]:
        i = 0 if arms[0] else 1
        return (
            f"{names[i]} is an A/B run (arms {', '.join(arms[i])}) and {names[1 - i]} is not: "
            f"comparing them would pool its arms or keep one; pick the arm to compare with "
            f"{pick.how[i]}"
        )
    if letters[0] != letters[1]:
        return (
            f"{names[0]} and {names[1]} were not blinded alike, so a letter may stand for "
            "another policy in each and their arms cannot be matched by name; unblind them "
            f"(policybench report unblind), or pick one arm of each with {pick.how[0]} and "
            f"{pick.how[1]}"
        )
    if not any(arm in arms[1] for arm in arms[0]):
        return (
            f"{names[0]} (arms {', '.join(arms[0])}) and {names[1]} (arms "
            f"{', '.join(arms[1])}) are A/B runs whose arms share no name, so no arm can be "
            f"compared with its own; pick one arm of each with {pick.how[0]} and {pick.how[1]}"
        )
    return None


def _refused(
    refusal: str,
    names: tuple[str, str],
    alpha: float,
    adjustment: Adjustment,
    confidence: float,
) -> Comparison:
    return Comparison(
        names[0], names[1], (), (), (), (), (), alpha, adjustment, confidence, refusal=refusal
    )


def _compared_groups(
    groups: Sequence[tuple[str | None, Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]],
    names: tuple[str, str],
    alpha: float,
    adjustment: Adjustment,
    confidence: float,
    protocols: tuple[Protocol, Protocol] | None,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
) -> Comparison:
    """Each (arm, before's rollouts, after's rollouts) group compared task by task and pooled
    per Eval, the p-values adjusted across every group's tasks."""
    was, now = protocols or (Protocol.of(before), Protocol.of(after))
    tested, pooled = [], []
    only_before: dict[tuple[str, str], None] = {}
    only_after: dict[tuple[str, str], None] = {}
    for arm, mine_before, mine_after in groups:
        tasks_before = group(mine_before, keys.EVAL, keys.TASK)
        tasks_after = group(mine_after, keys.EVAL, keys.TASK)
        shared = sorted(tasks_before.keys() & tasks_after.keys())
        tested += [
            replace(
                _compared(
                    eval,
                    task,
                    tasks_before[(eval, task)],
                    tasks_after[(eval, task)],
                    alpha,
                    confidence,
                ),
                arm=arm,
            )
            for eval, task in shared
        ]
        for eval in sorted({eval for eval, _ in shared}):
            strata = [(tasks_before[pair], tasks_after[pair]) for pair in shared if pair[0] == eval]
            pooled.append(replace(_pooled(eval, strata, alpha, confidence), arm=arm))
        only_before.update(dict.fromkeys(sorted(tasks_before.keys() - tasks_after.keys())))
        only_after.update(dict.fromkeys(sorted(tasks_after.keys() - tasks_before.keys())))
    adjusted = adjust([row.p_value for row in tested], adjustment)
    # Each Eval's pooled test is a family of its own, adjusted across Evals (and arms) by Holm.
    pooled_adjusted = adjust([row.p_value for row in pooled], Adjustment.HOLM)
    return Comparison(
        before=names[0],
        after=names[1],
        tasks=tuple(replace(row, adjusted_p=q) for row, q in zip(tested, adjusted, strict=True)),
        evals=tuple(
            replace(row, adjusted_p=q) for row, q in zip(pooled, pooled_adjusted, strict=True)
        ),
        only_before=tuple(only_before),
        only_after=tuple(only_after),
        protocol=was.differences(now, policy=False),  # the policy is what is compared
        alpha=alpha,
        adjustment=adjustment,
        confidence=confidence,
    )


def _pooled(
    eval: str,
    strata: Sequence[tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]],
    alpha: float,
    confidence: float,
) -> TaskComparison:
    """An Eval's pooled row over its shared tasks (`strata`: each task's rollouts in the two
    runs), not yet adjusted."""
    pooled_before = [record for before, _ in strata for record in before]
    pooled_after = [record for _, after in strata for record in after]
    return _compared(eval, None, pooled_before, pooled_after, alpha, confidence, strata)


def pooled_row(
    eval: str,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    alpha: float = ALPHA,
    confidence: float = CONFIDENCE,
) -> TaskComparison | None:
    """`compare_runs`'s pooled row of one Eval's rollouts in two runs, made without its task
    rows (adjusted as a family of one, as `compare_runs` adjusts it for a run of one Eval); None
    where the runs share no task of it."""
    tasks_before, tasks_after = group(before, keys.TASK), group(after, keys.TASK)
    shared = sorted(tasks_before.keys() & tasks_after.keys())
    if not shared:
        return None
    row = _pooled(eval, [(tasks_before[t], tasks_after[t]) for t in shared], alpha, confidence)
    return replace(row, adjusted_p=adjust([row.p_value], Adjustment.HOLM)[0])


def nothing_compared(comparison: Comparison) -> str:
    """Why a comparison of runs compared nothing (their arms do not match, or they share no
    task), and what to do."""
    if comparison.refusal is not None:
        return comparison.refusal

    def ran(tasks: tuple[tuple[str, str], ...]) -> str:
        return listed([f"{eval}/{task}" for eval, task in tasks], 4) or "no task"

    return (
        f"{comparison.before} and {comparison.after} share no task, so nothing was compared "
        f"({comparison.before} ran {ran(comparison.only_before)}; {comparison.after} ran "
        f"{ran(comparison.only_after)}); compare runs of the same Evals and tasks"
    )


def _compared(
    eval: str,
    task: str | None,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    alpha: float,
    confidence: float,
    strata: Sequence[tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]] = (),
) -> TaskComparison:
    """One group of rollouts compared, not yet adjusted. Paired when at least half the smaller
    run's rollouts share a scene with the other run (a stray shared seed does not decide it):
    exact McNemar over the discordant pairs, which, every pair lying within its task, is
    stratified by task. Unpaired, an Eval's pooled row (`strata`: each task's rollouts) gets
    the exact stratified test of its tasks (a single group, Fisher's)."""
    matched = match(before, after)
    if _paired(matched, before, after):
        pairs = _pairs(matched.pairs)
        return TaskComparison(
            eval,
            task,
            Design.PAIRED,
            tally_of(b for b, _ in matched.pairs),
            tally_of(a for _, a in matched.pairs),
            pairs,
            (len(matched.only_before), len(matched.only_after)),
            mcnemar_p(pairs),
            None,
            paired_interval(pairs, confidence),
            alpha,
        )
    was, now = tally_of(before), tally_of(after)
    return TaskComparison(
        eval,
        task,
        Design.UNPAIRED,
        was,
        now,
        None,
        (0, 0),
        stratified_p([_counts(b, a) for b, a in strata])
        if strata
        else fisher_p(was.solved, was.rollouts, now.solved, now.rollouts),
        None,
        unpaired_interval(was.solved, was.rollouts, now.solved, now.rollouts, confidence),
        alpha,
    )


def _paired(matched: Any, before: Sequence[Any], after: Sequence[Any]) -> bool:
    """Whether two groups of rollouts are compared paired: at least half the smaller group's
    rollouts share a scene with the other (a stray shared seed does not decide it)."""
    return bool(matched.pairs) and 2 * len(matched.pairs) >= min(len(before), len(after))


def pooled_pairs(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> Pairs | None:
    """Two runs' rollouts of one Eval paired by scene, as its pooled row pairs them; None where
    they are compared unpaired."""
    matched = match(before, after)
    return _pairs(matched.pairs) if _paired(matched, before, after) else None


def _counts(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> tuple[int, int, int, int]:
    was, now = tally_of(before), tally_of(after)
    return was.solved, was.rollouts, now.solved, now.rollouts


def _pairs(matched: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Pairs:
    solved = OutcomeKind.SOLVED.value
    counted = Counter(
        (b[keys.OUTCOME] == solved, a[keys.OUTCOME] == solved) for b, a in matched
    )  # one pass: (solved before, solved after) -> pairs
    return Pairs(
        both=counted[True, True],
        lost=counted[True, False],
        gained=counted[False, True],
        neither=counted[False, False],
    )


def format_comparison(comparison: Comparison) -> list[str]:
    before, after = comparison.before, comparison.after
    ci = f"{comparison.confidence:.0%} CI"
    header = ("eval", "task", "test", before, after, "change", ci, "lost/gained", "p", "adj. p", "")
    cells = [header]
    for row in (*comparison.tasks, *comparison.evals):
        flag = "REGRESSION" if row.regression else "improved" if row.improvement else ""
        low, high = row.interval
        cells.append(
            (
                row.where,
                row.label,
                row.design.test,
                f"{row.before.solved}/{row.before.rollouts} ({row.before.rate:.0%})",
                f"{row.after.solved}/{row.after.rollouts} ({row.after.rate:.0%})",
                f"{row.difference:+.1%}",
                f"[{low:+.1%}, {high:+.1%}]",
                "-" if row.pairs is None else f"{row.pairs.lost}/{row.pairs.gained}",
                f"{row.p_value:.3g}",
                "-" if row.adjusted_p is None else f"{row.adjusted_p:.3g}",
                flag,
            )
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    table = [
        "  ".join(
            cell.ljust(width) if i < 3 or i == 10 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    ]
    lines = [f"PROTOCOL DIFFERS: {line}" for line in comparison.protocol_lines()] + table
    if comparison.refusal is not None:
        lines.append(f"NOT COMPARED: {comparison.refusal}")
    elif not comparison.tasks:
        lines.append("(no task was run by both)")
    lines += comparison.notes
    for name, pairs in ((before, comparison.only_before), (after, comparison.only_after)):
        if pairs:
            lines.append(f"only in {name}: " + ", ".join(f"{e}/{t}" for e, t in pairs))
    for side, (name, other) in enumerate(((before, after), (after, before))):
        rows = [row for row in comparison.tasks if row.left_out[side]]
        if rows:  # one line for all the tasks: a run of more rollouts leaves some out on each
            left_out = sum(row.left_out[side] for row in rows)
            tasks = listed([f"{row.where}/{row.label}" for row in rows], 3)
            lines.append(
                f"{left_out} rollouts of {name} on {len(rows)} task{'s' * (len(rows) != 1)} "
                f"({tasks}) have no scene in {other}, so the paired test leaves them out: "
                f"run {other} with as many rollouts a task to pair them all"
            )
    lines.append(f"tests: {comparison.method}")
    lines.append(comparison.verdict())
    return lines
