"""What a rollout asks a person: the Request (stage this scene, or judge this rollout), and the
Operator a harness asks it through; a verdict is the one verdicts.jsonl holds (run.verdicts)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from policybench import keys
from policybench.run.verdicts import Verdict
from policybench.spec import SceneValue


class OperatorError(RuntimeError):
    """No operator can be asked (no terminal, the desk gone), or one answered nonsense."""


class Ask(enum.StrEnum):
    STAGE = "stage"  # stage the scene, then confirm
    JUDGE = "judge"  # say how the rollout ended


@dataclass(frozen=True)
class Request:
    """One thing a rollout asks its operator: to stage `fields` (name -> value) of its scene, or
    to judge it. `rollout` is its item id, as verdicts name rollouts."""

    ask: Ask
    eval: str
    rollout: str
    instruction: str
    fields: Mapping[str, SceneValue] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "ask": self.ask.value,
            keys.EVAL: self.eval,
            keys.VERDICT_ROLLOUT: self.rollout,
            keys.INSTRUCTION: self.instruction,
            keys.STAGED: dict(self.fields),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Request:
        try:
            return cls(
                Ask(data["ask"]),
                str(data[keys.EVAL]),
                str(data[keys.VERDICT_ROLLOUT]),
                str(data[keys.INSTRUCTION]),
                dict(data.get(keys.STAGED) or {}),
            )
        except (KeyError, ValueError, TypeError) as error:
            raise OperatorError(
                f"a request to an operator needs ask (stage|judge), {keys.EVAL}, "
                f"{keys.VERDICT_ROLLOUT} and {keys.INSTRUCTION}; got {dict(data)!r} ({error})"
            ) from None


class Operator(Protocol):
    """A person, as a harness asks them: `stage` returns once the scene is staged, `judge` with
    the verdict. Either blocks for as long as the person takes."""

    def stage(self, request: Request) -> None: ...

    def judge(self, request: Request) -> Verdict: ...
