"""What operators' verdicts say beside the automatic outcomes: the operator success rate per
Eval, Cohen's kappa (statsmodels) automatic vs operator and between scorers, and disagreements."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Any

import numpy as np

from policybench import keys
from policybench.report.stats import group
from policybench.run.arms import arm_order
from policybench.run.records import rollout_id
from policybench.run.verdicts import (
    AUTOMATIC,
    CHOICES,
    FAILURE,
    SUCCESS,
    Verdicts,
    consensus,
    unscored_reason,
)

OPERATOR = "operator"  # summary.json's section
OVERALL = "all"


def kappa(pairs: Sequence[tuple[str, str]], categories: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters' labels; None with no pairs, or when chance agreement is
    certain (every label the same: kappa is undefined)."""
    if not pairs:
        return None
    from statsmodels.stats.inter_rater import cohens_kappa

    index = {name: i for i, name in enumerate(categories)}
    table = np.zeros((len(categories), len(categories)))
    for first, second in pairs:
        table[index[first], index[second]] += 1
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(cohens_kappa(table, return_results=False))
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class AgreementRow:
    """One Eval (or the run): how many rollouts operators judged, both success rates, and the
    kappa of automatic vs operator outcomes over the judged rollouts that did not error."""

    eval: str
    arm: str | None  # in an A/B run (the arm's letter in a blinded one)
    rollouts: int
    scored: int  # with an operator outcome (every scorer's latest decisive verdicts agree)
    errors: int  # errored rollouts: no verdict on the policy, neither scored nor unscored
    automatic_solved: int
    automatic_rate: float | None  # over every rollout, as the report's own rate
    operator_solved: int
    operator_rate: float | None  # over the scored rollouts
    kappa: float | None  # automatic vs operator, over the scored rollouts
    compared: int  # rollouts the kappa is over
    unsure: int = 0  # of the unscored: scored, but every verdict unsure (no outcome to count)

    @property
    def unscored(self) -> int:
        """Rollouts without an operator outcome: unsure, disputed or not scored yet."""
        return self.rollouts - self.scored - self.errors


@dataclass(frozen=True)
class ScorerPair:
    first: str
    second: str
    rollouts: int  # scored by both
    agreed: int
    kappa: float | None  # over success / failure / unsure


@dataclass(frozen=True)
class Disagreement:
    """A rollout whose automatic outcome and some operator's verdict, or two operators' verdicts,
    differ (an unsure verdict differs from none)."""

    rollout: str
    eval: str
    task: str
    automatic: str
    verdicts: Mapping[str, str]  # scorer -> latest verdict
    notes: Mapping[str, str]  # scorer -> its note, where one was given


@dataclass(frozen=True)
class Agreement:
    scorers: tuple[str, ...]
    rows: tuple[AgreementRow, ...]  # per Eval, then the run
    pairs: tuple[ScorerPair, ...]
    disagreements: tuple[Disagreement, ...]
    problems: tuple[str, ...]

    @classmethod
    def of(cls, records: Sequence[Mapping[str, Any]], verdicts: Verdicts) -> Agreement:
        latest = verdicts.latest()
        rows = []
        for arm in arm_order(records) or (None,):  # an A/B run's rows are per arm
            mine = [r for r in records if arm is None or str(r.get(keys.ARM)) == arm]
            rows += [
                _row(e, arm, members, latest) for (e,), members in group(mine, keys.EVAL).items()
            ]
            rows.append(_row(OVERALL, arm, mine, latest))
        pairs = []
        for first, second in combinations(verdicts.scorers, 2):
            both = [
                (given[first].verdict, given[second].verdict)
                for given in latest.values()
                if first in given and second in given
            ]
            agreed = sum(a == b for a, b in both)
            pairs.append(ScorerPair(first, second, len(both), agreed, kappa(both, CHOICES)))
        disagreements = []
        for record in records:
            given = latest.get(rollout_id(record), {})
            automatic = AUTOMATIC.get(record[keys.OUTCOME])
            said = {scorer: verdict.verdict for scorer, verdict in sorted(given.items())}
            if automatic is None or len({automatic, *said.values()}) == 1 or not said:
                continue
            disagreements.append(
                Disagreement(
                    rollout_id(record),
                    record[keys.EVAL],
                    record[keys.TASK],
                    automatic,
                    said,
                    {s: v.note for s, v in sorted(given.items()) if v.note},
                )
            )
        return cls(
            verdicts.scorers, tuple(rows), tuple(pairs), tuple(disagreements), verdicts.problems
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "scorers": list(self.scorers),
            "rows": [{**asdict(row), "unscored": row.unscored} for row in self.rows],
            "scorer_pairs": [asdict(pair) for pair in self.pairs],
            "disagreements": [asdict(d) for d in self.disagreements],
            "problems": list(self.problems),
            "method": "operator outcome: every scorer's latest decisive verdict agrees (unsure "
            "and disputed rollouts are unscored); Cohen's kappa (statsmodels) automatic vs "
            "operator over scored rollouts that did not error (success/failure), and between "
            "scorers over rollouts both scored (success/failure/unsure)",
        }

    def lines(self) -> list[str]:
        """The terminal's account of the verdicts."""
        lines = [f"operator verdicts from {', '.join(self.scorers) or 'no scorer yet'}:"]
        for row in self.rows:
            lines.append(
                f"  {row.eval}{'' if row.arm is None else f', arm {row.arm}'}: automatic "
                f"{_pct(row.automatic_rate)} "
                f"({row.automatic_solved}/{row.rollouts}), operator {_pct(row.operator_rate)} "
                f"({row.operator_solved}/{row.scored} scored"
                f"{f', {row.unsure} scored unsure' if row.unsure else ''}, "
                f"{row.unscored - row.unsure} not), "
                "kappa "
                f"{_kappa(row.kappa)} over {row.compared}"
            )
        for pair in self.pairs:
            lines.append(
                f"  {pair.first} vs {pair.second}: {pair.agreed}/{pair.rollouts} agree, kappa "
                f"{_kappa(pair.kappa)}"
            )
        lines += [
            f"  disagree: {d.rollout}: automatic {d.automatic}, " + _said(d)
            for d in self.disagreements
        ]
        return lines + [f"  warning: {problem}" for problem in self.problems]


def _row(
    eval: str, arm: str | None, members: Sequence[Mapping[str, Any]], latest: Mapping[str, Any]
) -> AgreementRow:
    judged, unsure = [], 0
    for record in members:
        given = latest.get(rollout_id(record), {})
        outcome = consensus(v.verdict for v in given.values())
        judged.append((record, None if record[keys.OUTCOME] not in AUTOMATIC else outcome))
        said = [v.verdict for v in given.values()]
        if record[keys.OUTCOME] in AUTOMATIC and said and unscored_reason(said) == "scored unsure":
            unsure += 1
    scored = [(record, outcome) for record, outcome in judged if outcome is not None]
    compared = [
        (AUTOMATIC[record[keys.OUTCOME]], outcome)
        for record, outcome in scored
        if record[keys.OUTCOME] in AUTOMATIC
    ]
    solved = sum(record[keys.OUTCOME] == "solved" for record in members)
    operator_solved = sum(outcome == SUCCESS for _, outcome in scored)
    return AgreementRow(
        eval=eval,
        arm=arm,
        rollouts=len(members),
        scored=len(scored),
        errors=sum(record[keys.OUTCOME] not in AUTOMATIC for record in members),
        automatic_solved=solved,
        automatic_rate=solved / len(members) if members else None,
        operator_solved=operator_solved,
        operator_rate=operator_solved / len(scored) if scored else None,
        kappa=kappa(compared, (SUCCESS, FAILURE)),
        compared=len(compared),
        unsure=unsure,
    )


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def _kappa(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def _said(disagreement: Disagreement) -> str:
    return ", ".join(f"{scorer} {verdict}" for scorer, verdict in disagreement.verdicts.items())
