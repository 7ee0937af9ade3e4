"""Turns a policy name (`--policy=...`) into a Policy for one Eval.

Built in: `scripted` (the Eval's own expert or heuristic), `random`, and `openpi` (a policy
served over openpi's protocol at the settings' endpoint, fed through the Eval's `openpi` codec);
`lerobot:PATH` loads a LeRobot checkpoint directory (policy.lerobot, the Eval's `lerobot` codec).
Other packages add names through the `policybench.policies` entry-point group: a callable
`(eval, action_space, settings) -> Policy`; one that returns a ChunkPolicy can also be served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

import numpy as np

from policybench.policy.base import Model, Policy
from policybench.policy.chunk_player import ChunkAnchor, ChunkPolicy
from policybench.policy.conventions import NATIVE
from policybench.policy.latency import NO_LATENCY, InferenceLatency
from policybench.policy.random import RandomModel
from policybench.policy.remote import Endpoint, RemoteModel, eval_reference

if TYPE_CHECKING:
    import gymnasium as gym

    from policybench.spec import Eval

ENTRY_POINT_GROUP = "policybench.policies"
OPENPI = "openpi"
BUILTIN = ("scripted", "random", OPENPI)
LEROBOT_PREFIX = "lerobot:"  # `lerobot:PATH`, a LeRobot checkpoint directory


@dataclass(frozen=True)
class PolicySettings:
    """How a run wants its policies played, whatever the policy.

    `endpoint` is where the model runs when it is served: the server of `openpi`, or the server
    a run shares among its workers for a local policy. None: the model runs in this process.
    """

    seed: int = 0
    latency: InferenceLatency = NO_LATENCY
    anchor: ChunkAnchor = ChunkAnchor.OBSERVATION
    replan_every: int | None = None
    endpoint: Endpoint | None = None
    device: str = "cpu"  # where a local model with weights runs (LeRobot checkpoints)


class PolicyUnavailable(LookupError):
    """The named policy exists but cannot run on this Eval (e.g. no scripted expert)."""


PolicyFactory = Callable[["Eval", "gym.spaces.Box", PolicySettings], Policy]


def known_policies() -> list[str]:
    return [*BUILTIN, *sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))]


def check_policy_name(name: str) -> None:
    """Raises ValueError naming the known policies when `name` is not one of them."""
    if name not in known_policies() and not name.startswith(LEROBOT_PREFIX):
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(known_policies())}")


def build_policy(
    name: str, eval: Eval, action_space: gym.spaces.Box, settings: PolicySettings
) -> Policy:
    if name == OPENPI:
        codec = eval.codecs.get(OPENPI)
        if codec is None:
            raise PolicyUnavailable(
                f"eval {eval.name!r} declares no openpi codec (Eval.codecs['openpi']), so its "
                "observations have no openpi form"
            )
        endpoint = settings.endpoint or Endpoint()
        model: Model = RemoteModel(endpoint, codec, eval.name, eval_reference(eval))
    elif settings.endpoint is not None:
        model = RemoteModel(
            settings.endpoint, NATIVE, eval.name, eval_reference(eval), name, shared=True
        )
    elif name in BUILTIN or name.startswith(LEROBOT_PREFIX):
        model = build_model(name, eval, action_space, settings)
    else:
        return _entry_point(name)(eval, action_space, settings)
    return ChunkPolicy(
        model,
        replan_every=settings.replan_every,
        latency=settings.latency,
        anchor=settings.anchor,
    )


def build_model(
    name: str, eval: Eval, action_space: gym.spaces.Box | None, settings: PolicySettings
) -> Model:
    """The Model behind a local policy name, as a server runs it. `action_space` is needed by
    `random` and entry points only."""
    if name == "scripted":
        if eval.scripted is None:
            raise PolicyUnavailable(
                f"eval {eval.name!r} has no scripted policy; try --policy=random"
            )
        return eval.scripted()
    if name == OPENPI:
        raise PolicyUnavailable("openpi is a served policy; it cannot be served again")
    if name.startswith(LEROBOT_PREFIX):
        return _lerobot_model(name, eval, settings)
    if action_space is None:
        raise ValueError(f"policy {name!r} needs the action space of eval {eval.name!r}")
    if name == "random":
        return RandomModel(
            low=np.asarray(action_space.low), high=np.asarray(action_space.high), seed=settings.seed
        )
    policy = _entry_point(name)(eval, action_space, settings)
    model = getattr(policy, "model", None)
    if not isinstance(policy, ChunkPolicy) or model is None:
        raise PolicyUnavailable(
            f"policy {name!r} is a {type(policy).__name__}, not a ChunkPolicy over a Model, so it "
            "cannot be served; run it in each worker with --policy-sharing=per-worker"
        )
    return model


def _lerobot_model(name: str, eval: Eval, settings: PolicySettings) -> Model:
    from policybench.policy.lerobot import load_model

    try:
        return load_model(name, eval.codecs, eval.name, settings.device)
    except LookupError as error:
        raise PolicyUnavailable(str(error)) from None


def _entry_point(name: str) -> PolicyFactory:
    check_policy_name(name)
    (entry,) = entry_points(group=ENTRY_POINT_GROUP, name=name)
    return entry.load()
