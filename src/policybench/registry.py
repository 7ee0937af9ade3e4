"""Turns a policy name (`--policy=...`) into a Policy for one Eval.

Built in: `scripted` (the Eval's own expert or heuristic), `random`, and `openpi` (a policy
served over openpi's protocol at the settings' endpoint, fed through the Eval's `openpi` codec);
`lerobot:PATH` loads a LeRobot checkpoint directory (the Eval's `lerobot` codec).
Your own: `module:attr` names an importable Model, Policy or factory, and installed packages
add names through the `policybench.policies` entry point, which loads the same kinds of object.
A factory is called as `factory(eval, action_space, settings)` and returns a Model or a Policy.
A Model is played by a ChunkPolicy, which is also what a server can serve.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from policybench.policy.base import Model, Policy
from policybench.policy.chunk_player import ChunkAnchor, ChunkPolicy
from policybench.policy.codec import IDENTITY, NATIVE, Codec
from policybench.policy.contract import contract_of
from policybench.policy.latency import NO_LATENCY, InferenceLatency
from policybench.policy.random import RandomModel
from policybench.serve.client import Endpoint, RemoteModel

if TYPE_CHECKING:
    import gymnasium as gym

    from policybench.policy.lerobot import LeRobotModel
    from policybench.spec import Eval

ENTRY_POINT_GROUP = "policybench.policies"
SCRIPTED, RANDOM, OPENPI = "scripted", "random", "openpi"
BUILTIN = (SCRIPTED, RANDOM, OPENPI)
LEROBOT_PREFIX = "lerobot:"  # `lerobot:PATH`, a LeRobot checkpoint directory
LEROBOT_CODEC = "lerobot"  # the name of an Eval's LeRobot codec


@dataclass(frozen=True)
class PolicySettings:
    """How a run wants its policies played, whatever the policy.

    `endpoint` is where the model runs when it is served: the server of `openpi`, or the server
    a run shares among its workers for a local policy. None: the model runs in this process.
    """

    seed: int = 0
    latency: InferenceLatency = NO_LATENCY
    anchor: ChunkAnchor = ChunkAnchor.OBSERVATION
    execute_steps: int | None = None
    warm_start: bool = False  # the first chunk computed before the clock starts
    endpoint: Endpoint | None = None
    device: str = "cpu"  # where a local model with weights runs (LeRobot checkpoints)


class PolicyUnavailable(LookupError):
    """The named policy exists but cannot run on this Eval (e.g. no scripted expert)."""


ActionSpace = Callable[[], "gym.spaces.Box"]
"""The Eval's action space, built only when a policy needs it (building it may build an env)."""
PolicyFactory = Callable[["Eval", "gym.spaces.Box", PolicySettings], "Model | Policy"]


def known_policies() -> list[str]:
    return [*BUILTIN, *sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))]


def is_import_path(name: str) -> bool:
    return ":" in name and not name.startswith(LEROBOT_PREFIX)


def check_policy_name(name: str, search_dir: Path | None = None) -> None:
    """Raises ValueError, naming what is accepted, when `name` names no policy; imports a
    `module:attr` to check it (from `search_dir` too, see `imported`)."""
    if name in known_policies() or name.startswith(LEROBOT_PREFIX):
        return
    if is_import_path(name):
        target = imported(name, search_dir)
        if not (_is_model(target) or _is_policy(target) or callable(target)):
            raise ValueError(_not_a_policy(name, target))
        if _is_model(target):
            try:  # a contract it declares is checked now, before anything runs
                contract_of(target)
            except (TypeError, ValueError) as error:
                raise ValueError(f"policy {name!r}: {error}") from None
        return
    raise ValueError(
        f"unknown policy {name!r}; known policies: {', '.join(known_policies())}, "
        "lerobot:PATH, or module:attr (an importable Model, Policy or factory)"
    )


def build_policy(
    name: str,
    eval: Eval,
    settings: PolicySettings,
    action_space: ActionSpace,
    eval_ref: str | None = None,
) -> Policy:
    """The Policy that plays `name` on `eval`: served when the settings have an endpoint
    (`openpi`, or the run's shared server), else in this process. `eval_ref` (module:attr)
    tells a policybench server where the Eval is declared."""
    if name == OPENPI:
        codec = eval.codecs.get(OPENPI)
        if codec is None:
            raise PolicyUnavailable(
                f"eval {eval.name!r} declares no openpi codec (Eval.codecs['openpi']), so its "
                "observations have no openpi form"
            )
        endpoint = settings.endpoint or Endpoint()
        return _played(RemoteModel(endpoint, codec.name, eval.name, eval_ref), codec, settings)
    if settings.endpoint is not None:
        model = RemoteModel(settings.endpoint, NATIVE.name, eval.name, eval_ref, name, shared=True)
        return _played(model, NATIVE, settings)
    return local_policy(name, eval, settings, action_space)


def local_policy(
    name: str, eval: Eval, settings: PolicySettings, action_space: ActionSpace
) -> Policy:
    """The policy `name` as it runs in this process (a worker, or a server)."""
    if name == SCRIPTED:
        if eval.scripted is None:
            raise PolicyUnavailable(
                f"eval {eval.name!r} has no scripted policy; try --policy=random"
            )
        return _played(eval.scripted(), IDENTITY, settings)
    if name == OPENPI:
        raise PolicyUnavailable("openpi is a served policy; it cannot be served again")
    if name == RANDOM:
        space = action_space()
        model = RandomModel(np.asarray(space.low), np.asarray(space.high), settings.seed)
        return _played(model, IDENTITY, settings)
    if name.startswith(LEROBOT_PREFIX):
        return _lerobot(name, eval, settings)
    target = imported(name) if is_import_path(name) else _entry_point(name)
    return as_policy(name, target, eval, settings, action_space)


def served_model(
    name: str, eval: Eval, settings: PolicySettings, action_space: ActionSpace
) -> tuple[Model, Codec]:
    """The Model behind a local policy, and the codec it sees env observations through, as a
    server runs them."""
    policy = local_policy(name, eval, settings, action_space)
    if not isinstance(policy, ChunkPolicy):
        raise PolicyUnavailable(
            f"policy {name!r} is a {type(policy).__name__}, not a Model, so it cannot be served; "
            "run it in each worker with --policy-sharing=per-worker"
        )
    return policy.model, policy.codec


def imported(path: str, search_dir: Path | None = None) -> Any:
    """The object `module:attr` names (attr may be dotted), with a clear error if there is none.
    `search_dir` (where the command was run, as uvicorn does) joins the import path first, so a
    module beside the user is found however pytest or the server was started."""
    if search_dir is not None and str(search_dir) not in sys.path:
        sys.path.insert(0, str(search_dir))
    module_name, _, attribute = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"--policy {path}: cannot import module {module_name!r} ({error}); run from the "
            "directory that holds it or put it on PYTHONPATH"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"--policy {path}: module {module_name!r} has no attribute {part!r}")
        target = getattr(target, part)
    return target


def as_policy(
    name: str, target: Any, eval: Eval, settings: PolicySettings, action_space: ActionSpace
) -> Policy:
    """A Model or Policy as is, or what a factory makes of this Eval. A LeRobotModel is played
    through the Eval's `lerobot` codec."""
    from policybench.policy.lerobot import LeRobotModel, is_pretrained_policy

    if is_pretrained_policy(target):
        raise TypeError(
            f"policy {name!r} is a LeRobot {type(target).__name__} alone; wrap it with the "
            "processors it was trained with: LeRobotModel.in_memory(policy, preprocessor, "
            "postprocessor) (from policybench.policy.lerobot)"
        )
    if not _is_model(target) and not _is_policy(target) and callable(target):
        target = target(eval, action_space(), settings)
    if _is_policy(target):
        return target
    if isinstance(target, LeRobotModel):
        return lerobot_policy(target, eval, settings)
    if _is_model(target):
        return _played(target, IDENTITY, settings)
    raise TypeError(_not_a_policy(name, target))


def _not_a_policy(name: str, target: Any) -> str:
    return (
        f"policy {name!r} is a {type(target).__name__}; expected a Model (name, open, describe), "
        "a Policy (name, new_session, describe), or a factory (eval, action_space, settings) "
        "that returns one"
    )


def _is_model(target: Any) -> bool:
    return _instance_with(target, "name", "open", "describe")


def _is_policy(target: Any) -> bool:
    return _instance_with(target, "name", "new_session", "describe")


def _instance_with(target: Any, *attributes: str) -> bool:
    """An object (not a class) with these attributes: what a Model or Policy protocol asks."""
    return not isinstance(target, type) and all(hasattr(target, a) for a in attributes)


def _played(model: Model, codec: Codec, settings: PolicySettings) -> ChunkPolicy:
    return ChunkPolicy(
        model,
        codec,
        execute_steps=settings.execute_steps,
        latency=settings.latency,
        anchor=settings.anchor,
        seed=settings.seed,
        warm_start=settings.warm_start,
    )


def _lerobot(name: str, eval: Eval, settings: PolicySettings) -> ChunkPolicy:
    from policybench.policy.lerobot import load_model

    _lerobot_codec(eval)  # before loading: a suite without the codec is told so at once
    return lerobot_policy(load_model(name, settings.device, settings.seed), eval, settings)


def lerobot_policy(model: LeRobotModel, eval: Eval, settings: PolicySettings) -> ChunkPolicy:
    """A LeRobotModel (a checkpoint's or an in-memory policy's) played through `eval`'s
    `lerobot` codec, its action width checked against the env's."""
    from policybench.policy.lerobot import check_action_width

    codec = _lerobot_codec(eval)
    check_action_width(model, codec)
    return _played(model, codec, settings)


def _lerobot_codec(eval: Eval) -> Codec:
    codec = eval.codecs.get(LEROBOT_CODEC)
    if codec is None:
        raise PolicyUnavailable(
            f"eval {eval.name!r} declares no LeRobot codec (Eval.codecs['lerobot']), so its "
            "observations have no LeRobot form"
        )
    return codec


def _entry_point(name: str) -> Any:
    check_policy_name(name)
    (entry,) = entry_points(group=ENTRY_POINT_GROUP, name=name)
    return entry.load()
