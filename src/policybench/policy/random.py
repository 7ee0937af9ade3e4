"""The `random` baseline: uniform actions within the env's bounds, reproducible per rollout."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from policybench import keys
from policybench.policy.base import Chunk, ChunkSource, Observation, SessionContext


@dataclass(frozen=True)
class RandomModel:
    """Chunks of uniform random actions in `[low, high]`.

    Each rollout's generator is seeded from `seed` and the bytes of the first observation, so a
    rollout is reproducible from what the policy sees alone, on any worker, in any order.
    """

    low: np.ndarray
    high: np.ndarray
    seed: int = 0
    horizon: int = 1
    name: str = "random"

    def open(self, context: SessionContext) -> ChunkSource:
        rng: np.random.Generator | None = None
        fps = context.control_hz

        def predict(obs: Observation) -> Chunk:
            nonlocal rng
            if rng is None:
                rng = np.random.default_rng([self.seed, _digest(obs)])
            actions = rng.uniform(self.low, self.high, size=(self.horizon, *self.low.shape))
            return Chunk(actions.astype(self.low.dtype, copy=False), fps)

        return predict

    def describe(self) -> dict[str, Any]:
        return {keys.POLICY_NAME: self.name, keys.SEED: self.seed, "horizon": self.horizon}


def _digest(obs: Observation) -> int:
    hasher = hashlib.blake2b(digest_size=8)
    for name in sorted(obs):
        hasher.update(name.encode())
        hasher.update(np.ascontiguousarray(obs[name]).tobytes())
    return int.from_bytes(hasher.digest(), "little")
