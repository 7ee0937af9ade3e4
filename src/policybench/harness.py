"""Runs one Rollout on its Eval's World with a Policy, in simulated time, into an Episode.

The clock advances by the Eval's control period per step, so a run is deterministic and
independent of machine load. The harness never raises: whatever breaks becomes an `error`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

import numpy as np

from policybench import keys
from policybench.gl import no_backend_reason
from policybench.policy.base import (
    EndEpisode,
    InfrastructureError,
    Observation,
    Policy,
    Session,
    SessionContext,
    release,
)
from policybench.record.episode import Episode, Outcome, OutcomeKind, TraceStep
from policybench.spec import Eval, Rollout
from policybench.world import World

ENV_RESET, ENV_STEP, POLICY, RECORDER = "env reset", "env step", "policy", "recorder"
SESSION_CLOSE, POLICY_DESCRIBE = "session close", "policy describe"


class ActionError(ValueError):
    """A policy answered an action the env cannot take."""


def planned_statics(rollout: Rollout, eval: Eval) -> dict[str, Any]:
    """What is known of a rollout before it runs: its Eval's settings, task, scene, instruction."""
    return {
        keys.EVAL: eval.name,
        keys.TASK: rollout.scene.task,
        keys.INSTRUCTION: rollout.instruction,
        keys.ROLLOUT_INDEX: rollout.index,
        keys.ROLLOUT_COUNT: rollout.count,
        keys.SCENE: rollout.scene.as_record(),
        keys.CONTROL_HZ: eval.control_hz,
        keys.TIMEOUT_S: rollout.timeout_s,
        keys.STOP_ON_SUCCESS: eval.stop_on_success,
        keys.HOLD: eval.hold_name,
        keys.EVAL_SETTINGS: dict(eval.metadata),
    }


def statics_of(rollout: Rollout, eval: Eval, policy: Policy | None, world: World) -> dict[str, Any]:
    return {
        **planned_statics(rollout, eval),
        keys.POLICY: None if policy is None else policy.describe(),
        keys.PACKAGES: {"policybench": _own_version(), **world.packages},
    }


Observer = Callable[[int, Observation], None]
"""Sees `(time_ns, obs)` at every control step, before the step's action: for recorders."""


@runtime_checkable
class Recorder(Protocol):
    """An Observer that keeps what it saw, and forgets it when the rollout is run again."""

    def __call__(self, time_ns: int, obs: Observation) -> None: ...

    def restart(self) -> None: ...


@dataclass
class _Played:
    """What a rollout has done so far: its statics, its steps, its first success, its session,
    and what was running (`phase`), to name the culprit if something raises."""

    statics: dict[str, Any]
    started: float = field(default_factory=time.perf_counter)
    trace: list[TraceStep] = field(default_factory=list)
    success_step: int | None = None
    session: Session | None = None
    phase: str = ENV_RESET


def run_rollout(
    rollout: Rollout, world: World, policy: Policy, observer: Observer | None = None
) -> Episode:
    """Runs `rollout` on `world` (a World of the rollout's Eval) with `policy`."""
    eval = world.eval
    if rollout.eval != eval.name:
        raise ValueError(
            f"rollout {rollout.id!r} belongs to eval {rollout.eval!r}, but the World is of eval "
            f"{eval.name!r}; run it on a World of its own Eval"
        )
    played = _Played(statics_of(rollout, eval, None, world))  # the policy is described at the end
    try:
        kind, reason = _play(rollout, world, policy, observer, played)
    except ActionError as error:
        return _finished(played, world, policy, OutcomeKind.ERROR, str(error))
    except Exception as error:
        said = f"{played.phase} raised {type(error).__name__}: {error}"
        if played.phase in (ENV_RESET, ENV_STEP):
            world.discard()
            no_gl = no_backend_reason()  # the env may have failed to render for want of one
            said += f" ({no_gl})" if no_gl else ""
        return _finished(
            played,
            world,
            policy,
            OutcomeKind.ERROR,
            said,
            traceback.format_exc(),
            transient=isinstance(error, InfrastructureError),
        )
    return _finished(played, world, policy, kind, reason)


def _play(
    rollout: Rollout, world: World, policy: Policy, observer: Observer | None, played: _Played
) -> tuple[OutcomeKind, str]:
    """Steps the rollout to its end; its outcome and reason (what raises is the caller's)."""
    eval = world.eval
    period_ns, timeout_ns = eval.control_period_ns, round(rollout.timeout_s * 1e9)
    hold, stop_on_success = eval.hold, eval.stop_on_success
    obs = world.reset(rollout.scene, rollout.perturbation)
    played.phase = POLICY
    context = SessionContext(
        instruction=rollout.instruction,
        control_hz=eval.control_hz,
        fields={name: rollout.scene.fields[name] for name in eval.policy_facing},
        draws_key=draws_key(rollout, eval),
    )
    session = played.session = checked_session(policy.new_session(context), policy.name)
    expected_shape, policy_name = world.action_space.shape, policy.name
    trace = played.trace
    record = trace.append
    time_ns = resume_at_ns = 0
    last_action: np.ndarray | None = None
    while True:
        if observer is not None:
            played.phase = RECORDER
            observer(time_ns, obs)
        commands = None
        if time_ns >= resume_at_ns:
            played.phase = POLICY
            answer = session(obs, time_ns)
            if isinstance(answer, EndEpisode):
                return OutcomeKind.UNSOLVED, f"policy ended the episode: {answer.reason}"
            commands, resume_at_ns = answer.commands, answer.resume_at_ns
        if commands is None:
            action = hold(last_action, obs)
        else:
            action = last_action = check_action(commands, expected_shape, policy_name)
        played.phase = ENV_STEP
        result = world.step(action)
        record(TraceStep(time_ns, action, result.reward, result.success))
        time_ns += period_ns
        obs = result.obs
        if result.success and played.success_step is None:
            played.success_step = len(trace) - 1
            if stop_on_success:
                return OutcomeKind.SOLVED, f"success at step {played.success_step}"
        if time_ns >= timeout_ns or result.terminated or result.truncated:
            break
    if played.success_step is not None:
        return OutcomeKind.SOLVED, f"success at step {played.success_step}"
    why = "timeout" if time_ns >= timeout_ns else "env ended the episode"
    return OutcomeKind.UNSOLVED, f"{why} after {len(trace)} steps ({time_ns / 1e9:g} s)"


def _finished(
    played: _Played,
    world: World,
    policy: Policy,
    kind: OutcomeKind,
    reason: str,
    details: str = "",
    transient: bool = False,
) -> Episode:
    """The rollout's Episode. The session ends, then the policy is described (a served one knows
    its model once connected): either may raise, which is the rollout's error unless it had one
    already."""
    session, statics = played.session, played.statics
    for what, end in (
        (SESSION_CLOSE, lambda: session is None or release(session)),
        (POLICY_DESCRIBE, lambda: statics.update({keys.POLICY: policy.describe()})),
    ):
        try:
            end()
        except Exception as error:
            said = f"{what} raised {type(error).__name__}: {error}"
            if kind is OutcomeKind.ERROR:
                details += f"\n\nthen {said}\n{traceback.format_exc()}"
            else:
                kind, reason, details = OutcomeKind.ERROR, said, traceback.format_exc()
                transient = isinstance(error, InfrastructureError)
    return Episode(
        statics=statics,
        trace=tuple(played.trace),
        outcome=Outcome(kind, reason, details, transient),
        sim_s=len(played.trace) * world.eval.control_period_ns / 1e9,
        wall_s=time.perf_counter() - played.started,
        success_step=played.success_step,
        calls=() if session is None else tuple(session.calls),
        success_reported=world.success_reported,
        action_bounds=world.action_bounds,
    )


def draws_key(rollout: Rollout, eval: Eval) -> str:
    """A digest of the rollout's Eval and scene: what seeds its session's latency draws (with the
    run's seed), so the same scene gets the same draws in any run, at any -n, in any order."""
    scene = json.dumps(rollout.scene.as_record(), sort_keys=True, default=str)
    return hashlib.sha256(f"{eval.name}\n{scene}".encode()).hexdigest()[:32]


def error_episode(rollout: Rollout, world: World, reason: str, details: str = "") -> Episode:
    """The Episode of a rollout that broke before it could start (env or policy not built)."""
    return Episode(
        statics=statics_of(rollout, world.eval, None, world),
        trace=(),
        outcome=Outcome(OutcomeKind.ERROR, reason, details),
        sim_s=0.0,
        wall_s=0.0,
        success_step=None,
    )


@functools.cache
def _own_version() -> str:
    return metadata.version("policybench")


def checked_session(session: Any, policy_name: str) -> Any:
    """A session that keeps the Session contract's model-call accounting; TypeError if not."""
    if not callable(session) or not hasattr(session, "calls"):
        raise TypeError(
            f"policy {policy_name!r} opened a {type(session).__name__}, which is not a Session: "
            "a Session is called as session(obs, time_ns) and lists its model calls in `calls` "
            "(an empty list if it calls none; a wrapper passes its inner session's on)"
        )
    return session


def check_action(action: Any, expected_shape: tuple[int, ...], policy_name: str) -> np.ndarray:
    """The action as the env takes it; a wrong shape, dtype or a NaN is an ActionError."""
    array = action if type(action) is np.ndarray else np.asarray(action)
    if array.shape != expected_shape:
        raise ActionError(
            f"policy {policy_name!r} answered action of shape {array.shape}, expected "
            f"{expected_shape}; check the model's action dimension or the codec's action slice"
        )
    # A sum is NaN or infinite exactly when an element is (short of overflowing 1e308).
    if array.dtype.kind not in "fiu" or not math.isfinite(array.sum()):
        raise ActionError(
            f"policy {policy_name!r} answered an action that is not all finite numbers "
            f"(dtype {array.dtype}): {array}"
        )
    return array
