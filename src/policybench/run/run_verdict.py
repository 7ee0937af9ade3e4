"""A run's one verdict: passed, failed (each gate, spec, decision or error count that failed it
named), no result (every rollout errored) or aborted (the process died), computed in one place
and read by every surface: exit status, last line, summary.json, report, history, trackers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

VERDICT = "verdict"  # summary.json: the run's verdict (see RunVerdict.as_json)


class VerdictKind(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NO_RESULT = "no result"  # every rollout errored: nothing was measured, never a 0% success
    ABORTED = "aborted"  # the process died before the run ended


WORDS = {
    VerdictKind.PASSED: "PASS",
    VerdictKind.FAILED: "FAIL",
    VerdictKind.NO_RESULT: "NO RESULT",
    VerdictKind.ABORTED: "ABORTED",
}


@dataclass(frozen=True)
class RunVerdict:
    """What a run concluded and why. A run whose exit status is not 0 is never passed."""

    kind: VerdictKind
    reasons: tuple[str, ...] = ()
    exit_status: int | None = None

    @classmethod
    def of(
        cls,
        breaches: Sequence[str],
        solved: int,
        unsolved: int,
        errors: int,
        failed_items: int = 0,
        other_errors: int = 0,
        interrupted: bool = False,
        exit_status: int | None = None,
    ) -> RunVerdict:
        """The verdict of a run that ended: its gates' and decisions' `breaches` (their lines),
        its rollouts' outcomes, its items that failed (a trajectory spec, a golden) or errored
        outside a rollout, whether it was interrupted, and pytest's exit status."""
        reasons = [_stripped(line) for line in breaches]
        if errors:
            reasons.append(f"{errors} rollout{'s' * (errors != 1)} errored")
        if failed_items:
            reasons.append(f"{failed_items} item{'s' * (failed_items != 1)} failed")
        if other_errors:
            reasons.append(
                f"{other_errors} item{'s' * (other_errors != 1)} errored outside a rollout"
            )
        if interrupted:
            reasons.append("interrupted before every selected item ran")
        if errors and solved + unsolved == 0:
            return cls(VerdictKind.NO_RESULT, tuple(reasons), exit_status)
        if exit_status not in (None, 0) and not reasons:
            reasons.append(f"pytest's exit status is {exit_status}")
        if reasons:
            return cls(VerdictKind.FAILED, tuple(reasons), exit_status)
        return cls(VerdictKind.PASSED, (), exit_status)

    @classmethod
    def aborted(cls, why: str) -> RunVerdict:
        return cls(VerdictKind.ABORTED, (why,), None)

    @property
    def passed(self) -> bool:
        return self.kind is VerdictKind.PASSED

    def line(self) -> str:
        """The verdict in one line: `passed`, or its kind and every reason."""
        if self.passed:
            return VerdictKind.PASSED.value
        return f"{self.kind.value}: " + "; ".join(self.reasons)

    def last_line(self) -> str:
        """What a run prints last, after pytest's own summary."""
        said = "; ".join(self.reasons)
        return f"policybench: {WORDS[self.kind]}" + (f" — {said}" if said else "")

    def as_json(self) -> dict[str, Any]:
        # `passed` and `breaches` are what summary.json held before verdicts had a kind.
        return {
            "kind": self.kind.value,
            "passed": self.passed,
            "breaches": list(self.reasons),
            "exit_status": self.exit_status,
        }

    @classmethod
    def of_json(cls, data: Any) -> RunVerdict | None:
        """summary.json's verdict, of either shape (None where it holds none)."""
        if not isinstance(data, Mapping):
            return None
        reasons = tuple(_stripped(str(line)) for line in data.get("breaches") or ())
        try:
            kind = VerdictKind(data.get("kind"))
        except ValueError:
            kind = VerdictKind.PASSED if data.get("passed") else VerdictKind.FAILED
        status = data.get("exit_status")
        return cls(kind, reasons, status if isinstance(status, int) else None)


def verdict_of(summary: Mapping[str, Any]) -> RunVerdict | None:
    """A summary.json's verdict; None where the run recorded none."""
    return RunVerdict.of_json(summary.get(VERDICT))


def _stripped(line: str) -> str:
    """A breach's line on one line (an error's message may span several), without the `FAIL `
    its terminal line opens with (the verdict says it)."""
    return " ".join(line.split()).removeprefix("FAIL ")
