"""The rows a run's summary is made of: an Eval's, a task's or the whole run's counts and success
rate with its interval (`Row`), two arms compared (`ArmComparison`), an Eval's --decide decision
(`DecidedSide`); and `RunRows`, what the sections derived from a summary (the latency sweep, the
robustness grid) read of it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from policybench import keys
from policybench.decide import Decision, confidence_sequence
from policybench.report.compare import Comparison
from policybench.report.power import UNPAIRED_FORMULA, Detectable, detectable_change
from policybench.report.stats import GroupStats
from policybench.run.records import CONFIDENCE

REALTIME = "realtime"  # a row's real-time figures (record.realtime), in a run with latency


@dataclass(frozen=True)
class Row:
    """One line of the overview: an Eval, a task of an Eval, or the whole run."""

    eval: str
    task: str | None
    stats: GroupStats
    policy: Mapping[str, Any]
    packages: Mapping[str, Any]
    arm: str | None = None  # in an A/B run's rows per arm
    # Whether the env reported success in the group's rollouts: False when they stepped and
    # it never did (the rate is then 0 for want of a signal), None when none stepped.
    success_reported: bool | None = None
    # Whether a --decide stopped the group's rollouts early: its plain rate is then biased (a
    # run stops when its outcomes so far are extreme) and its interval is the anytime one.
    stopped_early: bool = False

    def interval(self) -> tuple[float, float] | None:
        """The success rate's 95% interval: Wilson's, or after an early stop the confidence
        sequence, valid however the sampling stopped (policybench.decide)."""
        tally = self.stats.tally
        if not self.stopped_early or not tally.rollouts:
            return tally.interval()
        return confidence_sequence(tally.solved, tally.rollouts, 1 - CONFIDENCE)

    @property
    def interval_method(self) -> str:
        return "anytime-valid (stopped early by --decide)" if self.stopped_early else "Wilson"

    @property
    def label(self) -> str:
        return self.eval if self.task is None else f"{self.eval} / {self.task}"

    @property
    def detectable(self) -> Detectable | None:
        """The smallest changes a second run of this size would detect (None: no rollouts)."""
        tally = self.stats.tally
        return None if tally.rate is None else detectable_change(tally.rollouts, tally.rate)

    def as_json(self) -> dict[str, Any]:
        tally, interval = self.stats.tally, self.interval()
        arm = {} if self.arm is None else {keys.ARM: self.arm}
        return {
            **arm,
            keys.EVAL: self.eval,
            keys.TASK: self.task,
            "rollouts": tally.rollouts,
            "solved": tally.solved,
            "unsolved": tally.unsolved,
            "errors": tally.errors,
            # Every rollout errored: no result, not a 0% success.
            "success_rate": tally.rate if tally.measured else None,
            "interval": None if interval is None or not tally.measured else list(interval),
            **({"no_result": True} if tally.rollouts and not tally.measured else {}),
            "interval_method": self.interval_method,
            **({"stopped_early": True} if self.stopped_early else {}),
            "detectable_change": _detectable(self.detectable),
            keys.STEPS: _spread(self.stats.steps),
            keys.SIM_S: _spread(self.stats.sim_s),
            "step_wall_ms": _spread(self.stats.step_wall_ms),
            keys.INFER_MS_MEAN: _spread(self.stats.infer_ms),
            keys.INFERENCE_LATENCY: list(self.stats.latency),
            keys.POLICY: dict(self.policy),
            keys.PACKAGES: dict(self.packages),
            keys.SUCCESS_REPORTED: self.success_reported,
            **({} if self.stats.realtime is None else {REALTIME: self.stats.realtime.as_json()}),
        }


def _detectable(detectable: Detectable | None) -> dict[str, Any] | None:
    if detectable is None:
        return None
    return {
        "drop": detectable.drop,
        "rise": detectable.rise,
        "alpha": detectable.alpha,
        "power": detectable.power,
        "method": f"a second run of as many rollouts, unpaired; {UNPAIRED_FORMULA}",
    }


def _spread(spread: Any) -> dict[str, float] | None:
    return None if spread is None else asdict(spread)


@dataclass(frozen=True)
class ArmComparison:
    """Two arms of an A/B run compared task by task: paired by scene when every scene ran under
    each arm, unpaired when each scene was assigned one (`assignment`)."""

    comparison: Comparison
    assignment: Mapping[str, Any] | None

    @property
    def design(self) -> str:
        if self.assignment is None:
            return "paired: every scene ran under each arm (exact McNemar test on the pairs)"
        return (
            f"unpaired: each scene ran under one arm, by {self.assignment.get('method')} "
            f"assignment with seed {self.assignment.get(keys.SEED)} (Fisher's exact test)"
        )

    def lines(self) -> list[str]:
        comparison = self.comparison
        return [f"{comparison.after} vs {comparison.before}, {self.design}:", *comparison.lines()]

    def as_json(self) -> dict[str, Any]:
        return {**self.comparison.as_json(), "design": self.design}


@dataclass(frozen=True)
class DecidedSide:
    """Where an Eval's (in an A/B run, an arm's) sequential test (--decide) ended."""

    eval: str
    arm: str | None
    decision: Decision

    @property
    def label(self) -> str:
        return self.eval if self.arm is None else f"{self.eval} [{self.arm}]"

    def line(self) -> str:
        return f"{self.label}: {self.decision.line()}"

    def as_json(self) -> dict[str, Any]:
        return {keys.EVAL: self.eval, keys.ARM: self.arm, **self.decision.as_json()}


class RunRows(Protocol):
    """What a summary's derived sections read of it: each arm's rows, the Evals' rows, the
    pairs of arms compared."""

    @property
    def arms(self) -> tuple[Row, ...]: ...

    @property
    def evals(self) -> tuple[Row, ...]: ...

    @property
    def versus(self) -> tuple[ArmComparison, ...]: ...
