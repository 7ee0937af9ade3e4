"""The PushT `scripted` heuristic, run through the harness on the real gym-pusht env."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gym_pusht")

from policybench.harness import run_rollout
from policybench.policy.base import Policy
from policybench.policy.chunk_player import ChunkPolicy
from policybench.policy.random import RandomModel
from policybench.record.episode import OutcomeKind
from policybench.suites.pusht import PUSHT, estimate_pose, make_env
from policybench.world import World

ROLLOUTS = PUSHT.rollouts(3, 0)


def final_rewards(policy: Policy) -> tuple[list[OutcomeKind], np.ndarray]:
    """Each rollout's outcome and last reward (coverage / 0.95, capped at 1)."""
    world = World(PUSHT)
    try:
        episodes = [run_rollout(rollout, world, policy) for rollout in ROLLOUTS]
    finally:
        world.close()
    return [ep.outcome.kind for ep in episodes], np.array([ep.trace[-1].reward for ep in episodes])


def test_pose_estimate_matches_the_block() -> None:
    env = make_env("push-t")
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        obs, *_, info = env.step(obs["state"])
        x, y, angle = estimate_pose(obs["image"])
        truth = info["block_pose"]
        assert np.hypot(x - truth[0], y - truth[1]) < 4.0
        assert abs((angle - truth[2] + np.pi) % (2 * np.pi) - np.pi) < np.radians(2.0)
    env.close()


def test_heuristic_solves_pusht_where_random_does_not() -> None:
    model = PUSHT.scripted()
    assert model.describe()["name"] == "scripted"
    kinds, rewards = final_rewards(ChunkPolicy(model))
    assert kinds.count(OutcomeKind.SOLVED) >= 2, (kinds, rewards)
    box = np.zeros(2, np.float32), np.full(2, 512.0, np.float32)
    _, random_rewards = final_rewards(ChunkPolicy(RandomModel(*box)))
    assert rewards.mean() > random_rewards.mean() + 0.5, (rewards, random_rewards)
