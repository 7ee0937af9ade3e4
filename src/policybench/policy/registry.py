"""Turns a policy name (`--policy=...`) into a Policy for one Eval.

Built in: `scripted` (the Eval's own expert or heuristic) and `random`. Other packages add
names through the `policybench.policies` entry-point group: a callable
`(eval, action_space, settings) -> Policy`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

import numpy as np

from policybench.policy.base import Policy
from policybench.policy.chunk_player import ChunkAnchor, ChunkPolicy
from policybench.policy.latency import NO_LATENCY, InferenceLatency
from policybench.policy.random import RandomModel

if TYPE_CHECKING:
    import gymnasium as gym

    from policybench.spec import Eval

ENTRY_POINT_GROUP = "policybench.policies"
BUILTIN = ("scripted", "random")


@dataclass(frozen=True)
class PolicySettings:
    """How a run wants its policies played, whatever the policy."""

    seed: int = 0
    latency: InferenceLatency = NO_LATENCY
    anchor: ChunkAnchor = ChunkAnchor.OBSERVATION
    replan_every: int | None = None


class PolicyUnavailable(LookupError):
    """The named policy exists but cannot run on this Eval (e.g. no scripted expert)."""


PolicyFactory = Callable[["Eval", "gym.spaces.Box", PolicySettings], Policy]


def known_policies() -> list[str]:
    return [*BUILTIN, *sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))]


def check_policy_name(name: str) -> None:
    """Raises ValueError naming the known policies when `name` is not one of them."""
    if name not in known_policies():
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(known_policies())}")


def build_policy(
    name: str, eval: Eval, action_space: gym.spaces.Box, settings: PolicySettings
) -> Policy:
    if name == "scripted":
        if eval.scripted is None:
            raise PolicyUnavailable(
                f"eval {eval.name!r} has no scripted policy; try --policy=random"
            )
        model = eval.scripted()
    elif name == "random":
        model = RandomModel(
            low=np.asarray(action_space.low), high=np.asarray(action_space.high), seed=settings.seed
        )
    else:
        check_policy_name(name)
        (entry,) = entry_points(group=ENTRY_POINT_GROUP, name=name)
        factory: PolicyFactory = entry.load()
        return factory(eval, action_space, settings)
    return ChunkPolicy(
        model,
        replan_every=settings.replan_every,
        latency=settings.latency,
        anchor=settings.anchor,
    )
