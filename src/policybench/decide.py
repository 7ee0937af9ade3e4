"""Decisions that stop early (`--decide RATE`): Wald's sequential probability ratio test of "the
success rate is at least RATE" over an Eval's rollouts in decision order, and an interval for the
rate that stays valid however the sampling stopped.

The test weighs the rollouts' outcomes one at a time, as the likelihood ratio of a rate of
RATE + delta (the policy passes) against one of RATE - delta (it fails); between the two lies the
indifference zone, where either answer is acceptable. It says PASS once the ratio reaches
(1 - beta) / alpha, FAIL once it falls to beta / (1 - alpha), and is INCONCLUSIVE while neither,
and at the end of the plan if it has not decided by then. Wald's boundaries make a PASS at
RATE - delta about alpha likely, a FAIL at RATE + delta about beta (Wald 1945; approximately: the
exact chances of the truncated plan, from `policybench.operating`, are printed before the run).
An error counts as a rollout not solved, as in every success rate policybench states.

Decision order: an Eval's rollouts in rounds, one rollout of each task a round, the tasks of a
round in an order fixed by a hash of the round and the task's name (ORDER_RULE), so that a
decision made early weighs scenes of many tasks, not the first tasks' alone, and falls at the same
rollout whichever worker ran what. An A/B run's arms are decided each on its own.

The interval is the beta-binomial mixture confidence sequence (Robbins 1970; Howard et al. 2021):
with a uniform prior on the rate, {p : B(s + 1, n - s + 1) / (p^s (1 - p)^(n - s)) < 1 / a} holds
the true rate at every n at once with probability 1 - a, so it stays valid when the sampling
stopped because of what it saw. The plain success rate of an Eval that stopped early is biased
(a run stops when its first outcomes happen to be extreme): the summary marks it.

Against a baseline run (`--decide baseline[:ALPHA,BETA,MARGIN]` with `--baseline RUN`), the test
is paired, scene by scene, and asks "is this run worse than the baseline by MARGIN or more?".
The scenes both runs solved, or both failed, say nothing; of the others (a share d of the
scenes), an identical policy wins half, and one worse by MARGIN wins 0.5 - MARGIN / (2 d), at
most 0.5 - MARGIN / 2. So the test weighs the share this run wins of them, 0.5 (PASS) against
0.5 - MARGIN / 2 (FAIL): an identical policy FAILs with probability about ALPHA, one worse by
MARGIN PASSes with probability about BETA, whatever d (fewer differing scenes make a worse
policy's share further from a half). A rollout whose scene the baseline did not run weighs
nothing either.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from policybench import keys
from policybench.record.episode import OutcomeKind
from policybench.run.arms import arm_order
from policybench.run.records import latest_per_rollout, scene_key
from policybench.run.results import RESULTS, read_results

ALPHA = BETA = 0.05  # the default error rates: a false PASS, a false FAIL
DELTA = 0.1  # the default half-width of the indifference zone around RATE
MARGIN = 0.2  # the default drop below the baseline that `--decide baseline` must FAIL
CONFIDENCE = 0.95  # of the interval stated with a decision
SYNTAX = "RATE[:ALPHA,BETA,DELTA]"
PAIRED_SYNTAX = "baseline[:ALPHA,BETA,MARGIN]"
PAIRED = "baseline"  # --decide's RATE that asks for the paired test against --baseline
EXAMPLES = "e.g. 0.8, 0.8:0.05,0.05,0.1 or baseline:0.05,0.05,0.2"


class Verdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class SequentialTest:
    """Wald's test of "success rate >= rate", with its error rates and indifference zone; or,
    `paired`, of "not worse than the baseline by `delta` (the margin) or more", over the scenes
    where it and the baseline differ (the module's doc)."""

    rate: float
    alpha: float = ALPHA
    beta: float = BETA
    delta: float = DELTA  # paired: the margin
    paired: bool = False

    def __post_init__(self) -> None:
        syntax = PAIRED_SYNTAX if self.paired else SYNTAX
        for name, value in (("RATE", self.rate), ("ALPHA", self.alpha), ("BETA", self.beta)):
            if not 0 < value < 1:
                raise ValueError(f"--decide {syntax}: {name} must lie in (0, 1), got {value:g}")
        if self.paired:
            if not 0 < self.delta < 1:
                raise ValueError(
                    f"--decide {syntax}: MARGIN is a drop of success rate in (0, 1), e.g. "
                    f"{MARGIN}; got {self.delta:g}"
                )
            return
        if not 0 < self.low < self.rate < self.high < 1:
            raise ValueError(
                f"--decide {SYNTAX}: the indifference zone RATE +- DELTA = {self.rate:g} +- "
                f"{self.delta:g} must lie inside (0, 1); give a smaller DELTA (under "
                f"{min(self.rate, 1 - self.rate):.3g} for RATE {self.rate:g}), e.g. "
                f"--decide {self.rate:g}:{self.alpha:g},{self.beta:g},"
                f"{min(self.rate, 1 - self.rate) / 2:.3g}"
            )

    @classmethod
    def parse(cls, text: str) -> SequentialTest:
        """`RATE` or `RATE:ALPHA,BETA,DELTA` (--decide's value), RATE `baseline` for the paired
        test; ValueError saying the syntax."""
        rate, _, rest = text.partition(":")
        parts = rest.split(",") if rest else []
        paired = rate.strip() == PAIRED
        try:
            if rest and len(parts) != 3:
                raise ValueError
            numbers = [0.5 if paired else float(rate), *(float(part) for part in parts)]
        except ValueError:
            raise ValueError(f"--decide takes {SYNTAX} ({EXAMPLES}), got {text!r}") from None
        if paired and not rest:
            numbers += [ALPHA, BETA, MARGIN]
        return cls(*numbers, paired=paired)

    @property
    def low(self) -> float:
        """The rate at which the policy fails (RATE - delta); paired, the share of the scenes
        where the two differ that a policy worse by the margin wins when they all differ
        (0.5 - margin / 2; with fewer differing it wins fewer)."""
        return 0.5 - self.delta / 2 if self.paired else self.rate - self.delta

    @property
    def high(self) -> float:
        """The rate at which the policy passes (RATE + delta); paired, the half of them an
        identical policy wins."""
        return 0.5 if self.paired else self.rate + self.delta

    @property
    def false_pass(self) -> float:
        """The chance of a PASS at `low` it allows: ALPHA; paired, BETA (the chance a policy
        worse by the margin passes)."""
        return self.beta if self.paired else self.alpha

    @property
    def false_fail(self) -> float:
        """The chance of a FAIL at `high` it allows: BETA; paired, ALPHA (the chance a policy
        identical to its baseline fails)."""
        return self.alpha if self.paired else self.beta

    @property
    def bounds(self) -> tuple[float, float]:
        """The log likelihood ratio's FAIL and PASS boundaries."""
        false_pass, false_fail = self.false_pass, self.false_fail
        return (
            math.log(false_fail / (1 - false_pass)),
            math.log((1 - false_fail) / false_pass),
        )

    @property
    def steps(self) -> tuple[float, float]:
        """What a solved and an unsolved rollout add to the log likelihood ratio."""
        return (
            math.log(self.high / self.low),
            math.log((1 - self.high) / (1 - self.low)),
        )

    def fewest(self) -> tuple[int, int]:
        """The fewest rollouts that can PASS (all solved) and that can FAIL (none solved)."""
        fail_at, pass_at = self.bounds
        solved, unsolved = self.steps
        return math.ceil(pass_at / solved - 1e-9), math.ceil(fail_at / unsolved - 1e-9)

    def walk(self, solved: Iterable[bool | None]) -> Decision:
        """The decision over outcomes in decision order (None: a rollout that weighs nothing,
        as a paired scene both runs solved): where it fell, or INCONCLUSIVE after them all."""
        n, weighed, wins = 0, 0, 0
        for outcome in solved:
            n += 1
            if outcome is None:
                continue
            weighed += 1
            wins += bool(outcome)
            verdict = self.verdict_at(wins, weighed - wins)
            if verdict is not Verdict.INCONCLUSIVE:
                return Decision(self, verdict, n, wins, weighed)
        return Decision(self, Verdict.INCONCLUSIVE, n, wins, weighed)

    def verdict_at(self, wins: Any, losses: Any) -> Any:
        """The verdict once `wins` outcomes weighed were solved (won) and `losses` not: PASS
        where the log likelihood ratio reaches the PASS boundary, FAIL where it falls to the
        FAIL one. Element by element for arrays (policybench.operating's exact chances take
        the same rule as the walk)."""
        fail_at, pass_at = self.bounds
        up, down = self.steps
        ratio = np.asarray(wins) * up + np.asarray(losses) * down
        verdict = np.where(
            ratio >= pass_at,
            Verdict.PASS,
            np.where(ratio <= fail_at, Verdict.FAIL, Verdict.INCONCLUSIVE),
        )
        return Verdict(verdict.item()) if verdict.ndim == 0 else verdict

    def __str__(self) -> str:
        errors = f"alpha {self.alpha:g}, beta {self.beta:g}"
        if self.paired:
            return (
                f"not worse than the baseline by {self.delta:g} or more (alpha {self.alpha:g}: "
                f"an identical policy FAILs; beta {self.beta:g}: one worse by {self.delta:g} "
                f"PASSes; of the scenes where the two differ, wins {self.high:g} vs "
                f"{self.low:g})"
            )
        return f"success rate >= {self.rate:g} ({errors}, indifference {self.low:g}-{self.high:g})"


@dataclass(frozen=True)
class Decision:
    """Where a sequential test stands after `rollouts` outcomes, `weighed` of them counted
    (all but a paired test's scenes without a difference) and `solved` of those solved."""

    test: SequentialTest
    verdict: Verdict
    rollouts: int
    solved: int
    weighed: int

    @property
    def decided(self) -> bool:
        return self.verdict is not Verdict.INCONCLUSIVE

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """The success rate's interval, valid under optional stopping (the module's doc)."""
        return confidence_sequence(self.solved, self.weighed, 1 - confidence)

    def line(self) -> str:
        """`PASS at rollout 12: 12/12 solved, rate 0.63-1.00 (anytime 95%); success rate ...`"""
        low, high = self.interval()
        where = (
            f"{self.verdict} at rollout {self.rollouts}"
            if self.decided
            else f"{self.verdict} after {self.rollouts} rollouts"
        )
        found = f"{self.solved}/{self.rollouts} solved, rate"
        if self.test.paired:
            found = (
                f"won {self.solved} of the {self.weighed} scenes where it and the baseline "
                f"differ ({self.rollouts - self.weighed} alike or not in the baseline), share"
            )
        return f"{where}: {found} {low:.2f}-{high:.2f} (anytime {CONFIDENCE:.0%}); {self.test}"

    def as_json(self) -> dict[str, Any]:
        low, high = self.interval()
        return {
            "verdict": self.verdict.value,
            "rollouts": self.rollouts,
            "solved": self.solved,
            "weighed": self.weighed,
            "paired": self.test.paired,
            "rate": self.test.rate,
            "alpha": self.test.alpha,
            "beta": self.test.beta,
            "delta": self.test.delta,
            "interval": [low, high],
        }


def confidence_sequence(solved: int, n: int, miss: float) -> tuple[float, float]:
    """The rates p the beta-binomial mixture martingale has not ruled out at level `miss` after
    `solved` of `n`: log B(s + 1, n - s + 1) - s log p - (n - s) log(1 - p) < log(1 / miss)."""
    if n == 0:
        return 0.0, 1.0
    from scipy.optimize import brentq
    from scipy.special import betaln

    evidence = betaln(solved + 1, n - solved + 1)
    threshold = math.log(1 / miss)

    def excess(p: float) -> float:
        return evidence - solved * math.log(p) - (n - solved) * math.log1p(-p) - threshold

    centre = min(max(solved / n, 1e-12), 1 - 1e-12)
    tiny = 1e-12
    low = 0.0 if excess(tiny) < 0 else brentq(excess, tiny, centre)
    high = 1.0 if excess(1 - tiny) < 0 else brentq(excess, centre, 1 - tiny)
    return float(low), float(high)


# --- an Eval's rollouts in decision order ---------------------------------------------------------


def decision_order(rollouts: Sequence[tuple[str, int]]) -> list[int]:
    """The places in decision order of rollouts given as (task, plan index): in rounds, a
    rollout's round its place within its task (tasks' rollouts in plan order); within a round,
    the tasks in ORDER_RULE's order (a shuffle fixed by the task's name and the round), so that
    no task decides alone however many tasks the plan has, and the order is the same whichever
    worker ran what. Returns, for each rollout given, its position."""
    within: dict[tuple[str, int], int] = {}
    per_task: dict[str, int] = {}
    for task, index in sorted(rollouts, key=lambda pair: pair[1]):
        within[(task, index)] = per_task.get(task, 0)
        per_task[task] = within[(task, index)] + 1
    keys_ = [(within[pair], _shuffled(pair[0], within[pair]), pair[1]) for pair in rollouts]
    ranked = sorted(range(len(rollouts)), key=keys_.__getitem__)
    position = [0] * len(rollouts)
    for place, i in enumerate(ranked):
        position[i] = place
    return position


ORDER_RULE = "rounds of one rollout a task; within a round, tasks by sha256('ROUND/TASK')"


def _shuffled(task: str, round: int) -> str:
    return hashlib.sha256(f"{round}/{task}".encode()).hexdigest()


def side_of(record: Mapping[str, Any]) -> tuple[str, str | None]:
    """What a record is decided with: its Eval and, in an A/B run, its arm."""
    arm = record.get(keys.ARM)
    return record[keys.EVAL], None if arm is None else str(arm)


def read_baseline(run_dir: Path, arm: str | None = None) -> Baseline:
    """The paired test's baseline: the run in `run_dir` (of an A/B run, its `arm`, which must
    then be given). ValueError saying what to give when the run cannot serve."""
    try:
        records = latest_per_rollout(read_results(run_dir / RESULTS).records)
    except OSError as error:
        raise ValueError(f"the baseline run {run_dir} cannot be read: {error}") from None
    arms = arm_order(records)
    if arm is not None and not arms:
        raise ValueError(f"--baseline-arm {arm}: the baseline {run_dir} is not an A/B run")
    if arms and arm not in arms:
        got = "" if arm is None else f" (got {arm!r})"
        raise ValueError(
            f"the baseline {run_dir} is an A/B run: pick the arm to decide against with "
            f"--baseline-arm NAME, one of {', '.join(arms)}{got}"
        )
    return Baseline([r for r in records if arm is None or str(r.get(keys.ARM)) == arm])


class Baseline:
    """What a baseline run found of each scene, for the paired test: per scene (`scene_key`),
    whether each of its rollouts was solved, in the baseline's plan order."""

    def __init__(self, records: Iterable[Mapping[str, Any]]) -> None:
        self.solved: dict[str, list[bool]] = {}
        for record in sorted(records, key=lambda r: r.get(keys.ROLLOUT_INDEX) or 0):
            key = scene_key(record)
            if key is not None:
                self.solved.setdefault(key, []).append(_solved(record))

    def outcomes(self, ordered: Iterable[tuple[str | None, bool]]) -> list[bool | None]:
        """What a side's rollouts, given in decision order as (scene key, solved), weigh in the
        paired test: whether it solved a scene the baseline's twin of did not (a scene's k-th
        rollout pairs with the baseline's k-th); None where the two agree or no twin ran."""
        seen: dict[str | None, int] = {}
        weighed: list[bool | None] = []
        for key, solved in ordered:
            k = seen[key] = seen.get(key, -1) + 1
            twins = self.solved.get(key, []) if key is not None else []
            weighed.append(None if k >= len(twins) or twins[k] == solved else solved)
        return weighed


def _solved(record: Mapping[str, Any]) -> bool:
    return record[keys.OUTCOME] == OutcomeKind.SOLVED


def decided_records(
    test: SequentialTest,
    records: Iterable[Mapping[str, Any]],
    baseline: Baseline | None = None,
) -> dict[tuple[str, str | None], Decision]:
    """Each Eval's (and arm's) decision over its records (one per rollout), in decision order;
    a paired test's against `baseline`."""
    sides: dict[tuple[str, str | None], list[Mapping[str, Any]]] = {}
    for record in records:
        sides.setdefault(side_of(record), []).append(record)
    decisions = {}
    for side, members in sides.items():
        places = decision_order([(r[keys.TASK], r[keys.ROLLOUT_INDEX]) for r in members])
        ordered = [members[i] for i in sorted(range(len(members)), key=places.__getitem__)]
        outcomes: list[bool | None] = [_solved(r) for r in ordered]
        if test.paired:
            assert baseline is not None, "a paired test needs its baseline"
            pairs = zip(map(scene_key, ordered), outcomes, strict=True)
            outcomes = baseline.outcomes((key, bool(solved)) for key, solved in pairs)
        decisions[side] = test.walk(outcomes)
    return decisions
