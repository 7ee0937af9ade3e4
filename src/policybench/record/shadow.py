"""An Eval's expert watching a rollout it does not drive: at each observation, the action the
expert would take there, kept for the rollout's trace, where a run's diagnosis sets the policy's
actions beside it (report/diagnosis.py). It never changes what the rollout does: an expert that
raises stops watching and says why."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from policybench.policy.base import ChunkSource, Model, Observation, SessionContext


@dataclass
class ShadowExpert:
    """A harness observer; `actions` holds the expert's first waypoint at each observation."""

    model: Model
    context: SessionContext
    actions: list[np.ndarray] = field(default_factory=list)
    failed: str | None = None  # why it stopped watching, if it did
    _source: ChunkSource | None = None

    def __call__(self, time_ns: int, obs: Observation) -> None:
        if self.failed is not None:
            return
        try:
            if self._source is None:
                self._source = self.model.open(self.context)
            chunk = self._source(obs)
            self.actions.append(np.asarray(chunk.actions[0], np.float32).reshape(-1))
        except Exception as error:  # a shadow never breaks the rollout it watches
            self.failed = f"{type(error).__name__}: {error}"

    def restart(self) -> None:
        """Forgets what it saw: the rollout runs again from its start."""
        self.actions.clear()
        self.failed, self._source = None, None
