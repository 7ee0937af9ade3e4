"""summary.json: what a run was (command, versions, settings: enough to reproduce it) and what
it found (per Eval, per task and overall: counts, success rate with interval, spreads; in an A/B
run the same per arm, each pair of arms compared, and the rows pooled over arms named so)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from policybench import keys
from policybench.decide import (
    Baseline,
    SequentialTest,
    decided_records,
    read_baseline,
)
from policybench.record.protocol import Protocol
from policybench.report.agreement import OPERATOR, Agreement
from policybench.report.compare import Comparison, adjusted_together, compare_runs
from policybench.report.diagnosis import Diagnosis, diagnoses
from policybench.report.drift import EvalDrift, drifts
from policybench.report.expert_replay import ExpertOf
from policybench.report.failures import Cluster, failure_clusters
from policybench.report.published import (
    PublishedComparison,
    compare_published,
    entry_of,
)
from policybench.report.robustness import robustness_json
from policybench.report.rows import ArmComparison, DecidedSide, Row
from policybench.report.specs import SpecRow, spec_rows
from policybench.report.stats import GroupStats, group
from policybench.report.sweep import compared_arms, sweep_json
from policybench.run.arms import ARMS, arm_order
from policybench.run.files import read_json, write_file
from policybench.run.info import RunInfo
from policybench.run.layout import SUMMARY
from policybench.run.records import CONFIDENCE
from policybench.run.results import RESULTS, Results, read_results
from policybench.run.run_verdict import VERDICT, RunVerdict
from policybench.run.verdicts import Verdicts, read_verdicts
from policybench.world import SUCCESS_INFO_KEYS

Records = Sequence[Mapping[str, Any]]
OVERALL = "all"


@dataclass(frozen=True)
class Summary:
    """What a run found. In an A/B run, `evals`, `tasks` and `overall` pool every arm's
    rollouts; `arms` and `arm_tasks` hold each arm's own rows."""

    evals: tuple[Row, ...]
    tasks: tuple[Row, ...]
    overall: Row
    problems: tuple[str, ...] = ()
    arms: tuple[Row, ...] = ()  # an A/B run's arms: per Eval, then over all Evals
    arm_tasks: tuple[Row, ...] = ()  # an A/B run's arms per task
    versus: tuple[ArmComparison, ...] = ()  # the pairs of arms compared (sweep.compared_arms)
    operator: Agreement | None = None  # what operators' verdicts say, in a run that has some
    decisions: tuple[DecidedSide, ...] = ()  # a run under --decide: each Eval's (and arm's)
    specs: tuple[SpecRow, ...] = ()  # trajectory specs: per Eval and spec, their violations
    failures: tuple[Cluster, ...] = ()  # where the unsolved rollouts cluster, largest first
    diagnoses: tuple[Diagnosis, ...] = ()  # why Evals far below expectation ended there
    drift: tuple[EvalDrift, ...] = ()  # a run under candidate pins (--env-pins): per Eval
    # The published results of the run's checkpoint (its policy names it, or --published), each
    # beside the run's rate.
    published: tuple[PublishedComparison, ...] = ()

    @classmethod
    def of(
        cls,
        records: Sequence[Mapping[str, Any]],
        problems: Sequence[str] = (),
        arms: Sequence[str] = (),
        verdicts: Verdicts | None = None,
        decide: SequentialTest | None = None,
        baseline: Baseline | None = None,
        run_dir: Path | None = None,
        published: str | None = None,
        expert_of: ExpertOf | None = None,
    ) -> Summary:
        """`arms`: the run's arms in its order (an A/B run's records name theirs); `verdicts`:
        its operator verdicts (verdicts.jsonl); `decide`: its sequential test (--decide; a
        paired one against `baseline`); `run_dir`: where the rollouts' traces lie; `published`:
        the published entry it is compared with (--published), where its policy names none;
        `expert_of`: what makes an Eval's expert, for a diagnosis to replay (None: none)."""
        decisions = _decisions(decide, records, baseline)

        def row(eval: str, task: str | None, members: Records, arm: str | None = None) -> Row:
            stats, early = GroupStats.of(members), _stopped_early(decisions, eval, arm)
            policy, packages, reported = _described(members)
            return Row(eval, task, stats, policy, packages, arm, reported, early)

        evals = group(records, keys.EVAL)
        order = arm_order(records, arms)
        by_arm = {arm: [r for r in records if str(r.get(keys.ARM)) == arm] for arm in order}
        arm_rows = [
            row(e, None, [r for r in members if str(r.get(keys.ARM)) == arm], arm)
            for (e,), members in evals.items()
            for arm in order
        ]
        arm_rows += [row(OVERALL, None, by_arm[arm], arm) for arm in order]
        arm_tasks = [
            row(e, t, members, arm)
            for arm in order
            for (e, t), members in group(by_arm[arm], keys.EVAL, keys.TASK).items()
        ]
        assigned = next((r[keys.ASSIGNMENT] for r in records if keys.ASSIGNMENT in r), None)
        compared = _arms_compared(by_arm)
        beside, unread = _beside_published(records, published)
        problems = [*problems, *unread]
        far_below = {e for c in beside if c.verdict == "below" for e in c.result.evals}
        eval_rows = tuple(row(e, None, m) for (e,), m in evals.items())
        return cls(
            evals=eval_rows,
            tasks=tuple(row(e, t, m) for (e, t), m in group(records, keys.EVAL, keys.TASK).items()),
            overall=_overall(eval_rows, records, row, _stopped_early(decisions, OVERALL, None)),
            problems=tuple(problems),
            arms=tuple(r for r in arm_rows if r.stats.tally.rollouts),
            arm_tasks=tuple(arm_tasks),
            versus=tuple(ArmComparison(comparison, assigned) for comparison in compared),
            operator=_agreement(records, verdicts),
            decisions=decisions,
            specs=spec_rows(records),
            failures=failure_clusters(records, run_dir),
            diagnoses=diagnoses(records, run_dir, far_below, expert_of),
            drift=drifts(records, compared, run_dir),
            published=beside,
        )

    @classmethod
    def of_run(
        cls, run_dir: Path, results: Results | None = None, published: str | None = None
    ) -> Summary:
        """The Summary of the run in `run_dir`, the one its summary.json holds: of its results
        (and the problems reading them found; `results`: as the caller already read them), its
        arms in run.json's order, its operators' verdicts, and the published results it was
        compared with (`published`: another entry)."""
        results = read_results(run_dir / RESULTS) if results is None else results
        run = RunInfo.load(run_dir)
        arms = [] if run is None else list(run.settings.get(ARMS) or [])
        decide = None if run is None else run.settings.get(keys.DECIDE)
        test = None if decide is None else SequentialTest.parse(decide)
        problems, baseline = list(results.problems), None
        if run is not None and test is not None and test.paired:
            against = run.settings.get(keys.DECIDE_BASELINE) or {}
            try:
                where = Path(against.get("run") or "(not recorded)")
                baseline = read_baseline(where, against.get(keys.ARM))
            except ValueError as error:
                problems.append(f"--decide {decide}: no decisions: {error}")
        verdicts = read_verdicts(run_dir)
        if published is None and run is not None:
            published = run.settings.get(keys.PUBLISHED)
        return cls.of(
            results.records, problems, arms, verdicts, test, baseline, run_dir,
            published if isinstance(published, str) else None,
        )  # fmt: skip

    def as_json(self, run: RunInfo | None) -> dict[str, Any]:
        """One policy's run: `evals`, `tasks`, `overall`. An A/B run: those per arm (`arms`, in
        the run's order), each pair of arms compared, and the rows over every arm's rollouts
        together under `pooled_over_arms` (a pooled rate mixes the policies compared)."""
        found = {
            "evals": [row.as_json() for row in self.evals],
            "tasks": [row.as_json() for row in self.tasks],
            "overall": self.overall.as_json(),
        }
        if self.arms:
            found = {
                "arms": [self._arm_json(arm) for arm in dict.fromkeys(r.arm for r in self.arms)],
                "arm_comparisons": [versus.as_json() for versus in self.versus],
                "pooled_over_arms": found,
            }
        return {
            "run": None if run is None else asdict(run),
            "confidence": CONFIDENCE,
            "interval_method": "wilson",
            "problems": list(self.problems),
            **found,
            **sweep_json(self, run),
            **robustness_json(self, run),
            **({"failure_clusters": [c.as_json() for c in self.failures]} if self.failures else {}),
            **({"diagnoses": [d.as_json() for d in self.diagnoses]} if self.diagnoses else {}),
            **({"drift": [d.as_json() for d in self.drift]} if self.drift else {}),
            **({keys.PUBLISHED: [c.as_json() for c in self.published]} if self.published else {}),
            **({} if self.operator is None else {OPERATOR: self.operator.as_json()}),
            **(
                {"decisions": [side.as_json() for side in self.decisions]} if self.decisions else {}
            ),
        }

    def _arm_json(self, arm: str | None) -> dict[str, Any]:
        rows = [row for row in self.arms if row.arm == arm]
        return {
            keys.ARM: arm,
            "evals": [row.as_json() for row in rows if row.eval != OVERALL],
            "tasks": [row.as_json() for row in self.arm_tasks if row.arm == arm],
            "overall": next(row.as_json() for row in rows if row.eval == OVERALL),
        }

    def success_lines(self) -> list[str]:
        """One line per Eval whose env never reported success in the run (its 0% says nothing
        of the policy), saying what to do."""
        said = ", ".join(f"`{key}`" for key in SUCCESS_INFO_KEYS)
        return [
            f"{row.eval}: the env never reported success in {row.stats.tally.rollouts} "
            f"rollout(s) (none of {said} in its step info), so each counts as unsolved; have "
            "its step() put one of them in `info`"
            for row in self.evals
            if row.success_reported is False
        ]

    def write(self, run_dir: Path, run: RunInfo | None, verdict: RunVerdict | None = None) -> Path:
        """summary.json, with the run's `verdict`. Written again without one (a report rebuilt),
        the verdict the run ended with is kept."""
        path = run_dir / SUMMARY
        found = self.as_json(run)
        if verdict is not None:
            found[VERDICT] = verdict.as_json()
        elif path.is_file():
            try:
                earlier = read_json(path).get(VERDICT)
            except (OSError, ValueError, AttributeError):
                earlier = None
            if isinstance(earlier, dict):
                found[VERDICT] = earlier
        write_file(path, json.dumps(found, indent=2, sort_keys=True) + "\n")
        return path


def _arms_compared(by_arm: Mapping[str, Records]) -> list[Comparison]:
    """Each pair of an A/B run's arms compared, adjusted together for multiplicity."""
    same = (Protocol.of(()), Protocol.of(()))  # the arms of one run share its protocol
    return adjusted_together(
        [
            compare_runs(by_arm[before], by_arm[after], (before, after), protocols=same)
            for before, after in compared_arms(by_arm)
        ]
    )


def _beside_published(
    records: Records, named: str | None
) -> tuple[tuple[PublishedComparison, ...], list[str]]:
    """The run beside its checkpoint's published results, and a problem where they could not
    be read (a published-results file broken since the run started)."""
    try:
        entry = entry_of(records, named)
    except ValueError as error:
        return (), [f"published results: {error}"]
    return (() if entry is None else compare_published(records, entry)), []


def _agreement(records: Records, verdicts: Verdicts | None) -> Agreement | None:
    """What operators' verdicts say beside the automatic outcomes, in a run that has some."""
    if verdicts is None or not (verdicts.given or verdicts.problems):
        return None
    return Agreement.of(records, verdicts)


def _decisions(
    decide: SequentialTest | None, records: Records, baseline: Baseline | None
) -> tuple[DecidedSide, ...]:
    if decide is None or (decide.paired and baseline is None):
        return ()
    decided = decided_records(decide, records, baseline)
    return tuple(DecidedSide(eval, arm, decision) for (eval, arm), decision in decided.items())


def _stopped_early(decisions: Sequence[DecidedSide], eval: str, arm: str | None) -> bool:
    """Whether a --decide stopped the rollouts of a row early: an Eval's (of an arm), or any
    Eval's for the overall row, or any arm's for a row pooled over arms."""
    return any(
        side.decision.decided
        and (eval == OVERALL or side.eval == eval)
        and (arm is None or side.arm == arm)
        for side in decisions
    )


def _overall(
    eval_rows: Sequence[Row], records: Records, row: Callable[..., Row], early: bool
) -> Row:
    """The whole run's row: of a run of one Eval, that Eval's row (the same rollouts in the
    same order: its figures are the run's, not counted again), else `row` of every record."""
    if len(eval_rows) == 1 and eval_rows[0].stats.tally.rollouts == len(records):
        return replace(eval_rows[0], eval=OVERALL, stopped_early=early)
    return row(OVERALL, None, records)


def _described(members: Records) -> tuple[dict[str, Any], dict[str, Any], bool | None]:
    """In one pass: the policy description and package versions a group ran with (a field
    that differs between its rollouts lists every value seen), and whether its env reported
    success (None where no rollout says)."""
    policies: dict[int, Mapping[str, Any]] = {}
    packages: dict[int, Mapping[str, Any]] = {}
    said: set[bool] = set()
    for member in members:
        get = member.get
        # Rollouts of a run hold one object for a field they share (results._sharing): each once.
        policy, versions = get(keys.POLICY) or NOTHING, get(keys.PACKAGES) or NOTHING
        policies[id(policy)], packages[id(versions)] = policy, versions
        if (reported := get(keys.SUCCESS_REPORTED)) is not None:
            said.add(bool(reported))
    return _merged(policies.values()), _merged(packages.values()), (True in said) if said else None


NOTHING: Mapping[str, Any] = {}  # a field a record does not hold, as one shared empty object


def _merged(mappings: Any) -> dict[str, Any]:
    seen: dict[str, list[Any]] = {}
    for mapping in mappings:
        for name, value in mapping.items():
            values = seen.setdefault(name, [])
            if value not in values:
                values.append(value)
    return {name: values[0] if len(values) == 1 else values for name, values in seen.items()}
